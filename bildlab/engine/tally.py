"""The loop's counts, each defined once. A decode is a series of verifications, the large model's
passes over the committed tail and the m tokens drafted before each; `verification` counts one.
The loop (`decoding`), its batched form (`batch`, with tensors of rows), prompt lookup's replay
(`lookup.counts`) and the cost model (`costs`, through `draft_runs`) all count by it; `fallbacks`
and `small_calls` are the drafter's.

    small_tokens   committed tokens the draft wrote (accepted, up to an EOS)
    large_tokens   committed tokens the large model chose (a correction, a bonus token, a greedy step)
    large_calls    verifications (the large model's passes; greedy: one per token)
    drafted        tokens proposed to a verification (BiLD: a discarded low-confidence token is not)
    accepted       drafted tokens kept (= small_tokens)
    rollbacks      verifications that rejected a drafted token
    drafts         verifications of a non-empty draft
    accepted_at    per draft position i: the drafts whose i-th token was kept
    fallbacks      BiLD: drafts ended by the small model's low confidence (counted by the drafter)
    small_calls    the draft model's one-token steps (counted by its view)

A batch's forwards (`call`, in `generate_batch`'s report): each model call over the rows of a
batch, by its name ("large", "small", "large encoder", "small encoder"), rows and columns fed. The
batched cost model prices them (`harness.batch_sizes`).
"""

from __future__ import annotations

COUNTS = (
    "small_tokens",
    "large_tokens",
    "small_calls",
    "large_calls",
    "drafted",
    "accepted",
    "fallbacks",
    "rollbacks",
    "drafts",
)


VERIFIED = (
    "small_tokens",
    "large_tokens",
    "large_calls",
    "drafted",
    "accepted",
    "rollbacks",
    "drafts",
)


def counts(width: int, zeros=None) -> dict:
    """Zero counts: ints, or one value per row where `zeros` is a tensor of rows (`batch`)."""
    fresh = (lambda: 0) if zeros is None else zeros.clone
    c = {name: fresh() for name in (*VERIFIED, "fallbacks")}
    if zeros is None:
        c["accepted_at"] = [0] * width
    else:
        c["accepted_at"] = zeros.new_zeros((len(zeros), width))
    return c


def verification(c: dict, drafted, kept, new, made=1) -> None:
    """Count one pass of the large model over `drafted` tokens, the first `kept` of them accepted,
    then `new` tokens committed (the kept ones up to an EOS, then the large model's token unless the
    budget or an EOS ends the output). Plain ints, or tensors of rows (`batch`), where `made` masks
    the rows that verified (the others pass 0 for the three counts)."""
    small = new - _positive(new - kept)  # min(kept, new): the draft's tokens committed
    c["large_calls"] += made
    c["drafted"] += drafted
    c["accepted"] += small
    c["small_tokens"] += small
    c["large_tokens"] += new - small
    c["rollbacks"] += kept < drafted
    c["drafts"] += drafted > 0
    if isinstance(small, int):
        for i in range(small if drafted else 0):
            c["accepted_at"][i] += 1
    else:
        positions = _arange(small, c["accepted_at"].shape[1])
        c["accepted_at"] += (positions < small[:, None]) & (drafted > 0)[:, None]


def stats(c: dict, small_calls: int) -> dict:
    """The counts as the engine's `stats` hold them, in its order."""
    head = {name: c[name] for name in ("small_tokens", "large_tokens")}
    rest = {name: c[name] for name in COUNTS[3:]}
    return {**head, "small_calls": small_calls, **rest, "accepted_at": list(c["accepted_at"])}


def draft_runs(small_steps: float, large_calls: float) -> float:
    """How many runs of one-token draft steps a decode made: one before each large call but the
    first (BiLD's first token is the large model's), never more than the steps themselves (the
    cost model prices a draft's steps by their position in their run)."""
    return min(small_steps, max(large_calls - 1, 1))


def _positive(x):
    return max(x, 0) if isinstance(x, int) else x.clamp_min(0)


def _arange(x, n: int):
    import torch

    return torch.arange(n, device=x.device)[None, :]


def call(calls, name: str, ids) -> None:
    """Count one forward of `name` over ids [rows, columns] in the Counter `calls` (None: none)."""
    if calls is not None:
        calls[name, ids.shape[0], ids.shape[1]] += 1
