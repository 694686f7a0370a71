"""Decoding over unmodified Hugging Face models: greedy / sampling, speculative decoding and the Big
Little Decoder.

All methods are ONE loop (`generate`). Each iteration has two phases:

    draft   the small model proposes tokens one at a time until a *draft-stop rule* says stop;
    verify  the large model scores the committed tail plus every drafted token in one forward pass, and an
            *acceptance rule* keeps a prefix of the draft and appends one token of the large model's own.

The methods differ only in those two small rules:

    method        draft stops when                                   acceptance rule
    greedy/sample never drafts (the large model alone)               -
    speculative   k tokens were drafted                              greedy: longest prefix equal to the large argmax
                                                                     sampling: min(1, p/q), residual norm(max(0, p-q))
    prompt-lookup no model: up to k tokens copied from the input     greedy (as speculative)
                  and output after the first occurrence of their
                  last n-gram, n <= ngram (`lookup.py`)
    bild          small max-prob < fallback (token discarded),       rollback: first token with -log p_L > rollback
                  or max_small_steps tokens in a row                 (and != the large argmax) is replaced; option
                                                                     rollback_rule="first-above": the paper's code

Every model keeps its own KV cache (`views.py`: transformers `Cache` objects); rejected positions
are cropped, encoders run once per input, and the prefix is never recomputed. A draft that is an
early exit of the large model (`early_exit.py`) has no cache or encoder run of its own: it uses the
large model's encoder outputs and the cache of its bottom layers. Batch size 1, as in the papers."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel

from . import static
from .capabilities import require_pair
from .early_exit import shares_bottom_layers
from .lookup import NgramDraft
from .timing import clock as _clock
from .views import EarlyExitView, View

METHODS = ("greedy", "sample", "speculative", "bild", "prompt-lookup")


@dataclass
class Output:
    # the new tokens only (no prompt, no decoder start token); EOS included when produced
    tokens: list[int]
    stats: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------------------------------
# Token choice (shared by the draft and the target)


def _probs(
    logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None
) -> torch.Tensor:
    """The sampling distribution: temperature, then top-k, then top-p (nucleus), then softmax. Rows
    are positions."""
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(-1)
        # the mass before this token already covers top_p
        drop = sorted_probs.cumsum(-1) - sorted_probs >= top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), -math.inf)
    return logits.softmax(-1)


# ----------------------------------------------------------------------------------------------------------------------
# Draft-stop rules: given how many tokens were drafted and the confidence of the next one, is the
# draft over?


def _stop_never_draft(n: int, confidence: float | None) -> bool:
    return True


def _stop_fixed_length(k: int):
    def stop(n: int, confidence: float | None) -> bool:
        return n >= k

    return stop


def _stop_bild_fallback(fallback: float, max_small_steps: int):
    def stop(n: int, confidence: float | None) -> bool:
        # hand-off to the large model after N small tokens in a row, or when the small model is
        # unsure (its token is then discarded); fallback = 1 always hands off, so the small model is
        # not even asked.
        return (
            n >= max_small_steps
            or fallback >= 1.0
            or (confidence is not None and confidence < fallback)
        )

    return stop


# ----------------------------------------------------------------------------------------------------------------------
# Acceptance rules: given the m drafted tokens and the large model's logits at the m+1 positions
# that predict each of them and the token after them, flag the drafted tokens that are rejected
# (`bad`) and give the large model's token to follow each prefix (`follow`, m+1 of them). `_decide`
# keeps the draft up to the first rejection, then that follower.


def _decide(draft: torch.Tensor, bad: torch.Tensor, follow: torch.Tensor) -> tuple[list[int], int]:
    m = len(draft)
    host = torch.cat([bad.long(), draft, follow]).tolist()  # the one host transfer per verification
    n = next((i for i in range(m) if host[i]), m)
    return host[m : m + n], host[2 * m + n]


def _accept_greedy(
    draft: torch.Tensor, logits: torch.Tensor, q: torch.Tensor
) -> tuple[list[int], int]:
    """Keep the longest prefix equal to the large argmax, then the large argmax (a correction or a
    bonus token)."""
    target = logits.argmax(-1)
    return _decide(draft, draft != target[: len(draft)], target)


ROLLBACK_RULES = ("first-differing", "first-above")


def _accept_rollback(rollback: float, rule: str = "first-differing"):
    def accept(draft: torch.Tensor, logits: torch.Tensor, q: torch.Tensor) -> tuple[list[int], int]:
        """BiLD rollback: a drafted token y with -log p_L(y) > rollback that differs from the large
        argmax is replaced by the argmax, and the rest of the draft is dropped. "first-differing"
        (bildlab's default): the first such token; rollback=0 is then `_accept_greedy`.
        "first-above" (the paper's public code): only the first token above the threshold is
        examined; when it equals the large argmax nothing is rolled back."""
        target = logits.argmax(-1)
        m = len(draft)
        nll = -logits[:m].log_softmax(-1).gather(-1, draft[:, None])[:, 0]
        above = nll > rollback
        if rule == "first-above":
            above = above & (above.cumsum(0) == 1)
        return _decide(draft, above & (draft != target[:m]), target)

    return accept


def _accept_sampling(
    temperature: float, top_k: int | None, top_p: float | None, generator: torch.Generator
):
    def accept(draft: torch.Tensor, logits: torch.Tensor, q: torch.Tensor) -> tuple[list[int], int]:
        """Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): keep drafted token x with
        probability min(1, p(x)/q(x)); at the first rejection sample from norm(max(0, p - q)); after
        a full accept, from p."""
        # [m+1, V], processed exactly like the draft's q
        p = _probs(logits, temperature, top_k, top_p)
        m = len(draft)
        rows = torch.arange(m, device=draft.device)
        u = torch.rand(m, generator=generator, device=draft.device)
        bad = u * q[rows, draft] > p[rows, draft]
        # one follower per position, drawn in a single call: the residual rows, then p itself for
        # the bonus token
        residual = (p[:m] - q).clamp_min(0)
        residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, p[:m])
        follow = torch.multinomial(torch.cat([residual, p[m:]]), 1, generator=generator)[:, 0]
        return _decide(draft, bad, follow)

    return accept


# ----------------------------------------------------------------------------------------------------------------------
# The loop


@torch.inference_mode()
def generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    *,
    small: PreTrainedModel | None = None,
    method: str = "greedy",
    max_new_tokens: int = 128,
    eos_token_id: int | list[int] | None = None,
    k: int = 4,
    fallback: float = 0.6,
    rollback: float = 5.0,
    max_small_steps: int = 10,
    rollback_rule: str = "first-differing",
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    ngram: int = 2,
    cache: str = "dynamic",
    compile: bool = False,
) -> Output:
    """Generate with the large `model` alone ("greedy", "sample"), helped by the `small` model
    ("speculative", "bild"), or by drafts without a model ("prompt-lookup": up to `k` tokens copied
    from the input and output after their last n-gram, n <= `ngram`, `lookup.py`; `small` is not
    used).

    `input_ids` is a [1, n] LongTensor: the source for encoder-decoder models, the prompt for
    decoder-only ones. `small` is a separate model or an early exit of `model` (`exit_draft(model,
    layers)`, which then shares the large model's encoder outputs and KV cache). Returns
    `Output(tokens, stats)`; `tokens` are the new tokens only. See the module docstring for the
    methods. Lossless modes (greedy, greedy speculative, prompt-lookup, bild with fallback=1 or
    rollback=0) equal the large model's greedy output; speculative sampling has the large model's
    sampling law (temperature / top-k / top-p applied to both). What cannot be exact for these
    models is refused before the first token (`capabilities.Unsupported`). `cache="static"`:
    preallocated caches whose rollback only moves a position; `compile=True` (static only): compiled
    steps of a few fixed shapes (`static.py`; `static.warm_up` compiles them ahead of timing)."""
    input_ids = _check(
        model,
        input_ids,
        small,
        method,
        max_new_tokens,
        k,
        fallback,
        rollback,
        max_small_steps,
        do_sample,
        temperature,
        top_k,
        top_p,
        seed,
        rollback_rule,
        ngram,
    )
    static.check(cache, compile)
    require_pair(
        model,
        small,
        method,
        drafts=method == "speculative" or (method == "bild" and fallback < 1.0),
    )
    do_sample = do_sample or method == "sample"
    eos = eos_ids(model, eos_token_id)
    device = input_ids.device
    t_start = _clock(device)

    # the shared sequence buffer: [decoder start] or the prompt, then the output; drafts are written
    # past `pos`
    if model.config.is_encoder_decoder:
        prefix = torch.tensor([[decoder_start(model)]], device=device)
    else:
        prefix = input_ids
    P = prefix.shape[1]
    seq = torch.empty((1, P + max_new_tokens), dtype=torch.long, device=device)
    seq[:, :P] = prefix
    end = P + max_new_tokens  # the budget, as a buffer position

    generator = None
    if do_sample:
        generator = torch.Generator(device=device)
        generator.manual_seed(seed if seed is not None else torch.seed())

    # the two rules for this method
    if method in ("greedy", "sample", "prompt-lookup"):  # prompt lookup has no draft model
        stop = _stop_never_draft
    elif method == "speculative":
        stop = _stop_fixed_length(k)
    else:
        stop = _stop_bild_fallback(fallback, max_small_steps)
    if do_sample:
        accept = _accept_sampling(temperature, top_k, top_p, generator)
    elif method == "bild":
        accept = _accept_rollback(rollback, rollback_rule)
    else:
        accept = _accept_greedy
    # only BiLD's stop rule reads the draft's confidence (a host sync per token)
    needs_confidence = method == "bild"

    # a drafter whose stop rule never lets it draft (greedy, sample, bild with fallback=1) is not
    # even started
    runs_draft = small is not None and method != "prompt-lookup" and not stop(0, None)
    if cache == "static":  # preallocated caches: a rollback moves a position (static.py)
        large, drafter = static.views(
            model, small, input_ids, P, max_new_tokens, compile, runs_draft
        )
    else:
        large, drafter = View(model, input_ids), None
        if runs_draft:
            drafter = (
                EarlyExitView(small, large)
                if shares_bottom_layers(small, model)
                else View(small, input_ids)
            )
    # prompt lookup drafts from the context, on the host (the committed tokens are there after each
    # verification)
    lookup = NgramDraft(input_ids[0].tolist(), ngram, k, eos) if method == "prompt-lookup" else None
    stats = dict(
        small_tokens=0,
        large_tokens=0,
        small_calls=0,
        large_calls=0,
        drafted=0,
        accepted=0,
        fallbacks=0,
        rollbacks=0,
        drafts=0,
    )
    # drafts whose i-th token was accepted
    accepted_at = [0] * draft_width(method, k, max_small_steps)
    pos = P  # committed length of `seq`
    first = method == "bild"  # BiLD: the first decoder step is the large model's
    t0 = _clock(device)
    while pos < end:
        # ---- draft: the small model writes seq[pos : pos + m]
        m, q_rows = 0, []
        if lookup is not None:  # ---- or the draft is copied from the context: seq[pos : pos + m]
            draft = lookup.draft(end - pos)
            m = len(draft)
            if m:
                seq[0, pos : pos + m] = torch.tensor(draft, dtype=torch.long)
        while drafter is not None and not first and pos + m < end and not stop(m, None):
            logits = drafter.logits(seq, pos + m, 1)[-1]
            if do_sample:
                q = _probs(logits, temperature, top_k, top_p)
                token = torch.multinomial(q, 1, generator=generator)[0]
                q_rows.append(q)
            else:
                token = logits.argmax()
            # BiLD: a low-confidence token is discarded and the large model takes over
            if needs_confidence:
                # confidence and token id in one transfer (ids are exact in float32)
                confidence, token_id = torch.stack(
                    [logits.softmax(-1)[token], token.float()]
                ).tolist()
                if stop(m, confidence):
                    stats["fallbacks"] += 1
                    break
            seq[0, pos + m] = token
            m += 1
            if needs_confidence and int(token_id) in eos:
                break  # a confident EOS ends the draft; the large model still checks it
        first = False
        if drafter is not None:
            drafter.hand_over()  # an early exit leaves the shared cache to the large model
        t1 = _clock(device)
        if drafter is not None:
            drafter.seconds += t1 - t0

        # ---- verify: the large model scores the tail and all m drafted tokens in one pass
        logits = large.logits(seq, pos + m, m + 1)
        q = torch.stack(q_rows) if q_rows else logits[:0]
        kept, token = accept(seq[0, pos : pos + m], logits, q)

        # ---- commit: the kept draft, then the large model's token (unless the budget is used up);
        # stop at EOS
        n = len(kept)
        new = kept if pos + n == end else kept + [token]
        cut = next((i + 1 for i, t in enumerate(new) if t in eos), None)
        new = new[:cut]
        if len(new) > n:
            seq[0, pos + n] = token
        n_small = min(n, len(new))
        stats["drafted"] += m
        stats["accepted"] += n_small
        stats["small_tokens"] += n_small
        stats["large_tokens"] += len(new) - n_small
        stats["rollbacks"] += int(n < m)
        if m:
            stats["drafts"] += 1
            for i in range(n_small):
                accepted_at[i] += 1
        # the verified positions stay cached; the large model's token is fed next time
        large.crop(pos + n)
        if drafter is not None:
            drafter.crop(pos + n)
        pos += len(new)
        if lookup is not None:
            lookup.extend(new)
        t0 = _clock(device)  # the end of this verification is the start of the next draft
        large.seconds += t0 - t1
        if cut is not None:
            break

    tokens = seq[0, P:pos].tolist()
    stats["accepted_at"] = accepted_at
    stats["large_calls"] = large.calls
    stats["large_seconds"] = large.seconds
    stats["small_calls"] = drafter.calls if drafter else 0
    stats["small_seconds"] = drafter.seconds if drafter else 0.0
    stats["seconds"] = _clock(device) - t_start
    return Output(tokens, stats)


# ----------------------------------------------------------------------------------------------------------------------
# Configuration and argument checks (all before any model call)


def draft_width(method: str, k: int, max_small_steps: int) -> int:
    """The longest draft a method makes: its `accepted_at` counts (stats) have one entry per draft
    position."""
    return {"speculative": k, "prompt-lookup": k, "bild": max_small_steps}.get(method, 0)


def eos_ids(model: PreTrainedModel, eos_token_id) -> frozenset[int]:
    if eos_token_id is None:
        eos_token_id = model.generation_config.eos_token_id
    if eos_token_id is None:
        return frozenset()
    return frozenset(
        [eos_token_id] if isinstance(eos_token_id, int) else [int(t) for t in eos_token_id]
    )


def truncated(tokens: list[int], max_new_tokens: int, eos: frozenset) -> bool:
    """Whether an output ran to the generation budget without ending (no EOS at its end)."""
    return len(tokens) >= max_new_tokens and not (tokens and tokens[-1] in eos)


def decoder_start(model: PreTrainedModel) -> int:
    for value in (
        model.generation_config.decoder_start_token_id,
        getattr(model.config, "decoder_start_token_id", None),
        model.generation_config.bos_token_id,
    ):
        if value is not None:
            return int(value if isinstance(value, int) else value[0])
    raise ValueError(
        "model: an encoder-decoder model needs decoder_start_token_id in its config or generation config"
    )


def _vocab_size(model: PreTrainedModel) -> int:
    return model.get_output_embeddings().weight.shape[0]


def is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_policy(
    method: str,
    max_new_tokens: int = 128,
    k: int = 4,
    fallback: float = 0.6,
    rollback: float = 5.0,
    max_small_steps: int = 10,
    rollback_rule: str = "first-differing",
    ngram: int = 2,
) -> None:
    """Validate a decoding method and its policy without any model (the harness checks sweeps up
    front)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}; got {method!r}")
    if not is_int(max_new_tokens) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0; got {max_new_tokens!r}")
    if not is_int(k) or k < 1:
        raise ValueError(f"k (the maximum draft length) must be an integer >= 1; got {k!r}")
    if not is_int(max_small_steps) or max_small_steps < 1:
        raise ValueError(f"max_small_steps must be an integer >= 1; got {max_small_steps!r}")
    if (
        isinstance(fallback, bool)
        or not isinstance(fallback, (int, float))
        or not 0.0 <= fallback <= 1.0
    ):
        raise ValueError(f"fallback (alpha_FB) must be a number in [0, 1]; got {fallback!r}")
    if (
        isinstance(rollback, bool)
        or not isinstance(rollback, (int, float))
        or math.isnan(rollback)
        or rollback < 0
    ):
        raise ValueError(
            f"rollback (alpha_RB) must be a number >= 0 (inf disables rollback); got {rollback!r}"
        )
    if rollback_rule not in ROLLBACK_RULES:
        raise ValueError(
            f"rollback_rule must be one of {', '.join(map(repr, ROLLBACK_RULES))}; got {rollback_rule!r}"
        )
    if not is_int(ngram) or ngram < 1:
        raise ValueError(
            f"ngram (prompt lookup's longest n-gram matched) must be an integer >= 1; got {ngram!r}"
        )


def _check(
    model,
    input_ids,
    small,
    method,
    max_new_tokens,
    k,
    fallback,
    rollback,
    max_small_steps,
    do_sample,
    temperature,
    top_k,
    top_p,
    seed,
    rollback_rule="first-differing",
    ngram=2,
) -> torch.Tensor:
    check_policy(
        method, max_new_tokens, k, fallback, rollback, max_small_steps, rollback_rule, ngram
    )
    if not isinstance(model, PreTrainedModel):
        raise TypeError(f"model must be a transformers PreTrainedModel; got {type(model).__name__}")
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(
            f"input_ids must be a torch.LongTensor of shape [1, n]; got {type(input_ids).__name__}"
        )
    if (
        input_ids.dtype.is_floating_point
        or input_ids.dtype.is_complex
        or input_ids.dtype == torch.bool
    ):
        raise TypeError(f"input_ids must hold integer token ids; got dtype {input_ids.dtype}")
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise ValueError(
            f"input_ids must have shape [1, n] with n >= 1; got {list(input_ids.shape)}"
        )
    if input_ids.shape[0] != 1:
        raise ValueError(
            f"input_ids: batch size {input_ids.shape[0]} is not supported by method {method!r}; "
            "bildlab decodes at batch size 1 (the papers' setting): call generate once per input"
        )
    if not isinstance(do_sample, bool):
        raise TypeError(f"do_sample must be True or False; got {do_sample!r}")
    if method == "greedy" and do_sample:
        raise ValueError(
            "do_sample=True contradicts method='greedy'; use method='sample' for the large model alone"
        )
    if method in ("bild", "prompt-lookup") and do_sample:
        raise ValueError(
            f"method={method!r} is greedy: do_sample must be False; "
            "use method='speculative' for lossless sampling with a draft model"
        )
    sampling = do_sample or method == "sample"
    if sampling:
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or not temperature > 0
        ):
            raise ValueError(f"temperature must be a number > 0 when sampling; got {temperature!r}")
        if top_k is not None and (not is_int(top_k) or top_k < 1):
            raise ValueError(f"top_k must be None or an integer >= 1; got {top_k!r}")
        if top_p is not None and (
            isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0
        ):
            raise ValueError(f"top_p must be None or a number in (0, 1]; got {top_p!r}")
    if seed is not None and not is_int(seed):
        raise TypeError(f"seed must be None or an int; got {seed!r}")
    if method in ("speculative", "bild"):
        if small is None:
            raise ValueError(f"method={method!r} needs a small (draft) model: pass small=...")
        if not isinstance(small, PreTrainedModel):
            raise TypeError(
                f"small must be a transformers PreTrainedModel; got {type(small).__name__}"
            )
        kinds = {True: "encoder-decoder", False: "decoder-only"}
        if bool(small.config.is_encoder_decoder) != bool(model.config.is_encoder_decoder):
            raise ValueError(
                f"small is {kinds[bool(small.config.is_encoder_decoder)]} but model is "
                f"{kinds[bool(model.config.is_encoder_decoder)]}: both must be of the same kind"
            )
        if _vocab_size(small) != _vocab_size(model):
            raise ValueError(
                f"small and model must share a vocabulary; vocabulary sizes differ: "
                f"{_vocab_size(small)} vs {_vocab_size(model)}"
            )
        if small.device != model.device:
            raise ValueError(
                f"small and model must be on the same device; got {small.device} and {model.device}"
            )
    if input_ids.device != model.device:
        input_ids = input_ids.to(model.device)
    return input_ids.long()
