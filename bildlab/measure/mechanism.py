"""What a method does, counted exactly on every example: the same numbers on every machine and
thread count.

    m = mechanism(counts, tokens)     # counts: each example's engine counts (a batched output's or a timed one's)
    m["tokens_per_large_call"], m["ci"]["tokens_per_large_call"]

- small_share: the small model's share of the output tokens; - tokens_per_large_call: output tokens
  per large-model call (Spec-Bench's machine-independent measure), and its inverse
  large_calls_per_token; - rollbacks_per_token, fallbacks_per_token: verifications that rejected a
  drafted token, and drafts the small model gave up on low confidence, per output token; -
  accepted_by_position: the share of drafts whose i-th token was accepted (vLLM's per-position
  acceptance: accepted at i over all drafts), i = 1 ... the longest draft the policy makes (None
  without a draft).

Each is a ratio of sums over the examples with a 95% paired-bootstrap interval (`intervals`). A
count the batched engine cannot give exactly (BiLD rows with a rollback: the small model's work on
the branch the rollback discarded, `batch.BRANCH`) is left out, and the number made of it is None,
with the reason in `inexact`."""

from __future__ import annotations

import numpy as np

from .intervals import intervals

NAMES = (
    "small_share",
    "tokens_per_large_call",
    "large_calls_per_token",
    "rollbacks_per_token",
    "fallbacks_per_token",
)
NEEDS = {
    "small_share": ("small_tokens",),
    "tokens_per_large_call": ("large_calls",),
    "large_calls_per_token": ("large_calls",),
    "rollbacks_per_token": ("rollbacks",),
    "fallbacks_per_token": ("fallbacks",),
}


def _round(x):
    return None if x is None else round(float(x), 4)


def mechanism(
    counts: list[dict | None], tokens: list[int], source: str = "every example"
) -> dict | None:
    """The mechanism numbers of one record from every example's `counts` (an engine's stats dict;
    None where an example has none) and output `tokens`; None where the method counts nothing
    (transformers' generate). `source` says which examples the counts are of."""
    if len(counts) != len(tokens):
        raise ValueError(
            f"counts and tokens must have one entry per example; got {len(counts)} and {len(tokens)}"
        )
    if not counts or any(c is None or "large_calls" not in c for c in counts):
        return None
    n, tok = len(counts), np.asarray(tokens, dtype=float)
    inexact = {}
    columns = {}
    for name in NAMES:
        missing = sum(any(f not in c for f in NEEDS[name]) for c in counts)
        if missing:
            inexact[name] = (
                f"{missing} of {n} examples: BiLD rows with a rollback, where the engine also counts the "
                f"small model's work on the branch the rollback discarded (not computed in batches)"
            )
            continue
        field = NEEDS[name][0]
        columns[name] = np.array([c[field] for c in counts], dtype=float)
    if any("drafts" not in c for c in counts):
        inexact["accepted_by_position"] = (
            "not counted: the counts were made before drafts and accepted_at were kept"
        )
    drafts = np.array([c.get("drafts", 0) for c in counts], dtype=float)
    width = max((len(c.get("accepted_at") or []) for c in counts), default=0) if drafts.sum() else 0
    at = np.array(
        [(list(c.get("accepted_at") or []) + [0] * width)[:width] for c in counts], dtype=float
    )

    def stats(idx):  # [k, resamples]: every number from the same resample of the examples
        t = tok[idx].sum(-1)
        out = []
        for name in columns:
            s = columns[name][idx].sum(-1)
            out.append(t / s if name == "tokens_per_large_call" else s / t)
        d = drafts[idx].sum(-1)
        out += [at[:, i][idx].sum(-1) / d for i in range(width)]
        return np.stack(out)

    full = np.arange(n)[None]
    if tok.sum() == 0 or not (columns or width):
        values, lo, hi = None, None, None
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            values = stats(full)[:, 0]
            lo, hi = intervals(stats, n)
    names = list(columns) + [f"accepted_at_{i + 1}" for i in range(width)]
    value = dict.fromkeys(NAMES)
    ci = {}
    if values is not None:
        for j, name in enumerate(names):
            ci[name] = [_round(lo[j]), _round(hi[j])]
        value.update({name: _round(values[j]) for j, name in enumerate(names[: len(columns)])})
    accepted = (
        [_round(values[len(columns) + i]) for i in range(width)]
        if values is not None and width
        else None
    )
    return {
        "examples": n,
        "source": source,
        "tokens": int(tok.sum()),
        **value,
        "drafts": int(drafts.sum()),
        "accepted_by_position": accepted,
        "ci": ci,
        "inexact": inexact,
    }
