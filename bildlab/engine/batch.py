"""Exact outputs in batches: `decoding.generate`'s greedy, BiLD and greedy speculative outputs, many
inputs at once.

Two engines decode a batch (`engine=`): "ragged" (`ragged.py`), where every row drafts and the large
model verifies all rows' drafts in one pass, each row advancing by its own accepted tokens, for
speculative decoding, BiLD and prompt lookup on models whose rows can be realigned exactly
(`capabilities.ragged`); and the lockstep below, which runs both models at every position and
serves every other case. "auto" (the default) takes the ragged engine where it can run, except for
BiLD over `BILD_LOCKSTEP_ROWS` rows or more, where the lockstep was the faster (`_engine`).

    outs = generate_batch(large, [x0, x1, ...], small=small, method="bild", fallback=0.5, rollback=3.0)
    outs[i].tokens == generate(large, xs[i], small=small, method="bild", fallback=0.5, rollback=3.0).tokens

The engine's greedy outputs need no speculation to be computed. At every position, with both models
run on the committed prefix, its next token follows from the two distributions and a little per-row
state, so here both models run one position at a time over a batch of rows ("lockstep") and these
rules pick the token:

    greedy       the large argmax.
    bild         the first token is the large model's. Then, with `run` the small tokens written since the large model
                 last chose: run == max_small_steps -> the large argmax (the N-limit, checked first); the small model's
                 confidence below `fallback` (compared in float64, as the engine's `.tolist()`) -> the large argmax
                 (a fallback); the small argmax d with -log p_L(d) > `rollback` (float32) that differs from the large
                 argmax -> the large argmax (a rollback; rollback_rule="first-above" examines only the first small
                 token above the threshold since the large model last chose); else d. A confident small EOS is
                 verified like any token; at the budget the large model adds no token. fallback >= 1 is greedy.
    speculative  the large argmax (greedy speculative decoding's output is the large model's greedy output); its
                 statistics follow from where the two argmaxes agree, window by window of min(k, left) drafts.
    prompt-lookup the large argmax; its statistics are replayed from each row's output (`lookup.counts`: a draft
                 copied from the context holds no EOS, so its verification depends on the greedy output alone).

Layout: rows sorted by input length, packed into batches under a memory budget (`memory`: the peak
bytes of both models' caches, encoder outputs, prefill temporaries and logits, estimated from their
geometry by `memory.pack`; at most `batch_size` rows a batch). A CUDA out-of-memory error splits the
batch in two and decodes the halves (the tokens do not depend on the batching); `report`, a dict,
receives the budget, the rows of every batch decoded and the number of splits. Decoder-only prompts
are left-padded, with an attention mask and position ids (built as transformers' generate builds
them, for a forward that takes them); a model that takes no position ids, whose cache holds a state,
or whose padded rows do not give the unpadded row's logits (`capabilities.pads`) is never padded:
its batches hold rows of one length, without a mask (stats["layout"] says so). Encoder-decoder
sources are right-padded with an encoder attention mask (the decoder rows all start at the decoder
start token and stay aligned). Each model keeps one KV cache per batch (transformers `Cache`), fed
one token per row and step, never cropped; a finished row is dropped from the caches
(`Cache.reorder_cache`, which every cache has), masks and state at the step it finishes, so it costs
no further compute (a speculative row whose EOS was accepted inside a draft window runs on to the
window's end, at most k - 1 positions, for the engine's counts of that window). An early-exit draft
(`early_exit.exit_draft`) uses the large model's encoder outputs but keeps its own cache (its bottom
layers run twice per token; the engine recomputes them too, in the large model's pass).

Statistics: each output's `stats` holds the engine's counts that the lockstep trace gives exactly:
small_tokens, large_tokens, large_calls, accepted and rollbacks always; drafted, small_calls and
fallbacks except for BiLD rows with a rollback, where the engine also counts the small model's work
on the branch the rollback discarded (more drafted tokens, and maybe a fallback at its end), which
lockstep never computes. Counts it cannot give are left out and named in `stats["inexact"]`, which
always names the engine's timings (large_seconds, small_seconds, seconds): rows share their model
calls. Sampling is refused: a sampled output depends on the random stream of the sequential engine.
"""

from __future__ import annotations

from collections import Counter

import torch
from transformers import PreTrainedModel

from . import capabilities, tally
from . import memory as mem
from . import policy as policies
from .decoding import Output, check_call, decoder_start, eos_ids
from .early_exit import shares_bottom_layers
from .lookup import counts as lookup_counts
from .policy import Policy, is_int
from .ragged import ragged

