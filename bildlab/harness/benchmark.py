"""Side-by-side timing of decoders on the same pair and inputs: Hugging Face `generate` (greedy and
assisted) and bildlab's methods, under the one timing protocol (`timing`), so that machine drift
hits every method alike.

Only ratios measured in one run mean anything on a shared machine; absolute times are reported,
never asserted."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

import torch
import transformers

from ..engine import capabilities, timing
from ..engine.decoding import generate
from ..engine.early_exit import decoder_layers
from ..engine.policy import DEFAULTS as DEFAULT_POLICY
from ..engine.policy import Policy
from ..measure.intervals import interval, ratio_of_sums

METHODS = ("hf_greedy", "hf_assisted", "greedy", "speculative", "bild")
# must all give the large model's greedy output
LOSSLESS = ("hf_greedy", "hf_assisted", "greedy", "speculative")


def transformers_version() -> tuple[int, int]:
    # a dependency of transformers; copes with "5.22.0.dev0", "5.22rc1"
    from packaging.version import Version

    return Version(transformers.__version__).release[:2]


class _AssistantNotice(logging.Filter):
    """Drops one deprecation notice that transformers 5.x logs about its own code: its assisted
    generation passes the assistant's `generate` a `generation_config` together with generation
    arguments. A caller can do nothing about it, and a notebook would store it as a warning box."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(
            "Passing `generation_config` together with generation-related"
        )


_NOTICE = _AssistantNotice()


def hf_generate(
    large,
    input_ids,
    *,
    max_new_tokens: int,
    eos,
    assistant=None,
    k: int = 4,
    lookup: bool = False,
    ngram: int = 2,
) -> list[int]:
    """Transformers' own greedy `generate` (assisted by `assistant` when given: k tokens a step,
    constant schedule, no confidence threshold; with `lookup`, its prompt lookup:
    `prompt_lookup_num_tokens=k`, `max_matching_ngram_size=ngram`); the new tokens only. Plain
    greedy whatever the checkpoint's generation config says (num_beams=1, no sampling)."""
    kwargs = dict(
        do_sample=False,
        num_beams=1,
        max_new_tokens=max_new_tokens,
        eos_token_id=eos,
        pad_token_id=large.generation_config.pad_token_id or 0,
    )
    if assistant is not None:
        _check_assistant(assistant)
        notices = logging.getLogger("transformers.generation.utils")
        if _NOTICE not in notices.filters:
            notices.addFilter(_NOTICE)
        kwargs.update(
            assistant_model=assistant,
            num_assistant_tokens=k,
            num_assistant_tokens_schedule="constant",
            assistant_confidence_threshold=0.0,
        )
    elif lookup:
        kwargs.update(prompt_lookup_num_tokens=k, max_matching_ngram_size=ngram)
    out = large.generate(input_ids, **kwargs, **capabilities.hf_cache(large))
    start = 1 if large.config.is_encoder_decoder else input_ids.shape[1]
    return out[0, start:].tolist()


def _check_assistant(assistant) -> None:
    """transformers' assisted generate builds the assistant's cache itself, sized by the encoder's
    depth (5.x): an encoder-decoder assistant whose decoder is deeper is refused here, by name,
    instead of failing deep inside transformers."""
    if not assistant.config.is_encoder_decoder:
        return
    encoder = [m for m in assistant.get_encoder().children() if isinstance(m, torch.nn.ModuleList)]
    deep, shallow = len(decoder_layers(assistant)), sum(len(m) for m in encoder)
    if deep > shallow:
        raise capabilities.Unsupported(
            f"transformers' assisted generate cannot run the assistant {type(assistant).__name__}: "
            f"its decoder ({deep} layers) is deeper than its encoder ({shallow}), and transformers "
            "sizes the assistant's cache by the encoder"
        )


def run(
    name: str,
    large,
    small,
    input_ids,
    *,
    max_new_tokens: int,
    eos,
    policy: Policy = DEFAULT_POLICY,
    cache: str = "dynamic",
    compile: bool = False,
) -> tuple[list[int], dict]:
    """Decode one input with the method `name` (bildlab's METHODS, or "hf_greedy" / "hf_assisted")
    and the rest of `policy` (k, fallback, rollback, max_small_steps); `cache`, `compile`: bildlab's
    engine (`decoding.generate`)."""
    if name in ("hf_greedy", "hf_assisted"):
        assistant = small if name == "hf_assisted" else None
        return hf_generate(
            large,
            input_ids,
            max_new_tokens=max_new_tokens,
            eos=eos,
            assistant=assistant,
            k=policy.k,
        ), {}
    out = generate(
        large,
        input_ids,
        small=small,
        policy=dataclasses.replace(policy, method=name),
        max_new_tokens=max_new_tokens,
        eos_token_id=eos,
        cache=cache,
        compile=compile,
    )
    return out.tokens, out.stats


