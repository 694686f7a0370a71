"""Decoding over unmodified Hugging Face models: greedy / sampling, speculative decoding and the Big
Little Decoder.

All methods are ONE loop (`generate`). Each iteration has three phases, each a function:

    draft   the small model proposes tokens one at a time until a *draft-stop rule* says stop
            (`draft`; prompt lookup copies them from the context, `draft_lookup`);
    verify  the large model scores the committed tail plus every drafted token in one forward pass,
            and an *acceptance rule* keeps a prefix of the draft and gives the large model's token;
    commit  the kept draft and that token join the output (up to an EOS or the budget), the caches
            are cropped to the verified positions, and the verification is counted (`tally`).

The methods differ only in two small rules (`draft_stop_rule`, `acceptance_rule`; the policy is
one value, `Policy`):

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

from . import policy as policies
from . import static, tally
from .capabilities import require_pair
from .early_exit import shares_bottom_layers
from .lookup import NgramDraft
from .policy import METHODS, ROLLBACK_RULES, Policy, is_int
from .timing import clock as _clock
from .views import EarlyExitView, View

__all__ = ["METHODS", "ROLLBACK_RULES", "Output", "Policy", "generate", "is_int"]


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


def draft_stop_rule(policy: Policy):
    """The method's draft-stop rule."""
    if policy.method in ("greedy", "sample", "prompt-lookup"):  # prompt lookup has no draft model
        return _stop_never_draft
    if policy.method == "speculative":
        return _stop_fixed_length(policy.k)
    return _stop_bild_fallback(policy.fallback, policy.max_small_steps)


def acceptance_rule(policy: Policy, generator: torch.Generator | None):
    """The method's acceptance rule."""
    if policy.sampling:
        return _accept_sampling(policy.temperature, policy.top_k, policy.top_p, generator)
    if policy.method == "bild":
        return _accept_rollback(policy.rollback, policy.rollback_rule)
    return _accept_greedy


# ----------------------------------------------------------------------------------------------------------------------
# The loop: draft, verify, commit


@dataclass
class Decode:
    """One decode's state: the shared buffer (the decoder start token or the prompt, then the
    output; drafts are written past `pos`), the committed length `pos`, the budget `end` (a buffer
    position), the EOS ids and the counts (`tally`)."""

    seq: torch.Tensor
    pos: int
    end: int
    eos: frozenset
    counts: dict


def draft(run: Decode, drafter: View, stop, policy: Policy, generator) -> tuple[int, list]:
    """The draft model writes seq[pos : pos + m], one token a step, until the stop rule ends the
    draft (BiLD: a low-confidence token is discarded and counted as a fallback; a confident EOS ends
    the draft, the large model still checks it). Returns m and, when sampling, the draft's
    distributions."""
    seq, pos, end, m, q_rows = run.seq, run.pos, run.end, 0, []
    sample, confident = policy.sampling, policy.method == "bild"
    while pos + m < end and not stop(m, None):
        logits = drafter.logits(seq, pos + m, 1)[-1]
        if sample:
            q = _probs(logits, policy.temperature, policy.top_k, policy.top_p)
            token = torch.multinomial(q, 1, generator=generator)[0]
            q_rows.append(q)
        else:
            token = logits.argmax()
        if confident:  # confidence and token id in one transfer (ids are exact in float32)
            confidence, token_id = torch.stack([logits.softmax(-1)[token], token.float()]).tolist()
            if stop(m, confidence):
                run.counts["fallbacks"] += 1
                break
        seq[0, pos + m] = token
        m += 1
        if confident and int(token_id) in run.eos:
            break
    return m, q_rows


def draft_lookup(run: Decode, lookup: NgramDraft) -> int:
    """Prompt lookup's draft, copied from the context into seq[pos : pos + m]; returns m."""
    tokens = lookup.draft(run.end - run.pos)
    if tokens:
        run.seq[0, run.pos : run.pos + len(tokens)] = torch.tensor(tokens, dtype=torch.long)
    return len(tokens)


def verify(run: Decode, large: View, accept, m: int, q_rows: list) -> tuple[list[int], int]:
    """The large model scores the committed tail and the m drafted tokens in one pass; the
    acceptance rule keeps a prefix of the draft and gives the large model's next token."""
    logits = large.logits(run.seq, run.pos + m, m + 1)
    q = torch.stack(q_rows) if q_rows else logits[:0]
    return accept(run.seq[0, run.pos : run.pos + m], logits, q)


def commit(run: Decode, m: int, kept: list[int], token: int, views, lookup) -> bool:
    """The kept draft, then the large model's token unless the budget is used up; an EOS ends the
    output. Counts the verification, crops every cache to the verified positions (the large model's
    token is fed next time) and returns whether the output ended at an EOS."""
    n = len(kept)
    new = kept if run.pos + n == run.end else kept + [token]
    cut = next((i + 1 for i, t in enumerate(new) if t in run.eos), None)
    new = new[:cut]
    if len(new) > n:
        run.seq[0, run.pos + n] = token
    tally.verification(run.counts, m, n, len(new))
    for view in views:
        view.crop(run.pos + n)
    run.pos += len(new)
    if lookup is not None:
        lookup.extend(new)
    return cut is not None