TIMINGS = ("large_seconds", "small_seconds", "seconds")
# BiLD counts that include the work on a rolled-back branch
BRANCH = ("small_calls", "drafted", "fallbacks")


class _Rows:
    """One model run over the rows of a batch, one position per row and call: its KV cache and
    encoder outputs."""

    def __init__(
        self,
        model: PreTrainedModel,
        source=None,
        source_mask=None,
        encoded=None,
        *,
        calls=None,
        name: str = "large",
    ):
        self.model, self.calls, self.name = model, calls, name
        # positions: else the model derives them (never padded then)
        fwd = capabilities.forward(model)
        self.cache_kw, self.keep_kw, self.positions = fwd.cache_kw, fwd.keep_kw, fwd.positions
        # a decoder-only model that is never padded gets no mask, as transformers' generate drops an
        # all-ones one
        self.masked = model.config.is_encoder_decoder or capabilities.pads(model)
        self.encoded = None
        if model.config.is_encoder_decoder:
            if encoded is None:
                encoded = model.get_encoder()(input_ids=source, attention_mask=source_mask)
                tally.call(calls, f"{name} encoder", source)
            self.encoded = encoded.last_hidden_state
            # the encoder's own output class (MoE models read its router fields)
            self.wrap = type(encoded)
        self.cache = capabilities.new_cache(model, record=False)

    def logits(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor | None
    ) -> torch.Tensor:
        """Feed ids [rows, n] and return float logits [rows, vocab] at the last fed position."""
        tally.call(self.calls, self.name, ids)
        kw = {
            self.cache_kw: self.cache,
            "use_cache": True,
            "attention_mask": mask if self.masked else None,
        }
        if self.encoded is not None:
            kw.update(
                decoder_input_ids=ids, encoder_outputs=self.wrap(last_hidden_state=self.encoded)
            )
        else:
            kw["input_ids"] = ids
            if self.positions:
                kw["position_ids"] = positions
            if self.keep_kw:
                kw["logits_to_keep"] = 1
        return self.model(**kw).logits[:, -1].float()

    def select(self, keep: torch.Tensor) -> None:
        # beam search's route: every cache layer has it (batch_select_indices not)
        self.cache.reorder_cache(keep)
        if self.encoded is not None:
            self.encoded = self.encoded[keep]


# ----------------------------------------------------------------------------------------------------------------------
# The rules: from the large (and small) logits at one position of every row and the rows' state, the
# rows' tokens. Each returns (token, close): close says where the engine's verification window ends
# at this position.


def _greedy_step(t, large, small, st, policy, budget):
    return large.argmax(-1), None


def _bild_step(t, large, small, st, policy, budget):
    target = large.argmax(-1)
    if t == 0:  # the first token is the large model's: a verification of no draft
        one = torch.ones_like(target)
        tally.verification(st, one * 0, one * 0, one, made=one)
        return target, None
    token = small.argmax(-1)
    confidence = small.softmax(-1).gather(-1, token[:, None])[:, 0]
    nll = -large.log_softmax(-1).gather(-1, token[:, None])[:, 0]
    run = st["run"]
    full = run >= policy.max_small_steps  # the N-limit comes before the confidence
    # float64, as the engine compares its .tolist()
    fell = ~full & (confidence.double() < policy.fallback)
    above = nll > policy.rollback  # float32, as the engine
    bad = above & (token != target)
    if policy.rollback_rule == "first-above":
        bad &= ~st["above"]
    written = ~full & ~fell
    rolled = written & bad
    kept = written & ~rolled
    # where the large model chooses, the engine verified the run (and the rolled-back token)
    chose = ~kept
    tally.verification(st, (run + rolled) * chose, run * chose, (run + 1) * chose, made=chose)
    st["fallbacks"] += fell
    st["run"] = torch.where(kept, run + 1, 0)
    st["above"] = (st["above"] | above) & kept
    return torch.where(kept, token, target), None


def _bild_end(st, done):
    """A row that ends after small tokens (a confident EOS, or the budget): the engine's last
    verification kept them and added no token."""
    last = done & (st["run"] > 0)
    run = st["run"] * last
    tally.verification(st, run, run, run, made=last)


def _speculative_step(t, large, small, st, policy, budget):
    target = large.argmax(-1)
    # the window's drafted tokens, m
    width = (budget - st["start"]).clamp_max(policy.k)
    drafting = st["run"] < width
    accept = drafting & (small.argmax(-1) == target)
    close = ~accept if t + 1 < budget else torch.ones_like(accept)
    # the window's tokens up to an EOS are committed; after an accepted EOS the window runs on
    st["window"] += ~st["ended"]
    kept = st["run"] + (accept & close)
    tally.verification(st, width * close, kept * close, st["window"] * close, made=close)
    st["run"] = torch.where(close, 0, st["run"] + 1)
    st["window"] = torch.where(close, 0, st["window"])
    st["start"] = torch.where(close, t + 1, st["start"])
    return target, close


