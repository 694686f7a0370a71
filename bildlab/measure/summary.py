"""What a record says, with its uncertainty: scores, quality change and speedups with 95%
paired-bootstrap intervals over the examples (`intervals`), the share of outputs identical to the
vanilla large model, degenerate outputs, and what the speedup is made of (small-model share, tokens
per large call, acceptance).

    s = summarize(rows, references, metric="bleu", max_new_tokens=128)
    s["speedup"], s["speedup_ci"]          # primary denominator: the large model alone in bildlab's own loop
    s["speedup_hf"], s["speedup_hf_ci"]    # secondary: transformers' generate (None where it was not run)
    s["delta"], s["delta_ci"]              # quality change against vanilla, paired
"""

from __future__ import annotations

import numpy as np

from . import metrics
from .intervals import interval, intervals, ratio_of_sums

# below this rollback threshold every disagreement is rolled back: the output is greedy's
LN2 = float(np.log(2.0))


def _round(x, n=4):
    return None if x is None else round(float(x), n)


def _ci(lo_hi, n=4):
    return [_round(lo_hi[0], n), _round(lo_hi[1], n)]


def score_difference(metric: str, ours, base) -> tuple[float, list]:
    """The paired quality change `ours - base` from per-example metric data
    (`metrics.sentence_data`), with its 95% interval."""
    n = len(ours)

    def stat(idx):
        return metrics.corpus(metric, ours, idx) - metrics.corpus(metric, base, idx)

    return _round(stat(np.arange(n)[None])[0], 3), _ci(interval(stat, n), 3)


def summarize(rows: list[dict], references: list[str], *, metric: str) -> dict:
    """The summary of one record's per-example rows (see evaluate: output, tokens, seconds, stats,
    truncated, baseline_output, baseline_tokens, baseline_seconds, baseline_truncated, identical,
    hf_seconds). Quality is over every row; speed over the rows that were timed (`seconds` not None:
    all of them, or a timed sample)."""
    n = len(rows)
    if n == 0:
        raise ValueError("rows must not be empty")
    every, rows = rows, [r for r in rows if r["seconds"] is not None]
    if not rows:
        raise ValueError("rows must hold at least one timed example (seconds not None)")
    ours = metrics.sentence_data(metric, [r["output"] for r in every], references)
    base = metrics.sentence_data(metric, [r["baseline_output"] for r in every], references)
    full = np.arange(n)[None]
    score, base_score = (
        float(metrics.corpus(metric, ours, full)[0]),
        float(metrics.corpus(metric, base, full)[0]),
    )
    delta, delta_ci = score_difference(metric, ours, base)
    t = np.array([r["seconds"] for r in rows])
    tb = np.array([r["baseline_seconds"] for r in rows])
    tok = np.array([r["tokens"] for r in rows], dtype=float)
    tokb = np.array([r["baseline_tokens"] for r in rows], dtype=float)
    truncated = np.array([bool(r["truncated"]) for r in every])
    base_truncated = np.array([bool(r["baseline_truncated"]) for r in every])
    timed = np.array([r["seconds"] is not None for r in every])
    identical = int(sum(bool(r["identical"]) for r in every))
    # the timed rows: every speed statistic is over them
    m, full_t = len(rows), np.arange(len(rows))[None]

    def speed_per_token(idx):  # tokens per second of the method over the baseline's
        return ratio_of_sums(tok, t, idx) / ratio_of_sums(tokb, tb, idx)

    s = {
        "metric": metric,
        "examples": n,
        "score": _round(score, 3),
        "score_ci": _ci(interval(lambda i: metrics.corpus(metric, ours, i), n), 3),
        "baseline_score": _round(base_score, 3),
        "baseline_score_ci": _ci(interval(lambda i: metrics.corpus(metric, base, i), n), 3),
        "delta": delta,
        "delta_ci": delta_ci,
        # share of outputs identical to the vanilla large model's
        "identical": round(identical / n, 4),
        "identical_count": identical,
        "speedup": _round(tb.sum() / t.sum()),
        "speedup_ci": _ci(interval(lambda i: ratio_of_sums(tb, t, i), m)),
        "speedup_tokens_per_second": _round(speed_per_token(full_t)[0]),
        "speedup_tokens_per_second_ci": _ci(interval(speed_per_token, m)),
        "truncated": int(truncated.sum()),  # outputs that ran to max_new_tokens without EOS
        "baseline_truncated": int(base_truncated.sum()),
    }
    if m < n:
        # speed from a timed sample of the examples, quality from all of them
        s["timed_examples"] = m
    # timed examples where neither output hit the limit
    keep = np.flatnonzero(~(truncated | base_truncated)[timed])
    s["examples_without_truncated"] = int(len(keep))
    if 0 < len(keep) < m:
        s["speedup_without_truncated"] = _round(tb[keep].sum() / t[keep].sum())
        s["speedup_without_truncated_ci"] = _ci(
            interval(lambda i: ratio_of_sums(tb[keep], t[keep], i), len(keep))
        )
    else:
        s["speedup_without_truncated"] = s["speedup"] if len(keep) == m else None
        s["speedup_without_truncated_ci"] = s["speedup_ci"] if len(keep) == m else None
    if all(r.get("hf_seconds") is not None for r in rows):
        th = np.array([r["hf_seconds"] for r in rows])
        s["speedup_hf"] = _round(th.sum() / t.sum())
        s["speedup_hf_ci"] = _ci(interval(lambda i: ratio_of_sums(th, t, i), m))
        s["hf_identical"] = round(sum(bool(r["hf_identical"]) for r in rows) / m, 4)
    else:
        s["speedup_hf"] = s["speedup_hf_ci"] = s["hf_identical"] = None
    s.update(
        tokens=int(tok.sum()),
        tokens_per_second=_round(tok.sum() / t.sum(), 2),
        baseline_tokens_per_second=_round(tokb.sum() / tb.sum(), 2),
        **_composition([r["stats"] for r in rows], int(tok.sum())),
    )
    return s