@torch.inference_mode()
def generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    *,
    small: PreTrainedModel | None = None,
    policy: Policy | None = None,
    max_new_tokens: int = 128,
    eos_token_id: int | list[int] | None = None,
    seed: int | None = None,
    cache: str = "dynamic",
    compile: bool = False,
    **keywords,
) -> Output:
    """Generate with the large `model` alone ("greedy", "sample"), helped by the `small` model
    ("speculative", "bild"), or by drafts without a model ("prompt-lookup": up to `k` tokens copied
    from the input and output after their last n-gram, n <= `ngram`, `lookup.py`; `small` is not
    used). The policy is a `Policy`, or its parameters as keywords (`method="bild", fallback=0.5`).

    `input_ids` is a [1, n] LongTensor: the source for encoder-decoder models, the prompt for
    decoder-only ones. `small` is a separate model or an early exit of `model` (`exit_draft(model,
    layers)`, which then shares the large model's encoder outputs and KV cache). Returns
    `Output(tokens, stats)`; `tokens` are the new tokens only, `stats` the counts (`tally`) and
    timings. See the module docstring for the methods. Lossless modes (greedy, greedy speculative,
    prompt-lookup, bild with fallback=1 or rollback=0) equal the large model's greedy output;
    speculative sampling has the large model's sampling law (temperature / top-k / top-p applied to
    both). What cannot be exact for these models is refused before the first token
    (`capabilities.Unsupported`). `cache="static"`: preallocated caches whose rollback only moves a
    position; `compile=True` (static only): compiled steps of a few fixed shapes (`static.py`;
    `static.warm_up` compiles them ahead of timing)."""
    policy = policies.of(policy, keywords, "generate")
    input_ids = check_call(model, input_ids, small, policy, max_new_tokens, seed)
    static.check(cache, compile)
    require_pair(model, small, policy.method, drafts=policy.drafts)
    device = input_ids.device
    t_start = _clock(device)

    if model.config.is_encoder_decoder:
        prefix = torch.tensor([[decoder_start(model)]], device=device)
    else:
        prefix = input_ids
    P = prefix.shape[1]
    seq = torch.empty((1, P + max_new_tokens), dtype=torch.long, device=device)
    seq[:, :P] = prefix
    eos = eos_ids(model, eos_token_id)
    run = Decode(seq, P, P + max_new_tokens, eos, tally.counts(policy.width))

    generator = None
    if policy.sampling:
        generator = torch.Generator(device=device)
        generator.manual_seed(seed if seed is not None else torch.seed())
    stop, accept = draft_stop_rule(policy), acceptance_rule(policy, generator)

    # a drafter whose stop rule never lets it draft (greedy, sample, bild with fallback=1) is not
    # even started
    runs_draft = small is not None and policy.method != "prompt-lookup" and not stop(0, None)
    if cache == "static":  # preallocated caches: a rollback moves a position (static.py)
        large, drafter = static.views(
            model, small, input_ids, P, max_new_tokens, compile, runs_draft
        )
    else:
        large, drafter = View(model, input_ids), None
        if runs_draft:
            shares = shares_bottom_layers(small, model)
            drafter = EarlyExitView(small, large) if shares else View(small, input_ids)
    views = (large,) if drafter is None else (large, drafter)
    # prompt lookup drafts from the context, on the host (the committed tokens are there after each
    # verification)
    lookup = None
    if policy.method == "prompt-lookup":
        lookup = NgramDraft(input_ids[0].tolist(), policy.ngram, policy.k, eos)
    first = policy.method == "bild"  # BiLD: the first decoder step is the large model's
    t0 = _clock(device)
    while run.pos < run.end:
        m, q_rows = 0, []
        if lookup is not None:
            m = draft_lookup(run, lookup)
        elif drafter is not None and not first:
            m, q_rows = draft(run, drafter, stop, policy, generator)
        first = False
        if drafter is not None:
            drafter.hand_over()  # an early exit leaves the shared cache to the large model
        t1 = _clock(device)
        if drafter is not None:
            drafter.seconds += t1 - t0
        kept, token = verify(run, large, accept, m, q_rows)
        ended = commit(run, m, kept, token, views, lookup)
        t0 = _clock(device)  # the end of this verification is the start of the next draft
        large.seconds += t0 - t1
        if ended:
            break

    stats = tally.stats(run.counts, drafter.calls if drafter else 0)
    stats["large_seconds"] = large.seconds
    stats["small_seconds"] = drafter.seconds if drafter else 0.0
    stats["seconds"] = _clock(device) - t_start
    return Output(seq[0, P : run.pos].tolist(), stats)


# ----------------------------------------------------------------------------------------------------------------------
# Configuration and argument checks (all before any model call)


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


def check_budget(max_new_tokens) -> None:
    if not is_int(max_new_tokens) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0; got {max_new_tokens!r}")


def check_call(model, input_ids, small, policy: Policy, max_new_tokens, seed=None) -> torch.Tensor:
    """The models, the input, the budget and the seed of a call with `policy` (itself checked when
    it was made), before any model call; returns the input as a [1, n] LongTensor on the model's
    device."""
    method = policy.method
    check_budget(max_new_tokens)
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