STEPS = {"greedy": _greedy_step, "bild": _bild_step, "speculative": _speculative_step}
STATE = {"greedy": (), "bild": ("run",), "speculative": ("run", "start", "window")}


# ----------------------------------------------------------------------------------------------------------------------
# One batch


def _lockstep(
    large: PreTrainedModel,
    small: PreTrainedModel | None,
    xs: list[torch.Tensor],
    policy: Policy,
    budget: int,
    eos: torch.Tensor,
    calls=None,
) -> list[Output]:
    """Decode the rows `xs` together; `small` is None when the method never drafts; `calls`: a
    Counter of the forwards (`tally.call`)."""
    B, device, method = len(xs), large.device, policy.method
    if budget == 0:
        return [Output([], _stats(method, small, None, policy)) for _ in xs]
    lengths = torch.tensor([x.shape[1] for x in xs], device=device)
    P = int(lengths.max())
    # right padding, the encoder mask also masks cross-attention
    if large.config.is_encoder_decoder:
        source = torch.zeros((B, P), dtype=torch.long, device=device)
        mask = torch.zeros((B, P), dtype=torch.long, device=device)
        for i, x in enumerate(xs):
            source[i, : x.shape[1]], mask[i, : x.shape[1]] = x[0], 1
        models = [_Rows(large, source, mask, calls=calls)]
        if small is not None:
            first = models[0]
            shared = (
                first.wrap(last_hidden_state=first.encoded)
                if shares_bottom_layers(small, large)
                else None
            )
            models.append(_Rows(small, source, mask, shared, calls=calls, name="small"))
        ids, positions, masks = torch.full((B, 1), decoder_start(large), device=device), None, None
    # left padding: the mask of every step is a prefix of one buffer; position ids count real tokens
    # only
    else:
        ids = torch.zeros((B, P), dtype=torch.long, device=device)
        masks = torch.ones((B, P + budget), dtype=torch.long, device=device)
        for i, x in enumerate(xs):
            ids[i, P - x.shape[1] :] = x[0]
            masks[i, : P - x.shape[1]] = 0
        mask = masks[:, :P]
        positions = capabilities.positions(mask)  # as transformers' generate
        models = [_Rows(large, calls=calls)]
        models += [_Rows(small, calls=calls, name="small")] if small is not None else []

    rule = method if small is not None else "greedy"
    step = STEPS[rule]
    zeros = torch.zeros(B, dtype=torch.long, device=device)
    st = {name: zeros.clone() for name in STATE[rule]}
    st.update(tally.counts(policy.width if rule != "greedy" else 0, zeros))
    # BiLD "first-above": a small token above the threshold since the large model chose
    st["above"] = zeros.bool()
    st["ended"] = zeros.bool()  # the output has its EOS
    st["length"] = torch.full((B,), budget, device=device)
    rows = torch.arange(B, device=device)  # each active row's index in xs
    tokens = torch.empty((B, budget), dtype=torch.long, device=device)
    final = {}  # finished rows: index in xs -> their state, on the host
    for t in range(budget):
        logits = [m.logits(ids, mask, positions) for m in models]
        token, close = step(
            t, logits[0], logits[-1] if small is not None else None, st, policy, budget
        )
        tokens[rows, t] = token
        ends = ~st["ended"] & torch.isin(token, eos)
        st["length"] = torch.where(ends, t + 1, st["length"])
        st["ended"] |= ends
        done = st["ended"] if close is None else st["ended"] & close
        if t + 1 == budget:
            done = torch.ones_like(done)
        if done.any():  # the one host sync per step: finished rows leave the batch
            if rule == "bild":
                _bild_end(st, done)
            finished = rows[done].tolist()
            for name, values in st.items():
                for i, v in zip(finished, values[done].tolist()):
                    final.setdefault(i, {})[name] = v
            keep = (~done).nonzero()[:, 0]
            if len(keep) == 0:
                break
            for m in models:
                m.select(keep)
            st = {name: values[keep] for name, values in st.items()}
            rows, token = rows[keep], token[keep]
            if masks is not None:
                masks, lengths = masks[keep], lengths[keep]
            else:
                mask = mask[keep]
        ids = token[:, None]
        if masks is not None:
            mask = masks[:, : P + t + 1]
            positions = (lengths + t)[:, None]
    tokens = tokens.tolist()
    return [
        Output(tokens[i][: final[i]["length"]], _stats(method, small, final[i], policy))
        for i in range(B)
    ]