def _composition(stats: list[dict], tokens: int) -> dict:
    """What a speedup is made of, from the loop's counters: the small model's share of the tokens,
    large calls per token, tokens per large call (Spec-Bench's measure) and the acceptance of
    drafted tokens. None where the runner counts nothing (transformers' generate), never a number
    made of zero counts."""
    if not all("large_calls" in x for x in stats):
        return dict.fromkeys(
            ("small_share", "large_calls_per_token", "mean_accepted", "acceptance")
        )
    large_calls, drafted = (
        sum(x["large_calls"] for x in stats),
        sum(x.get("drafted", 0) for x in stats),
    )
    return {
        "small_share": round(sum(x.get("small_tokens", 0) for x in stats) / tokens, 4)
        if tokens
        else None,
        "large_calls_per_token": round(large_calls / tokens, 4) if tokens else None,
        "mean_accepted": round(tokens / large_calls, 4) if large_calls else None,
        "acceptance": round(sum(x.get("accepted", 0) for x in stats) / drafted, 4)
        if drafted
        else None,
    }


# ---------------------------------------------------------------------------------------------------------------------
# Reading summaries


def fmt(value, ci, unit: str = "", digits: int = 2, signed: bool = False) -> str:
    """'1.73x [1.65, 1.81]': a number with its 95% interval."""
    if value is None:
        return "–"
    f = f"{{:{'+' if signed else ''}.{digits}f}}"
    return f"{f.format(value)}{unit} [{f.format(ci[0])}, {f.format(ci[1])}]"


def fmt_gap(gap: float, ci) -> str:
    """RQ1's share of the small-to-large quality gap that BiLD closes, '99% [97, 101]'. Where the
    small model alone scores as the large one there is no gap, and the share is undefined (NaN):
    said in words, not as 'nan%'."""
    if gap != gap:  # NaN
        return "no gap to close (the small model alone scores as the large)"
    return fmt(100 * gap, [100 * ci[0], 100 * ci[1]], "%", 0)


def lossless(record: dict) -> bool:
    """Every output identical to the vanilla large model's (counted, not 'within a tolerance')."""
    return record["summary"]["identical_count"] == record["summary"]["examples"]


def within(record: dict, tolerance: float) -> bool:
    """Quality at most `tolerance` points below vanilla, by the whole 95% interval of the paired
    difference (a non-inferiority check), not by the point estimate. On a validation subset where
    vanilla runs to the length limit once, a policy that escapes the loop scores above vanilla by
    its point while losing points on every other example; its interval is wide and reaches far below
    -tolerance, so it is not taken for 'no loss'."""
    return record["summary"]["delta_ci"][0] >= -tolerance


def choose(records: list[dict], tolerance: float | None) -> dict | None:
    """The fastest record whose quality change is within `tolerance` points of vanilla over its
    whole interval (tolerance None: the fastest lossless one, every output identical). Meant for
    validation records: the chosen policy is then reported on test."""
    ok = [r for r in records if (lossless(r) if tolerance is None else within(r, tolerance))]
    return max(ok, key=lambda r: r["summary"]["speedup"]) if ok else None


