"""The study: one function per research question of the BiLD paper plus the speculative decoding pipeline.

Each returns a `Result`: a table (pandas), a figure (also written to figures/ as PNG and PDF), headline numbers and
a one-line answer. The notebooks in notebooks/ are thin: a parameters cell, one call, the table, the figure, the
answer. Every measurement goes through `evaluate`, so reruns come from the results registry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import evaluate as ev
from . import plots
from .models import task_of

INF = math.inf

# The paper's main table (Kim et al. 2023, Table 2; thresholds (alpha_RB, alpha_FB) as reported by a reproduction).
PAPER_TABLE = {
    "iwslt2017-de-en": {"vanilla": (40.32, 1.0), "unaligned": (40.33, 1.43, (2, 0.6)),
                        "unaligned degraded": (39.44, 1.58, (3, 0.5)), "aligned": (40.24, 1.62, (3, 0.9)),
                        "aligned degraded": (39.13, 1.78, (4, 0.6))},
    "wmt14-de-en": {"vanilla": (31.38, 1.0), "unaligned": (31.28, 1.34, (2, 0.6)),
                    "unaligned degraded": (30.47, 1.43, (3, 0.5)), "aligned": (31.26, 1.47, (2, 0.8)),
                    "aligned degraded": (30.33, 1.70, (5, 0.6))},
    "xsum": {"vanilla": (35.08, 1.0), "unaligned": (35.12, 1.48, (3, 0.5)),
             "unaligned degraded": (34.02, 1.72, (5, 0.3)), "aligned": (35.05, 1.50, (2, 0.6)),
             "aligned degraded": (33.95, 1.80, (5, 0.4))},
    "cnn_dailymail": {"vanilla": (41.54, 1.0), "unaligned": (41.44, 1.71, (3, 0.4)),
                      "unaligned degraded": (40.57, 2.05, (6, 0.2)), "aligned": (41.52, 1.85, (3, 0.3)),
                      "aligned degraded": (40.96, 2.12, (6, 0.2))},
}


@dataclass
class Result:
    name: str
    table: object  # pandas.DataFrame
    figure: object  # matplotlib Figure
    answer: str
    headline: dict = field(default_factory=dict)
    records: list = field(default_factory=list)

    def _repr_markdown_(self) -> str:
        return f"**{self.name}** — {self.answer}"


def _row(record: dict, **extra) -> dict:
    s, key = record["summary"], record["key"]
    pol = key["policy"]
    return {**extra, "method": key["method"], "draft": key["draft"], "fallback": pol.get("fallback"),
            "rollback": pol.get("rollback"), "k": pol.get("k"), s["metric"]: s["score"],
            "vanilla " + s["metric"]: s["baseline_score"], "speedup": s["speedup"], "small share": s["small_share"],
            "large calls / token": s["large_calls_per_token"], "tokens / large call": s["mean_accepted"]}


def _frame(rows: list[dict]):
    import pandas as pd

    return pd.DataFrame(rows)


def best_within(records: list[dict], tolerance: float) -> dict | None:
    """The fastest record whose score is at most `tolerance` below its vanilla baseline (None if there is none)."""
    ok = [r for r in records if r["summary"]["score"] >= r["summary"]["baseline_score"] - tolerance]
    return max(ok, key=lambda r: r["summary"]["speedup"]) if ok else None


def _speed(value: float) -> str:
    """A speedup for an answer sentence; NaN (no policy of the sweep within the tolerance) reads "none"."""
    return "none" if math.isnan(value) else f"{value:.2f}x"


def _grid(fallbacks, rollbacks) -> list[dict]:
    return [{"fallback": f, "rollback": r} for f in fallbacks for r in rollbacks]


# ---------------------------------------------------------------------------------------------------------------------


def rq1(pairs=("toy-mt", "toy-sum"), *, fallback: float = 0.5, rollback: float = 3.0, figures="figures",
        **run) -> Result:
    """RQ1: can the small model write most of the text, with the large model stepping in now and then?"""
    records = [ev.evaluate(p, method="bild", fallback=fallback, rollback=rollback, **run) for p in pairs]
    rows = []
    for pair, r in zip(pairs, records):
        s, tokens = r["summary"], max(r["summary"]["tokens"], 1)
        rows.append({"pair": pair, "metric": s["metric"], "vanilla large": s["baseline_score"], "BiLD": s["score"],
                     "speedup": s["speedup"], "small share": s["small_share"],
                     "large calls / token": s["large_calls_per_token"],
                     "fallbacks / 100 tokens": round(100 * sum(e["stats"]["fallbacks"] for e in r["examples"]) /
                                                     tokens, 2),
                     "rollbacks / 100 tokens": round(100 * sum(e["stats"]["rollbacks"] for e in r["examples"]) /
                                                     tokens, 2)})
    fig = plots.bars(list(pairs), {"small model": [r["small share"] for r in rows],
                                   "large model": [1 - r["small share"] for r in rows]},
                     ylabel="share of output tokens", title=f"BiLD (fallback {fallback}, rollback {rollback})")
    plots.save(fig, "rq1_token_share", figures)
    first = rows[0]
    verdict = "Yes" if first["small share"] >= 0.5 else "No"
    answer = (f"{verdict}: on {first['pair']} the small model writes {first['small share']:.0%} of the tokens, the "
              f"large model runs {first['large calls / token']:.2f} times per token, and BiLD runs at "
              f"{first['speedup']:.2f}x the speed of the vanilla large model, at "
              f"{first['BiLD'] - first['vanilla large']:+.2f} {first['metric']}.")
    return Result("RQ1", _frame(rows), fig, answer, {"small_share": first["small share"],
                                                      "speedup": first["speedup"]}, records)


def rq2(pair: str = "toy-mt", *, fallbacks=(0.3, 0.5, 0.7, 0.9), rollbacks=(1.0, 2.0, 3.0, 5.0),
        figures="figures", **run) -> Result:
    """RQ2: what do the fallback and rollback policies each contribute? A sweep over alpha_FB x alpha_RB, the
    speed-quality Pareto front, and the two ablations (fallback only: no rollback; rollback only: no fallback)."""
    kinds = {"fallback + rollback": _grid(fallbacks, rollbacks),
             "fallback only": _grid(fallbacks, [INF]),
             "rollback only": _grid([0.0], rollbacks)}
    by_kind = {kind: ev.sweep(pair, grid, method="bild", **run) for kind, grid in kinds.items()}
    everything = [r for recs in by_kind.values() for r in recs]
    front = ev.pareto(everything)
    rows = [_row(r, policy=kind, pareto=r in front) for kind, recs in by_kind.items() for r in recs]
    metric = everything[0]["summary"]["metric"]
    baseline = everything[0]["summary"]["baseline_score"]
    fig = plots.speed_quality({kind: [(r["summary"]["speedup"], r["summary"]["score"]) for r in recs]
                               for kind, recs in by_kind.items()}, metric=metric, baseline=baseline,
                              front=[(r["summary"]["speedup"], r["summary"]["score"]) for r in front],
                              title=f"{pair}: fallback x rollback")
    plots.save(fig, "rq2_policies", figures)
    share = {kind: sum(r in front for r in recs) for kind, recs in by_kind.items()}
    best = {kind: best_within(recs, 1.0) for kind, recs in by_kind.items()}
    speed = {kind: (b["summary"]["speedup"] if b else float("nan")) for kind, b in best.items()}
    answer = (f"Within 1 {metric} point of the vanilla large model the best speedups are "
              + ", ".join(f"{_speed(speed[k])} ({k})" for k in kinds)
              + f"; {share['fallback + rollback']} of the {len(front)} Pareto-optimal policies use both"
              + (" (none: no policy of that kind in the sweep stays within 1 point)."
                 if any(math.isnan(v) for v in speed.values()) else "."))
    return Result("RQ2", _frame(rows), fig, answer, {"speedup_within_1": speed, "front": len(front)}, everything)


def _two_drafts(pair, drafts, labels, grid, name, title, figures, tolerance, **run) -> Result:
    recs = {d: ev.sweep(pair, grid, method="bild", draft=d, **run) for d in drafts}
    rows = []
    for i, entry in enumerate(grid):
        row = {"fallback": entry["fallback"], "rollback": entry["rollback"]}
        for d, label in zip(drafts, labels):
            s = recs[d][i]["summary"]
            row[f"{label} {s['metric']}"] = s["score"]
            row[f"{label} speedup"] = s["speedup"]
            row[f"{label} small share"] = s["small_share"]
        rows.append(row)
    any_rec = recs[drafts[0]][0]["summary"]
    fig = plots.speed_quality({label: [(r["summary"]["speedup"], r["summary"]["score"]) for r in recs[d]]
                               for d, label in zip(drafts, labels)}, metric=any_rec["metric"],
                              baseline=any_rec["baseline_score"], title=title)
    plots.save(fig, name, figures)
    best = {label: best_within(recs[d], tolerance) for d, label in zip(drafts, labels)}
    speed = {label: (b["summary"]["speedup"] if b else float("nan")) for label, b in best.items()}
    share = {label: sum(r["summary"]["small_share"] for r in recs[d]) / len(recs[d]) for d, label in zip(drafts, labels)}
    return Result(name, _frame(rows), fig, "", {"speedup_within_tolerance": speed, "mean_small_share": share},
                  [r for d in drafts for r in recs[d]])


def rq3(pair: str = "toy-mt", *, fallbacks=(0.3, 0.5, 0.7, 0.9), rollbacks=(2.0, 3.0, 5.0), tolerance: float = 1.0,
        figures="figures", **run) -> Result:
    """RQ3: does prediction alignment (fine-tuning the small model on the large model's outputs) help?"""
    result = _two_drafts(pair, ("small", "aligned"), ("unaligned", "aligned"), _grid(fallbacks, rollbacks),
                         "rq3_alignment", f"{pair}: aligned vs unaligned small model", figures, tolerance, **run)
    s, share = result.headline["speedup_within_tolerance"], result.headline["mean_small_share"]
    result.answer = (f"Within {tolerance} point of the vanilla model, the aligned small model reaches "
                     f"{_speed(s['aligned'])} against {_speed(s['unaligned'])} unaligned (mean small-model share "
                     f"{share['aligned']:.0%} vs {share['unaligned']:.0%}).")
    result.name = "RQ3"
    return result


def rq4(pair: str = "toy-mt", *, fallbacks=(0.3, 0.5, 0.7, 0.9), rollbacks=(2.0, 5.0), tolerance: float = 1.0,
        figures="figures", **run) -> Result:
    """RQ4: BiLD with an early exit of the large model as the small model, against a separate small model."""
    result = _two_drafts(pair, ("small", "early-exit"), ("separate small", "early exit"), _grid(fallbacks, rollbacks),
                         "rq4_early_exit", f"{pair}: early-exit draft vs separate small model", figures, tolerance,
                         **run)
    s = result.headline["speedup_within_tolerance"]
    exit_, small = (-1.0 if math.isnan(v) else v for v in (s["early exit"], s["separate small"]))
    verdict = ("neither draft stays within it in this sweep" if max(exit_, small) < 0 else
               f"the {'early exit' if exit_ > small else 'separate small model'} is the better draft here")
    result.answer = (f"Within {tolerance} point of the vanilla model the early-exit draft reaches "
                     f"{_speed(s['early exit'])} and the separate small model {_speed(s['separate small'])}: "
                     f"{verdict}.")
    result.name = "RQ4"
    return result


def rq5(pairs=("toy-mt", "toy-sum"), *, fallbacks=(0.3, 0.5, 0.7, 0.9), rollbacks=(1.0, 2.0, 3.0, 5.0),
        tolerance: float = 0.2, degraded_tolerance: float = 1.0, figures="figures", **run) -> Result:
    """RQ5: the paper's main table: vanilla, BiLD unaligned / aligned, each at (near) no loss and 'degraded' (about
    one point lost for more speed); the policy per cell is the fastest of the sweep within the tolerance."""
    grid = _grid(fallbacks, rollbacks)
    cells, headline, records = {}, {}, []
    for pair in pairs:
        col = {}
        for draft, label in (("small", "unaligned"), ("aligned", "aligned")):
            recs = ev.sweep(pair, grid, method="bild", draft=draft, **run)
            records += recs
            base = recs[0]["summary"]
            col["vanilla"] = (base["baseline_score"], 1.0, None)
            for suffix, tol in (("", tolerance), (" degraded", degraded_tolerance)):
                b = best_within(recs, tol)
                col[label + suffix] = ((b["summary"]["score"], b["summary"]["speedup"],
                                        (b["key"]["policy"]["rollback"], b["key"]["policy"]["fallback"]))
                                       if b else (float("nan"), float("nan"), None))
        cells[pair] = col
        headline[pair] = {row: {"score": v[0], "speedup": v[1]} for row, v in col.items()}
    order = ["vanilla", "unaligned", "unaligned degraded", "aligned", "aligned degraded"]
    rows = []
    for row in order:
        entry = {"row": row}
        for pair in pairs:
            score, speed, pol = cells[pair][row]
            metric = ev.tasks.task_metric(task_of(pair))
            entry[f"{pair} {metric}"] = round(score, 2)
            entry[f"{pair} speedup"] = round(speed, 2)
            entry[f"{pair} (rb, fb)"] = pol
            if pair in PAPER_TABLE:
                paper = PAPER_TABLE[pair][row]
                entry[f"{pair} paper"] = f"{paper[0]} / {paper[1]}x"
        rows.append(entry)
    fig = plots.bars(order[1:], {pair: [cells[pair][row][1] for row in order[1:]] for pair in pairs},
                     ylabel="speedup over vanilla large (x)", title="BiLD main table")
    plots.save(fig, "rq5_main_table", figures)
    first = pairs[0]
    fastest = max((cells[first][r] for r in order[1:] if not math.isnan(cells[first][r][1])), key=lambda v: v[1],
                  default=(float("nan"), float("nan"), None))
    loss = cells[first]["vanilla"][0] - fastest[0]
    change = f"{loss:.2f} points lost" if loss >= 0 else f"{-loss:.2f} points gained"
    answer = (f"On {first} BiLD is up to {fastest[1]:.2f}x faster than the vanilla large model, with {change} "
              f"(policy rb, fb = {fastest[2]})." if fastest[2] else
              f"On {first} no BiLD policy of the sweep stays within {degraded_tolerance} point of the vanilla "
              f"large model.")
    return Result("RQ5", _frame(rows), fig, answer, headline, records)


def expected_speedup(a: float, k: int, c: float) -> float:
    """Leviathan et al.: expected wall-time improvement with acceptance rate a, draft length k, cost ratio c."""
    if a >= 1.0:
        return (k + 1) / (k * c + 1)
    return (1 - a ** (k + 1)) / ((1 - a) * (k * c + 1))


def expected_tokens_per_call(a: float, k: int) -> float:
    """Expected tokens per target call: (1 - a^(k+1)) / (1 - a)."""
    return k + 1.0 if a >= 1.0 else (1 - a ** (k + 1)) / (1 - a)


def acceptance(record: dict) -> float:
    """Per-token acceptance rate a: accepted drafted tokens over the tokens judged (each verification judges its
    drafted tokens up to and including the first rejection) - the estimate that the i.i.d. model assumes."""
    rows = [e["stats"] for e in record["examples"]]
    accepted = sum(r["accepted"] for r in rows)
    return accepted / max(accepted + sum(r["rollbacks"] for r in rows), 1)


def cost_ratio(record: dict) -> float:
    """c = time of one draft step / time of one target step, from the record's own timings: the small model's
    seconds per call over the vanilla large model's seconds per generated token."""
    rows = record["examples"]
    small = sum(e["stats"]["small_seconds"] for e in rows) / max(sum(e["stats"]["small_calls"] for e in rows), 1)
    large = sum(e["baseline_seconds"] for e in rows) / max(sum(e["baseline_tokens"] for e in rows), 1)
    return small / large


def speculative(pair: str = "toy-mt-llama", *, ks=(1, 2, 3, 4, 6, 8), temperature: float = 1.0,
                bild_fallback: float = 0.5, bild_rollback: float = 3.0, figures="figures", **run) -> Result:
    """The speculative decoding pipeline: draft k tokens, verify them in one pass, keep the accepted ones; greedy and
    sampling, acceptance against k, measured speedup against the expected (1 - a^(k+1)) / ((1 - a)(k c + 1))."""
    rows, greedy, sampled = [], [], []
    for k in ks:
        g = ev.evaluate(pair, method="speculative", k=k, **run)
        smp = ev.evaluate(pair, method="speculative", k=k, do_sample=True, temperature=temperature, **run)
        greedy.append(g)
        sampled.append(smp)
        for mode, rec in (("greedy", g), ("sampling", smp)):
            a, c = acceptance(rec), cost_ratio(rec)
            rows.append({"mode": mode, "k": k, "acceptance a": round(a, 3), "cost ratio c": round(c, 3),
                         "tokens / large call": rec["summary"]["mean_accepted"],
                         "expected tokens / call": round(expected_tokens_per_call(a, k), 3),
                         "speedup": rec["summary"]["speedup"], "expected speedup": round(expected_speedup(a, k, c), 3),
                         "identical to vanilla": rec["summary"]["identical"]})
    bild = ev.evaluate(pair, method="bild", fallback=bild_fallback, rollback=bild_rollback, **run)
    rows.append({"mode": f"BiLD (fb {bild_fallback}, rb {bild_rollback})", "k": None,
                 "tokens / large call": bild["summary"]["mean_accepted"], "speedup": bild["summary"]["speedup"],
                 "identical to vanilla": bild["summary"]["identical"]})
    table = _frame(rows)
    fig = plots.lines(list(ks), {
        "greedy: measured": [r["summary"]["speedup"] for r in greedy],
        "greedy: expected": [expected_speedup(acceptance(r), k, cost_ratio(r)) for r, k in zip(greedy, ks)],
        "sampling: measured": [r["summary"]["speedup"] for r in sampled],
        "sampling: expected": [expected_speedup(acceptance(r), k, cost_ratio(r)) for r, k in zip(sampled, ks)],
    }, xlabel="draft length k", ylabel="speedup over the large model alone (x)", title=f"{pair}: speculative decoding")
    plots.save(fig, "speculative_pipeline", figures)
    best = max(greedy, key=lambda r: r["summary"]["speedup"])
    answer = (f"Greedy speculative decoding is lossless here ({min(r['summary']['identical'] for r in greedy):.0%} "
              f"of outputs identical to the large model's) and fastest at k={best['key']['policy']['k']} "
              f"({best['summary']['speedup']:.2f}x); BiLD reaches {bild['summary']['speedup']:.2f}x.")
    headline = {"best_k": best["key"]["policy"]["k"], "best_speedup": best["summary"]["speedup"],
                "identical": min(r["summary"]["identical"] for r in greedy)}
    return Result("speculative pipeline", table, fig, answer, headline, greedy + sampled + [bild])


def assisted_side_by_side(pair: str = "toy-mt-llama", *, limit: int = 10, k: int = 4, max_new_tokens: int = 64,
                          fallback: float = 0.5, rollback: float = 3.0, split: str = "test", device: str = "cpu"):
    """Hugging Face greedy and assisted generation against bildlab greedy / speculative / BiLD on the same inputs,
    interleaved after a warm-up (timed now, not cached)."""
    from . import benchmark
    from .models import load_pair

    p = load_pair(pair, device=device)
    inputs = p.inputs(split, limit=(limit or 100) + 2)
    result = benchmark.compare(p.large, p.small, inputs, max_new_tokens=max_new_tokens, k=k, fallback=fallback,
                               rollback=rollback, warmup=2)
    return _frame(result.table()), result


# ---------------------------------------------------------------------------------------------------------------------
# Parameters of the notebooks: checked before anything loads


def check_params(params: dict, allowed: set | None = None) -> None:
    """Validate notebook parameters (a papermill -p value or a YAML file): unknown names, unknown pairs / splits /
    devices and out-of-range thresholds fail with a message naming the parameter."""
    from .decoding import check_policy
    from .models import PAIRS
    from .tasks import SPLITS

    if allowed is not None:
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            raise ValueError(f"unknown parameter(s) {', '.join(unknown)}; this notebook takes: "
                             f"{', '.join(sorted(allowed))}")

    def as_list(name):
        value = params[name]
        return list(value) if isinstance(value, (list, tuple)) else [value]

    for name in params:
        if name in ("pair", "pairs"):
            for p in as_list(name):
                if p not in PAIRS:
                    raise ValueError(f"{name}: unknown pair {p!r}; known pairs: {', '.join(PAIRS)}")
        elif name in ("fallback", "fallbacks", "bild_fallback"):
            for f in as_list(name):
                try:
                    check_policy("bild", fallback=f)
                except ValueError as e:
                    raise ValueError(f"{name}: {e}") from None
        elif name in ("rollback", "rollbacks", "bild_rollback"):
            for r in as_list(name):
                try:
                    check_policy("bild", rollback=float(r) if isinstance(r, str) else r)
                except (ValueError, TypeError) as e:
                    raise ValueError(f"{name}: {e}") from None
        elif name in ("k", "ks"):
            for k in as_list(name):
                if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                    raise ValueError(f"{name}: draft lengths must be integers >= 1; got {k!r}")
        elif name == "limit":
            v = params[name]
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"limit must be None or an integer >= 1; got {v!r}")
        elif name == "split" and params[name] not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {params[name]!r}")
        elif name in ("tolerance", "degraded_tolerance"):
            v = params[name]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ValueError(f"{name} must be a number >= 0; got {v!r}")
        elif name == "temperature":
            v = params[name]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise ValueError(f"temperature must be a number > 0; got {v!r}")
        elif name == "device" and not str(params[name]).startswith(("cpu", "cuda")):
            raise ValueError(f"device must be 'cpu' or 'cuda[:n]'; got {params[name]!r}")