def _stats(method: str, small, st: dict | None, policy: Policy) -> dict:
    """The engine's counts for one row, from its final lockstep state (`tally`'s counts; the large
    model alone: one verification a token, summed here); those it cannot give, named in 'inexact'."""
    n = st["length"] if st else 0
    c = tally.counts(policy.width)
    if small is None or not st:  # the large model alone, or nothing to decode
        tally.verification(c, 0, 0, n, made=n)
        small_calls = 0
    else:
        c.update({name: st[name] for name in c})
        # the small model's steps: each kept token and each discarded one (BiLD), each drafted one
        small_calls = c["small_tokens"] + c["fallbacks"] if method == "bild" else c["drafted"]
    stats = tally.stats(c, small_calls)
    inexact = list(BRANCH) if method == "bild" and stats["rollbacks"] else []
    for key in inexact:
        del stats[key]
    stats["inexact"] = inexact + list(TIMINGS)
    return stats


# ----------------------------------------------------------------------------------------------------------------------
# The entry point


@torch.inference_mode()
def generate_batch(
    large: PreTrainedModel,
    inputs: list[torch.Tensor],
    *,
    small: PreTrainedModel | None = None,
    policy: Policy | None = None,
    batch_size: int = 64,
    max_new_tokens: int = 128,
    eos_token_id: int | list[int] | None = None,
    memory: int | str | None = None,
    report: dict | None = None,
    engine: str = "auto",
    **keywords,
) -> list[Output]:
    """`generate` over many inputs at once: one `Output` per input, in input order, whose tokens
    equal `generate(large, inputs[i], small=small, method=method, ...)`'s. `inputs` are [1, n]
    LongTensors; the policy is a `Policy` or its parameters as keywords, as for `generate`. Methods
    greedy, bild, (greedy) speculative and prompt-lookup; see the module docstring for `stats`.
    `memory`: the bytes a batch may take (an int, or a size such as "12GiB"; None: the device's free
    memory less a margin, `memory.CPU_MEMORY` on a CPU); batches hold at most `batch_size` rows.
    `report`: a dict to fill with {"memory": budget bytes, "batches": [rows of each batch decoded],
    "splits": out-of-memory splits, "engine": the one that decoded, "calls": [name, rows, columns,
    count] of each model's forwards over a batch, `tally.call`}. `engine`: "ragged" (rows draft and
    verify together, each advancing by its own accepted tokens: `ragged.py`; speculative, bild and
    prompt-lookup, for models `capabilities.ragged` admits), "lockstep" (both models at every
    position: this module), or "auto" (ragged where it can run and is the faster, else lockstep:
    `_engine`)."""
    if (
        keywords.get("method") == "sample"
        or keywords.get("do_sample") is True
        or (policy is not None and isinstance(policy, Policy) and policy.sampling)
    ):
        raise ValueError(
            "generate_batch computes greedy outputs only: a sampled output (method='sample', "
            "do_sample=True) depends on the random stream of the sequential engine, which a batch does "
            "not reproduce; use generate for sampling"
        )
    policy = policies.of(policy, keywords, "generate_batch")
    method = policy.method
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(map(repr, ENGINES))}; got {engine!r}")
    if not is_int(batch_size) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1; got {batch_size!r}")
    mem.parse(memory)
    if report is not None and not isinstance(report, dict):
        raise TypeError(f"report must be None or a dict to fill; got {type(report).__name__}")
    if not isinstance(inputs, (list, tuple)):
        raise TypeError(f"inputs must be a list of [1, n] LongTensors; got {type(inputs).__name__}")

    def check(x):
        return check_call(large, x, small, policy, max_new_tokens)

    # the models and the policy, before any input is named
    check(torch.ones((1, 1), dtype=torch.long))
    xs = []
    for i, x in enumerate(inputs):
        try:
            xs.append(check(x))
        except (TypeError, ValueError) as e:
            raise type(e)(f"inputs[{i}]: {e}") from None
    eos = torch.tensor(sorted(eos_ids(large, eos_token_id)), dtype=torch.long, device=large.device)
    drafts = policy.drafts  # as the engine starts its drafter
    capabilities.require_pair(large, small, method, drafts, batch=True)
    engine = _engine(engine, large, small if drafts else None, method, min(batch_size, len(xs)))
    equal = engine == "lockstep" and _equal_lengths(large, small if drafts else None)
    budget = mem.budget(memory, large.device)
    # an early-exit draft keeps a cache of its own too
    models = [large] + ([small] if drafts else [])
    lengths = [x.shape[1] for x in xs]
    batches = mem.pack(
        lengths, [mem.geometry(m) for m in models], max_new_tokens, budget, batch_size
    )
    if equal:
        batches = _by_length(batches, lengths)
    layout = {"memory": budget, "batches": [], "splits": 0, "engine": engine}
    run = ragged if engine == "ragged" else _lockstep
    calls = Counter() if report is not None else None

    def decode(rows: list[int]) -> list[Output]:
        try:
            outs = run(
                large,
                small if drafts else None,
                [xs[i] for i in rows],
                policy,
                max_new_tokens,
                eos,
                calls,
            )
        except torch.OutOfMemoryError:
            if len(rows) == 1:
                raise
            if large.device.type == "cuda":
                torch.cuda.empty_cache()
            layout["splits"] += 1
            return decode(rows[: len(rows) // 2]) + decode(rows[len(rows) // 2 :])
        layout["batches"].append(len(rows))
        return outs

    outputs = [None] * len(xs)
    for rows in batches:
        for i, out in zip(rows, decode(rows)):
            if equal:
                out.stats["layout"] = EQUAL
            outputs[i] = out
    # the greedy outputs, with the engine's counts of their verifications
    if method == "prompt-lookup" and engine == "lockstep":
        ids = frozenset(eos.tolist())
        for x, out in zip(xs, outputs):
            c = lookup_counts(
                x[0].tolist(), out.tokens, policy.ngram, policy.k, max_new_tokens, ids
            )
            out.stats.update(tally.stats(c, 0))
    if report is not None:
        report.update(layout, calls=[[*key, n] for key, n in sorted(calls.items())])
    return outputs


# ----------------------------------------------------------------------------------------------------------------------
# Which engine decodes

ENGINES = ("auto", "ragged", "lockstep")
DRAFTED = ("speculative", "bild", "prompt-lookup")
# BiLD's batches of this many rows or more: "auto" takes the lockstep. A ragged round lasts as long
# as its longest draft, and BiLD's drafts run until the small model's confidence falls. Measured
# (docs/benchmark.md, "Does speculation survive batching?": zoo v3, one CPU thread), ragged over
# lockstep for BiLD fb 0.5 rb 3: 1.16x at 8 rows on both toy pairs; at 32 rows 0.75x [0.72, 0.79]
# (toy-mt-llama) and 0.97x [0.80, 1.16] (toy-mt); at 64 rows 0.68x and 0.76x. Speculative decoding
# stayed faster ragged at every size (1.01x-2.3x).
BILD_LOCKSTEP_ROWS = 32


def _engine(
    asked: str, large: PreTrainedModel, small: PreTrainedModel | None, method: str, rows: int
) -> str:
    """ "ragged" for a drafted method whose models `capabilities.ragged` admits, else "lockstep";
    "auto" takes the lockstep for BiLD over batches of `rows` >= BILD_LOCKSTEP_ROWS. engine="ragged"
    where it cannot run is refused with the reason."""
    if asked == "lockstep" or (asked == "auto" and method == "bild" and rows >= BILD_LOCKSTEP_ROWS):
        return "lockstep"
    if method not in DRAFTED or (small is None and method != "prompt-lookup"):
        why = f"method {method!r} drafts nothing here"
    else:
        why = next(
            (
                f"{type(m).__name__}: {r}"
                for m in (large, small)
                if m and (r := capabilities.ragged(m))
            ),
            None,
        )
    if why is None:
        return "ragged"
    if asked == "ragged":
        raise capabilities.Unsupported(f"engine='ragged' cannot run: {why}; engine='lockstep' can")
    return "lockstep"


# ----------------------------------------------------------------------------------------------------------------------
# Models that a batch must not pad (capabilities.pads): rows of one length only

EQUAL = "equal-length batches: left padding would change this model's tokens (capabilities.pads)"


def _equal_lengths(large: PreTrainedModel, small: PreTrainedModel | None) -> bool:
    return not large.config.is_encoder_decoder and not all(
        capabilities.pads(m) for m in (large, small) if m
    )


def _by_length(batches: list[list[int]], lengths: list[int]) -> list[list[int]]:
    """Each batch (rows sorted by length) cut into runs of one length."""
    out = []
    for rows in batches:
        out.append(rows[:1])
        for i in rows[1:]:
            if lengths[i] == lengths[out[-1][0]]:
                out[-1].append(i)
            else:
                out.append([i])
    return out