def speed_difference(a: dict, b: dict) -> dict:
    """a's speedup against b's, paired over the same examples: each record's speedup is against its
    own vanilla run (records of two sweeps have their own, timed beside them), and the same
    bootstrap resample of examples is drawn for both. {"n", "speedup_difference" (a - b, in x),
    "speedup_ratio" (a / b), each with its 95% interval}."""
    ea, eb = a["examples"], b["examples"]
    if len(ea) != len(eb):
        raise ValueError(
            f"compare needs two records on the same examples; they have {len(ea)} and {len(eb)}"
        )
    timed = [
        i
        for i, (x, y) in enumerate(zip(ea, eb))
        if x["seconds"] is not None and y["seconds"] is not None
    ]
    if len(timed) < max(sum(x["seconds"] is not None for x in r) for r in (ea, eb)):
        raise ValueError(
            "compare needs two records timed on the same examples; their timed samples differ"
        )
    ea, eb = [ea[i] for i in timed], [eb[i] for i in timed]
    ta, va = (np.array([e[f] for e in ea], dtype=float) for f in ("seconds", "baseline_seconds"))
    tb, vb = (np.array([e[f] for e in eb], dtype=float) for f in ("seconds", "baseline_seconds"))
    n, full = len(ea), np.arange(len(ea))[None]

    def difference(idx):
        return ratio_of_sums(va, ta, idx) - ratio_of_sums(vb, tb, idx)

    def ratio(idx):
        return ratio_of_sums(va, ta, idx) / ratio_of_sums(vb, tb, idx)

    return {
        "n": n,
        "speedup_difference": _round(difference(full)[0]),
        "speedup_difference_ci": _ci(interval(difference, n)),
        "speedup_ratio": _round(ratio(full)[0]),
        "speedup_ratio_ci": _ci(interval(ratio, n)),
    }


def compare(a: dict, b: dict, references: list[str] | None = None) -> dict:
    """Two records on the same examples (same pair, task, split and limit), side by side by their
    paired differences: the speedup (`speed_difference`) and the quality, a's score minus b's
    (`delta`), each with its 95% paired-bootstrap interval and N. `references`: the examples'
    targets (default: loaded from the task)."""
    differ = [f for f in ("pair", "task", "split", "limit") if a["key"].get(f) != b["key"].get(f)]
    if differ:
        raise ValueError(
            f"compare needs two records on the same examples; their keys differ in {', '.join(differ)}"
        )
    metric = a["summary"]["metric"]
    out = speed_difference(a, b)
    out["metric"] = metric
    if all(x["output"] == y["output"] for x, y in zip(a["examples"], b["examples"])):
        # the same outputs score the same: the difference is exactly 0, nothing to score
        out["delta"], out["delta_ci"] = 0.0, [0.0, 0.0]
        return out
    if references is None:
        from ..world.tasks import load_task

        key = a["key"]
        references = [
            ex["target"] for ex in load_task(key["task"], key["split"], limit=key["limit"])
        ]
    ours, theirs = (
        metrics.sentence_data(metric, [e["output"] for e in r["examples"]], references)
        for r in (a, b)
    )
    out["delta"], out["delta_ci"] = score_difference(metric, ours, theirs)
    return out


def says(c: dict, names=("the first", "the second")) -> str:
    """What a comparison allows one to say about speed, with the paired difference and its interval."""
    d, (lo, hi) = c["speedup_difference"], c["speedup_difference_ci"]
    detail = (
        f"{names[0]} - {names[1]} {fmt(d, [lo, hi], 'x', 3, signed=True)}, paired, N = {c['n']}"
    )
    # judged as printed: an interval shown to reach 0.000 is not called apart
    lo, hi = round(lo, 3), round(hi, 3)
    if lo > 0:
        return f"{names[0]} is detectably faster ({detail})"
    if hi < 0:
        return f"{names[1]} is detectably faster ({detail})"
    return f"no detectable difference in speed ({detail})"