@dataclass
class Result:
    seconds: dict[str, float] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    outputs: dict[str, list[list[int]]] = field(default_factory=dict)
    large_calls: dict[str, int] = field(default_factory=dict)
    small_tokens: dict[str, int] = field(default_factory=dict)
    per_input: dict[str, list[float]] = field(default_factory=dict)  # each input's seconds

    def speedup(self, name: str, baseline: str = "greedy") -> tuple[float, float, float]:
        """The baseline's time over `name`'s, summed over the inputs, and its 95% paired-bootstrap
        interval (as the study's speedups: `intervals.ratio_of_sums`)."""
        base, t = self.per_input[baseline], self.per_input[name]
        return (sum(base) / sum(t), *interval(lambda idx: ratio_of_sums(base, t, idx), len(t)))

    def same(self, name: str, reference: str = "greedy") -> int:
        """How many inputs `name` decoded to exactly the tokens of `reference`."""
        return sum(a == b for a, b in zip(self.outputs[name], self.outputs[reference]))

    def tokens_per_second(self, name: str) -> float:
        return self.tokens[name] / self.seconds[name]

    def ratio(self, name: str, baseline: str) -> float:
        """Speed of `name` over `baseline` (tokens/s over tokens/s)."""
        return self.tokens_per_second(name) / self.tokens_per_second(baseline)

    def identical(self, name: str, reference: str = "hf_greedy") -> bool:
        return self.outputs[name] == self.outputs[reference]

    def table(self, baseline: str = "hf_greedy") -> list[dict]:
        rows = []
        for name in self.seconds:
            calls = self.large_calls.get(name)
            rows.append(
                {
                    "method": name,
                    "tokens/s": round(self.tokens_per_second(name), 1),
                    f"x {baseline}": round(self.ratio(name, baseline), 2),
                    "tokens per large call": round(self.tokens[name] / calls, 2) if calls else None,
                    "same as greedy": self.identical(name)
                    if name in LOSSLESS or name == "bild"
                    else None,
                }
            )
        return rows


def compare(
    large,
    small,
    inputs: list[torch.Tensor],
    methods=METHODS,
    *,
    max_new_tokens: int = 64,
    eos=None,
    warmup: int = 2,
    threads: int | None = 1,
    repeats: int = 1,
    progress: bool = False,
    policy: Policy = DEFAULT_POLICY,
) -> Result:
    """Time every method on every input under the one protocol (`timing.interleave`: `warmup`
    untimed decodes of the first inputs, fixed threads, the method order rotating per input, the
    median of `repeats`). `policy`: k, fallback, rollback and max_small_steps of every method."""
    if (
        "hf_assisted" in methods
        and large.config.is_encoder_decoder
        and transformers_version() < (5, 22)
    ):
        raise RuntimeError(
            f"Hugging Face assisted generation of encoder-decoder models fails inside transformers < "
            f"5.22 (found {transformers.__version__}): upgrade transformers, or leave 'hf_assisted' "
            f"out of methods"
        )
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ValueError(f"methods must be among {', '.join(METHODS)}; got {list(methods)!r}")
    if not inputs:
        raise ValueError("inputs must not be empty")
    if eos is None:
        eos = large.generation_config.eos_token_id
    runners = {
        name: (
            lambda name: (
                lambda x, i: run(
                    name, large, small, x, max_new_tokens=max_new_tokens, eos=eos, policy=policy
                )
            )
        )(name)
        for name in methods
    }
    rows = timing.interleave(
        inputs,
        runners,
        warmup=warmup,
        threads=threads,
        repeats=repeats,
        progress="benchmark" if progress else False,
    )
    result = Result()
    for name in methods:
        result.seconds[name] = sum(row[name]["seconds"] for row in rows)
        result.tokens[name] = sum(len(row[name]["tokens"]) for row in rows)
        result.outputs[name] = [row[name]["tokens"] for row in rows]
        result.per_input[name] = [row[name]["seconds"] for row in rows]
        result.small_tokens[name] = sum(row[name]["stats"].get("small_tokens", 0) for row in rows)
        calls = sum(row[name]["stats"].get("large_calls", 0) for row in rows)
        if calls:
            result.large_calls[name] = calls
    return result


def random_pair(n_inputs: int = 64):
    """A tiny random T5 pair (6 layers / 2 layers) and random inputs: engine overhead, no download."""
    import transformers as tf

    def t5(layers, d_model, seed):
        torch.manual_seed(seed)
        cfg = tf.T5Config(
            vocab_size=512,
            d_model=d_model,
            d_ff=4 * d_model,
            d_kv=64,
            num_heads=d_model // 64,
            num_layers=layers,
            decoder_start_token_id=0,
            eos_token_id=1,
            pad_token_id=0,
        )
        return tf.T5ForConditionalGeneration(cfg).eval()

    large, small = t5(6, 256, 0), t5(2, 128, 1)
    inputs = [
        torch.randint(2, 512, (1, 24), generator=torch.Generator().manual_seed(i))
        for i in range(n_inputs)
    ]
    return large, small, inputs