def pareto(records: list[dict], references: list[str] | None = None) -> list[dict]:
    """The records that no other dominates, by increasing speedup. All on the same examples (one
    sweep's), compared by their paired differences, every pair from the same bootstrap resamples: a
    dominates b where a is detectably faster (the paired speed difference's interval above 0) and
    not detectably worse (the paired quality difference's interval not below 0), or detectably
    better and not detectably slower. Never by whether intervals overlap. `references`: the
    examples' targets (default: loaded from the task; not read where every record has the same
    outputs, which then differ in speed alone)."""
    by_speed = sorted(records, key=lambda r: r["summary"]["speedup"])
    if len(records) < 2:
        return by_speed
    for r in records[1:]:
        # the same examples, timed on the same ones (else a ValueError)
        speed_difference(records[0], r)
    metric, outputs = records[0]["summary"]["metric"], {}
    which = [
        outputs.setdefault(tuple(e["output"] for e in r["examples"]), len(outputs)) for r in records
    ]
    if references is None and len(outputs) > 1:
        from ..world.tasks import load_task

        key = records[0]["key"]
        references = [
            ex["target"] for ex in load_task(key["task"], key["split"], limit=key["limit"])
        ]
    k, n = len(records), len(records[0]["examples"])
    timed = [i for i, e in enumerate(records[0]["examples"]) if e["seconds"] is not None]
    t, v = (
        np.array([[r["examples"][i][f] for i in timed] for r in records], dtype=float)
        for f in ("seconds", "baseline_seconds")
    )
    # each distinct output list once
    data = (
        [metrics.sentence_data(metric, list(o), references) for o in outputs]
        if len(outputs) > 1
        else []
    )

    def pairwise(values):  # [k, resamples] -> [k * k, resamples]: row a * k + b is a - b
        return (values[:, None, :] - values[None, :, :]).reshape(k * k, -1)

    speed_lo, speed_hi = intervals(
        lambda idx: pairwise(v[:, idx].sum(-1) / t[:, idx].sum(-1)), len(timed)
    )
    if data:
        quality_lo, quality_hi = intervals(
            lambda idx: pairwise(np.stack([metrics.corpus(metric, d, idx) for d in data])[which]),
            n,
        )
    else:  # one output list: every quality difference is exactly 0
        quality_lo = quality_hi = np.zeros(k * k)
    faster, slower = (speed_lo > 0).reshape(k, k), (speed_hi < 0).reshape(k, k)
    better, worse = (quality_lo > 0).reshape(k, k), (quality_hi < 0).reshape(k, k)
    dominated = ((faster & ~worse) | (better & ~slower)).any(axis=0)
    return [r for r in by_speed if not dominated[next(i for i, x in enumerate(records) if x is r)]]


def expected_speedup(a: float, k: int, c: float, verify: float = 1.0) -> float:
    """Leviathan et al.: expected wall-time improvement with acceptance rate a, draft length k, cost
    ratio c, and a verification pass over k + 1 tokens that costs `verify` one-token passes (1 in
    the paper; a calibration measures it: `costs.pass_ratios`)."""
    if a >= 1.0:
        return (k + 1) / (k * c + verify)
    return (1 - a ** (k + 1)) / ((1 - a) * (k * c + verify))


def verify_cost(record: dict, k: int) -> float:
    """The verifier's pass over k + 1 tokens in one-token passes, from the calibration that priced
    the record (1, the paper's assumption, where none did)."""
    cal = record.get("calibration") or {}
    return float((cal.get("pass_ratio") or {}).get(str(k + 1), 1.0))


def expected_tokens_per_call(a: float, k: int) -> float:
    """Expected tokens per target call: (1 - a^(k+1)) / (1 - a)."""
    return k + 1.0 if a >= 1.0 else (1 - a ** (k + 1)) / (1 - a)


def acceptance(record: dict) -> float:
    """Per-token acceptance rate a: accepted drafted tokens over the tokens judged (each
    verification judges its drafted tokens up to and including the first rejection) - the estimate
    that the i.i.d. model assumes."""
    rows = [e["stats"] for e in record["examples"] if e["stats"] is not None]  # the timed examples
    accepted = sum(r["accepted"] for r in rows)
    return accepted / max(accepted + sum(r["rollbacks"] for r in rows), 1)


def cost_ratio(record: dict) -> float:
    """c = time of one draft step / time of one target step, from the record's own timings: the
    small model's seconds per call over the vanilla large model's seconds per generated token."""
    rows = [e for e in record["examples"] if e["seconds"] is not None]  # the timed examples
    small = sum(e["stats"]["small_seconds"] for e in rows) / max(
        sum(e["stats"]["small_calls"] for e in rows), 1
    )
    large = sum(e["baseline_seconds"] for e in rows) / max(
        sum(e["baseline_tokens"] for e in rows), 1
    )
    return small / large
