"""The study: one function per research question of the BiLD paper plus the speculative decoding pipeline.

Each returns a `Result`: a table (pandas), a figure (also written to figures/ as PNG and PDF), headline numbers and
a one-line answer. The notebooks in notebooks/ are thin: a parameters cell, one call, the table, the figure, the
answer. Every measurement goes through `evaluate`, so reruns come from the results registry.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from . import evaluate as ev
from . import plots
from . import summary as sm
from .metrics import METRIC_NAMES
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


def _frame(rows: list[dict]):
    """A table for the notebook; cells that do not apply to a row are blank (not NaN)."""
    import pandas as pd

    return pd.DataFrame(rows).astype(object).fillna("")


def _policy(record: dict) -> str:
    """A record's policy in words, e.g. 'fb 0.5, rb 3' or 'k=4'."""
    key, pol = record["key"], record["key"]["policy"]
    if key["method"] == "hf_assisted":
        return f"assisted k={pol['k']}"
    if key["method"] == "bild":
        rb = pol["rollback"]
        return f"fb {pol['fallback']:g}, rb {'inf' if math.isinf(rb) else f'{rb:g}'}"
    if key["method"] == "speculative":
        return f"k={pol['k']}" + (" (sampling)" if pol.get("do_sample") else "")
    return key["method"]


def _cells(record: dict) -> dict:
    """A record's numbers with their 95% intervals, as table cells (N stands in every row)."""
    s = record["summary"]
    metric = METRIC_NAMES.get(s["metric"], s["metric"])
    return {"N": s["examples"], metric: sm.fmt(s["score"], s["score_ci"]),
            f"Δ {metric} vs vanilla": sm.fmt(s["delta"], s["delta_ci"], signed=True),
            "speedup": sm.fmt(s["speedup"], s["speedup_ci"], "x"),
            "speedup vs HF generate": sm.fmt(s["speedup_hf"], s["speedup_hf_ci"], "x"),
            "identical to vanilla": f"{s['identical_count']}/{s['examples']}",
            "large-model share": None if s["small_share"] is None else round(1 - s["small_share"], 3),
            "tokens / large call": s["mean_accepted"],
            "hit max_new_tokens (method / vanilla)": f"{s['truncated']} / {s['baseline_truncated']}"}


def _point(record: dict, label: str = "") -> dict:
    s = record["summary"]
    return {"speedup": s["speedup"], "speedup_ci": s["speedup_ci"], "score": s["score"], "score_ci": s["score_ci"],
            "label": label}


def _speed(record: dict | None) -> str:
    """A speedup with its interval and its quality change, for an answer; 'none' when no policy qualified."""
    if record is None:
        return "none"
    s = record["summary"]
    loss = ("lossless" if sm.lossless(record) else
            f"{sm.fmt(s['delta'], s['delta_ci'], signed=True)} {METRIC_NAMES.get(s['metric'], s['metric'])}")
    return f"{sm.fmt(s['speedup'], s['speedup_ci'], 'x')} ({_policy(record)}; {loss})"


def _compare_speed(a: dict | None, b: dict | None, names=("the first", "the second")) -> str:
    """Whether two speedups differ detectably: their intervals separate."""
    if a is None or b is None:
        return "not comparable (a side has no qualifying policy)"
    (alo, ahi), (blo, bhi) = a["summary"]["speedup_ci"], b["summary"]["speedup_ci"]
    if alo > bhi:
        return f"{names[0]} is detectably faster"
    if blo > ahi:
        return f"{names[1]} is detectably faster"
    return "no detectable difference (the intervals overlap)"


def _on_test(pair: str, chosen: dict, **run) -> dict:
    """The policies chosen on validation ({label: record or None}), evaluated together on the test split (`run`'s
    split and limit) in one sweep: {label: test record or None}."""
    picked = {label: r for label, r in chosen.items() if r is not None}
    entries = [{"method": r["key"]["method"], "draft": r["key"]["draft"], **r["key"]["policy"]} for r in picked.values()]
    tested = ev.sweep(pair, entries, **run) if entries else []
    out = dict.fromkeys(chosen)
    out.update(zip(picked, tested))
    return out


def _grid(fallbacks, rollbacks) -> list[dict]:
    return [{"fallback": f, "rollback": r} for f in fallbacks for r in rollbacks]


def _val(run: dict, val_split: str, val_limit) -> dict:
    """The run arguments for the validation sweep (same everything, other split and size)."""
    return {**run, "split": val_split, "limit": val_limit}


# ---------------------------------------------------------------------------------------------------------------------


def rq1(pairs=("toy-mt", "toy-sum"), *, fallbacks=(0.1, 0.3, 0.5, 0.7, 0.9), rollback: float = 3.0,
        figures="figures", **run) -> Result:
    """RQ1: can the small model write most of the text? Quality and speed against the large model's share of the
    tokens, over fallback thresholds, with the small model alone and the large model alone as anchors: how much of
    the small-to-large quality gap BiLD closes."""
    rows, points, records, headline, sizes = [], {}, [], {}, {}
    for pair in _pairs(pairs):
        grid = [{"method": "small"}] + [{"fallback": f, "rollback": rollback} for f in fallbacks]
        recs = ev.sweep(pair, grid, **run)
        records += recs
        small, bild = recs[0], recs[1:]
        s0 = small["summary"]
        sizes[pair] = s0["examples"]
        rows.append({"pair": pair, "policy": "large model alone (vanilla)", "N": s0["examples"],
                     METRIC_NAMES[s0["metric"]]: sm.fmt(s0["baseline_score"], s0["baseline_score_ci"]),
                     "large-model share": 1.0, "gap closed": "100%"})
        rows.append({"pair": pair, "policy": "small model alone", **_cells(small), "large-model share": 0.0,
                     "gap closed": "0%"})
        pts, gaps = [], {}
        for r in bild:
            gap, gap_ci = gaps[id(r)] = _gap_closed(r, small)
            rows.append({"pair": pair, "policy": f"BiLD {_policy(r)}", **_cells(r),
                         "gap closed": sm.fmt(100 * gap, [100 * gap_ci[0], 100 * gap_ci[1]], "%", 0)})
            pts.append({"speedup": 1 - r["summary"]["small_share"], "speedup_ci": [1 - r["summary"]["small_share"]] * 2,
                        "score": 100 * gap, "score_ci": [100 * gap_ci[0], 100 * gap_ci[1]],
                        "label": f"fb {r['key']['policy']['fallback']:g}" if r is bild[0] or r is bild[-1] else ""})
        points[pair] = pts
        mid = min(bild, key=lambda r: abs(r["key"]["policy"]["fallback"] - 0.5))
        headline[pair] = {"small_share": mid["summary"]["small_share"], "gap_closed": gaps[id(mid)][0],
                          "gap_closed_ci": gaps[id(mid)][1], "fallback": mid["key"]["policy"]["fallback"],
                          "record": mid}
    points["anchors: small alone, large alone"] = [
        {"speedup": 0.0, "speedup_ci": [0.0, 0.0], "score": 0.0, "score_ci": [0.0, 0.0], "label": "small alone"},
        {"speedup": 1.0, "speedup_ci": [1.0, 1.0], "score": 100.0, "score_ci": [100.0, 100.0], "label": "large alone"}]
    fig = plots.speed_quality(points, metric="small-to-large quality gap closed (%)", baseline=100.0,
                              title=f"BiLD over fallback thresholds (rollback {rollback:g}), N = "
                                    + ", ".join(f"{n} ({pair})" for pair, n in sizes.items()),
                              xlabel="large model's share of the output tokens", reference=None, xlim=(-0.05, 1.05))
    plots.save(fig, "rq1_token_share", figures)
    parts = []
    for pair, head in headline.items():
        mid, share, gap, gap_ci = head.pop("record"), head["small_share"], head["gap_closed"], head["gap_closed_ci"]
        parts.append(f"on {pair} (N = {mid['summary']['examples']}), at fallback {head['fallback']:g} the small model "
                     f"writes {share:.0%} of the tokens and BiLD closes "
                     f"{sm.fmt(100 * gap, [100 * gap_ci[0], 100 * gap_ci[1]], '%', 0)} of the small-to-large gap at "
                     f"{_speed(mid)}")
    most = [h["small_share"] >= 0.5 for h in headline.values()]
    verdict = "Yes" if all(most) else "No" if not any(most) else "On some pairs"
    answer = f"{verdict}: " + "; ".join(parts) + "."
    return Result("RQ1", _frame(rows), fig, answer, headline, records)


def _gap_closed(bild: dict, small: dict) -> tuple[float, tuple[float, float]]:
    """(score(BiLD) - score(small)) / (score(large) - score(small)), paired over the same examples, with its
    interval. The three systems' outputs come from the two records (both carry the same vanilla outputs)."""
    import numpy as np

    from . import intervals, metrics

    if bild.get("placeholder"):  # planning: nothing was decoded
        return 0.0, (0.0, 0.0)
    key = bild["key"]
    refs = [ex["target"] for ex in ev.tasks.load_task(key["task"], key["split"], limit=key["limit"])]
    metric = bild["summary"]["metric"]
    data = {name: metrics.sentence_data(metric, [e[field] for e in rec["examples"]], refs)
            for name, rec, field in (("bild", bild, "output"), ("small", small, "output"),
                                     ("large", bild, "baseline_output"))}

    def gap(idx):
        s, b, lg = (metrics.corpus(metric, data[n], idx) for n in ("small", "bild", "large"))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(lg != s, (b - s) / (lg - s), np.nan)

    value = float(gap(np.arange(len(refs))[None])[0])
    lo, hi = intervals.interval(lambda idx: np.nan_to_num(gap(idx), nan=1.0), len(refs))
    return value, (lo, hi)


def _pairs(pairs) -> list[str]:
    """`pairs` as a list: one pair's name or a non-empty sequence of names."""
    if isinstance(pairs, str):
        return [pairs]
    if not isinstance(pairs, (list, tuple)) or not pairs or not all(isinstance(p, str) for p in pairs):
        raise TypeError(f"pairs must be a pair's name or a non-empty list of names; got {pairs!r}")
    return list(pairs)


def _each_pair(name: str, figure: str, pairs, figures, one) -> Result:
    """A question asked of every pair: `one(pair, ax)` returns (table rows, records, headline, answer) and draws
    into its own panel of one figure (each pair has its own metric), saved as `figure`."""
    pairs = _pairs(pairs)
    fig, axes = plots.panels(len(pairs))
    rows, records, headline, answers = [], [], {}, []
    for pair, ax in zip(pairs, axes):
        r, recs, headline[pair], answer = one(pair, ax)
        rows, records = rows + r, records + recs
        answers.append(answer)
    plots.save(fig, figure, figures)
    return Result(name, _frame(rows), fig, " ".join(answers), headline, records)


def rq2(pairs=("toy-mt", "toy-sum"), *, fallbacks=(0.1, 0.3, 0.5, 0.7, 0.9), rollbacks=(1.0, 2.0, 3.0, 4.0, 6.0),
        tolerance: float = 1.0, val_split: str = "validation", val_limit=None, figures="figures", **run) -> Result:
    """RQ2: what do the fallback and rollback policies each contribute? alpha_FB x alpha_RB over the paper's
    ranges, the speed-quality Pareto front (a policy is dominated only where intervals separate), and the two
    ablations (fallback only: no rollback; rollback only: no fallback), per pair. Rollback thresholds below ln 2 are
    lossless by construction (every disagreement is rolled back), so the trade-off lives above it."""
    kinds = {"fallback + rollback": _grid(fallbacks, rollbacks), "fallback only": _grid(fallbacks, [INF]),
             "rollback only": _grid([0.0], rollbacks)}
    flat = [g for grid in kinds.values() for g in grid]

    def one(pair, ax):
        val = ev.sweep(pair, flat, **_val(run, val_split, val_limit))
        by_kind, i = {}, 0
        for kind, grid in kinds.items():
            by_kind[kind] = val[i: i + len(grid)]
            i += len(grid)
        front = sm.pareto(val)
        rows = [{"pair": pair, "policy": kind, "thresholds": _policy(r), **_cells(r),
                 "on the front": any(r is f for f in front)} for kind, recs in by_kind.items() for r in recs]
        s0 = val[0]["summary"]
        metric = METRIC_NAMES[s0["metric"]]
        best = {kind: sm.choose(recs, tolerance) for kind, recs in by_kind.items()}
        plots.speed_quality({kind: [_point(r, _policy(r) if r is best[kind] else "") for r in recs]
                             for kind, recs in by_kind.items()}, metric=metric, baseline=s0["baseline_score"],
                            front=[_point(r) for r in front], ax=ax,
                            title=f"{pair}: fallback x rollback ({val_split}, N = {s0['examples']})")
        both = sum(any(r is f for f in by_kind["fallback + rollback"]) for r in front)
        test = _on_test(pair, best, **run)
        vs = {kind: _compare_speed(test["fallback + rollback"], test[kind], ("fallback + rollback", kind))
              for kind in ("fallback only", "rollback only")}
        n_test = next((t["summary"]["examples"] for t in test.values() if t), None)
        answer = (f"On {pair}, the fastest policy of each kind within {tolerance:g} {metric} point of vanilla on "
                  f"{val_split} (N = {s0['examples']}), reported on {run.get('split', 'test')} (N = {n_test}): "
                  + "; ".join(f"{kind}: {_speed(t)}" for kind, t in test.items())
                  + f". Fallback + rollback vs fallback only: {vs['fallback only']}; vs rollback only: "
                  f"{vs['rollback only']}. On {val_split}, {len(front)} of {len(val)} policies are not dominated "
                  f"where intervals separate (with both thresholds: {both}).")
        headline = {"front": len(front), "policies": len(val),
                    "chosen": {k: (_policy(b) if b else None) for k, b in best.items()}}
        return rows, val + [t for t in test.values() if t], headline, answer

    return _each_pair("RQ2", "rq2_policies", pairs, figures, one)


def _drafts(pair, drafts: dict[str, str], grid, title, tolerance, val_split, val_limit, ax, **run) -> dict:
    """Sweep the same grid with several drafts in one interleaved sweep on validation (shared vanilla run); table
    rows, both fronts drawn into `ax`; each draft's fastest policy within the tolerance, reported on test."""
    flat = [{**g, "draft": d} for d in drafts for g in grid]
    recs = ev.sweep(pair, flat, **_val(run, val_split, val_limit))
    by = {label: recs[i * len(grid):(i + 1) * len(grid)] for i, label in enumerate(drafts.values())}
    rows = [{"pair": pair, "draft": label, "thresholds": _policy(r), **_cells(r)} for label, rs in by.items()
            for r in rs]
    s0 = recs[0]["summary"]
    metric = METRIC_NAMES[s0["metric"]]
    best = {label: sm.choose(rs, tolerance) for label, rs in by.items()}
    plots.speed_quality({f"{label} (front)": [_point(r, _policy(r) if r is best[label] else "")
                                              for r in sm.pareto(rs)]
                         for label, rs in by.items()}, metric=metric,
                        baseline=s0["baseline_score"], title=f"{title} ({val_split}, N = {s0['examples']})", ax=ax)
    test = _on_test(pair, best, **run)
    n_test = next((t["summary"]["examples"] for t in test.values() if t), None)
    within = (f"fastest within {tolerance:g} {metric} point of vanilla on {val_split} (N = {s0['examples']}), "
              f"reported on {run.get('split', 'test')} (N = {n_test})")
    return {"rows": rows, "best": test, "by": by, "within": within,
            "records": recs + [t for t in test.values() if t]}


def rq3(pairs=("toy-mt", "toy-sum"), *, fallbacks=(0.3, 0.5, 0.7, 0.9), rollbacks=(0.5, 2.0, 3.0, 5.0),
        tolerance: float = 1.0, val_split: str = "validation", val_limit=None, figures="figures", **run) -> Result:
    """RQ3: does prediction alignment (fine-tuning the small model on the large model's outputs) help? Agreement
    with the large model on held-out data (the zoo card) and both Pareto fronts side by side, with intervals, per
    pair."""
    def one(pair, ax):
        d = _drafts(pair, {"small": "unaligned", "aligned": "aligned"}, _grid(fallbacks, rollbacks),
                    f"{pair}: aligned vs unaligned small model", tolerance, val_split, val_limit, ax, **run)
        best, agree = d["best"], _agreement(pair)
        answer = (f"On {pair}: agreement with the large model's greedy tokens (zoo card, held-out test): unaligned "
                  f"{agree.get('unaligned', float('nan')):.1%}, aligned {agree.get('aligned', float('nan')):.1%}. "
                  f"The {d['within']}: aligned {_speed(best['aligned'])}, unaligned {_speed(best['unaligned'])}: "
                  f"{_compare_speed(best['aligned'], best['unaligned'], ('the aligned', 'the unaligned'))}.")
        headline = {"agreement": agree, "speedup_within_tolerance": {
            k: (b["summary"]["speedup"] if b else None) for k, b in best.items()}}
        return d["rows"], d["records"], headline, answer

    return _each_pair("RQ3", "rq3_alignment", pairs, figures, one)


def _agreement(pair: str) -> dict:
    from .models import TOY_PAIRS, read_card

    if pair not in TOY_PAIRS:
        return {}
    test = read_card()["test"].get(pair, {})
    large, small, aligned = TOY_PAIRS[pair][:3]
    out = {"unaligned": test.get(small, {}).get("agreement"), "aligned": test.get(aligned, {}).get("agreement")}
    out["early exit"] = test.get("t5-early-exit", {}).get("agreement") if large.startswith("t5") else None
    return {k: v for k, v in out.items() if v is not None}


def rq4(pairs=("toy-mt", "toy-sum"), *, fallbacks=(0.3, 0.5, 0.7, 0.9), rollbacks=(0.5, 2.0, 3.0, 5.0),
        tolerance: float = 1.0, val_split: str = "validation", val_limit=None, figures="figures", **run) -> Result:
    """RQ4: BiLD with an early exit of the large model as the draft, against a separate small model; each draft's
    cost ratio c and acceptance, per pair."""
    def one(pair, ax):
        d = _drafts(pair, {"small": "separate small", "early-exit": "early exit"}, _grid(fallbacks, rollbacks),
                    f"{pair}: early-exit draft vs separate small model", tolerance, val_split, val_limit, ax, **run)
        best, by = d["best"], d["by"]
        costs = {label: round(sum(sm.cost_ratio(r) for r in rs) / len(rs), 3) for label, rs in by.items()}
        accept = {label: round(sum(sm.acceptance(r) for r in rs) / len(rs), 3) for label, rs in by.items()}
        answer = (f"On {pair}, the {d['within']}: early exit {_speed(best['early exit'])}, separate small "
                  f"{_speed(best['separate small'])}: "
                  f"{_compare_speed(best['early exit'], best['separate small'], ('the early exit', 'the small'))}. "
                  f"Cost ratio c (draft step / large step): early exit {costs['early exit']}, separate small "
                  f"{costs['separate small']}; acceptance {accept['early exit']} vs {accept['separate small']}.")
        headline = {"cost_ratio": costs, "acceptance": accept, "speedup_within_tolerance": {
            k: (b["summary"]["speedup"] if b else None) for k, b in best.items()}}
        return d["rows"], d["records"], headline, answer

    return _each_pair("RQ4", "rq4_early_exit", pairs, figures, one)


def paper_table():
    """The paper's main table (PAPER_TABLE) as printed, for the shape of RQ5's rows: per task, each row's quality
    (BLEU or ROUGE-L) / speedup over the vanilla large model, with its (rb, fb); the paper has no lossless rows."""
    rows = []
    for row in ROWS:
        entry = {"row": row}
        for task, table in PAPER_TABLE.items():
            v = table.get(row)
            entry[task] = "–" if v is None else f"{v[0]:.2f} / {v[1]:.2f}x" + (f" at {v[2]}" if len(v) > 2 else "")
        rows.append(entry)
    return _frame(rows).set_index("row")


ROWS = ("vanilla", "unaligned lossless", "unaligned", "unaligned degraded", "aligned lossless", "aligned",
        "aligned degraded")


def rq5(pairs=("toy-mt", "toy-sum"), *, fallbacks=(0.3, 0.5, 0.7, 0.9), rollbacks=(0.5, 1.0, 2.0, 3.0, 5.0),
        tolerance: float = 0.2, degraded_tolerance: float = 1.2, val_split: str = "validation", val_limit=100,
        passes: int = 2, figures="figures", **run) -> Result:
    """RQ5: the paper's main table. Per task and small model (unaligned, aligned) the policy of each row is chosen on
    the validation split (the fastest with every output identical to vanilla; the fastest within `tolerance`; the
    fastest within `degraded_tolerance`, the paper's degraded rows lose 1.05-1.19 points), then reported on the test
    split with 95% intervals, timed in `passes` independent passes (the run-to-run spread)."""
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
        raise ValueError(f"passes must be an integer >= 1; got {passes!r}")
    grid = _grid(fallbacks, rollbacks)
    table, records, headline, speed_series, speed_cis = [], [], {}, {}, {}
    for pair in _pairs(pairs):
        flat = [{**g, "draft": d} for d in ("small", "aligned") for g in grid]
        val = ev.sweep(pair, flat, **_val(run, val_split, val_limit))
        records += val
        chosen = {}
        for i, (draft, label) in enumerate((("small", "unaligned"), ("aligned", "aligned"))):
            recs = val[i * len(grid):(i + 1) * len(grid)]
            for suffix, tol in ((" lossless", None), ("", tolerance), (" degraded", degraded_tolerance)):
                b = sm.choose(recs, tol)
                if b is not None:
                    chosen[label + suffix] = {**{k: b["key"]["policy"][k] for k in ("fallback", "rollback")},
                                              "draft": draft}
        names = list(chosen)
        unique = list({json.dumps(v, sort_keys=True): v for v in chosen.values()}.values())
        if any(r.get("placeholder") for r in val):  # planning without the validation records: count as many
            # distinct chosen policies as there are rows to fill
            unique = [{**g, "draft": d} for d in ("small", "aligned") for g in grid[:3]]
            chosen = {name: unique[i] for i, name in enumerate(list(chosen)[:len(unique)])}
        tests = {p: ev.sweep(pair, unique, timing_pass=p, **run) for p in range(1, passes + 1)} if unique else {}
        by_policy = {json.dumps(u, sort_keys=True): [tests[p][j] for p in tests] for j, u in enumerate(unique)}
        for p in tests:
            records += tests[p]
        metric = METRIC_NAMES[ev.tasks.task_metric(task_of(pair))]
        any_test = next(iter(by_policy.values()))[0] if by_policy else None
        head = {}
        for row in ROWS:
            entry = {"pair": pair, "row": row}
            if row == "vanilla":
                if any_test:
                    s = any_test["summary"]
                    entry.update({"N": s["examples"], metric: sm.fmt(s["baseline_score"], s["baseline_score_ci"]),
                                  "speedup (pass 1)": "1x"})
                    head[row] = {"score": s["baseline_score"], "score_ci": s["baseline_score_ci"]}
            elif row in chosen:
                runs = by_policy[json.dumps(chosen[row], sort_keys=True)]
                c = _cells(runs[0])
                entry.update({"(rb, fb)": (chosen[row]["rollback"], chosen[row]["fallback"]), "N": c["N"],
                              metric: c[metric], f"Δ {metric}": c[f"Δ {metric} vs vanilla"],
                              "identical to vanilla": c["identical to vanilla"]})
                for p, r in enumerate(runs, 1):
                    entry[f"speedup (pass {p})"] = sm.fmt(r["summary"]["speedup"], r["summary"]["speedup_ci"], "x")
                entry["speedup vs HF generate"] = c["speedup vs HF generate"]
                s = runs[0]["summary"]
                head[row] = {"score": s["score"], "delta": s["delta"], "delta_ci": s["delta_ci"],
                             "speedup_hf": s["speedup_hf"], "speedup_hf_ci": s["speedup_hf_ci"],
                             "identical": s["identical_count"], "examples": s["examples"],
                             "speedups": [r["summary"]["speedup"] for r in runs],
                             "speedup_cis": [r["summary"]["speedup_ci"] for r in runs],
                             "policy": (chosen[row]["rollback"], chosen[row]["fallback"])}
            else:
                entry["(rb, fb)"] = "none qualifies on validation"
            paper = PAPER_TABLE.get(pair, {}).get(row)
            if paper:
                entry["paper"] = f"{paper[0]} / {paper[1]}x"
            table.append(entry)
        headline[pair] = head
        for p in range(passes):
            label = f"{pair}, timing pass {p + 1}"
            speed_series[label] = [head[r]["speedups"][p] if "speedups" in head.get(r, {}) else float("nan")
                                   for r in ROWS[1:]]
            speed_cis[label] = [head[r]["speedup_cis"][p] if "speedup_cis" in head.get(r, {}) else None
                                for r in ROWS[1:]]
    n_test = {pair: next((h["examples"] for h in hp.values() if "examples" in h), None)
              for pair, hp in headline.items()}
    fig = plots.bars(list(ROWS[1:]), speed_series, cis=speed_cis, reference=1.0,
                     ylabel="speedup over the vanilla large model (x)",
                     title="BiLD main table: policies chosen on validation, test N = "
                           + ", ".join(f"{n} ({pair})" for pair, n in n_test.items()))
    plots.save(fig, "rq5_main_table", figures)
    answers = []
    for pair, h in headline.items():
        groups, metric = {}, METRIC_NAMES[ev.tasks.task_metric(task_of(pair))]
        for row in ROWS[1:]:  # the rows of one small model that chose the same policy are reported once
            if row in h:
                groups.setdefault((row.split()[0], h[row]["policy"]), []).append(row)
        parts = []
        for rows in groups.values():
            x = h[rows[0]]
            loss = ("every output identical to vanilla" if x["identical"] == x["examples"] else
                    f"{sm.fmt(x['delta'], x['delta_ci'], signed=True)} {metric}")
            passes_txt = " and ".join(sm.fmt(v, ci, "x") for v, ci in zip(x["speedups"], x["speedup_cis"]))
            names = " = ".join(r + " no loss" if r in ("unaligned", "aligned") else r for r in rows)
            parts.append(f"{names} (rb, fb) = {x['policy']}: {passes_txt} ({loss})")
        answers.append(f"On {pair} (N = {n_test[pair]}): " + "; ".join(parts) + "." if parts else
                       f"On {pair} no BiLD policy qualifies on {val_split}.")
    answer = (f"Policies chosen on {val_split}, reported on {run.get('split', 'test')} (speedups of {passes} "
              f"independent timing passes). " + " ".join(answers))
    frame = _frame(table)
    first_cols = [c for c in ("pair", "row", "(rb, fb)", "N") if c in frame.columns]
    frame = frame[first_cols + [c for c in frame.columns if c not in first_cols]]
    return Result("RQ5", frame, fig, answer, headline, records)


def speculative(pair: str = "toy-mt-llama", *, ks=(1, 2, 3, 4, 6, 8), temperature: float = 1.0,
                bild_fallback: float = 0.5, bild_rollback: float = 3.0, reference_pairs=("toy-mt", "toy-sum"),
                figures="figures", **run) -> Result:
    """The speculative decoding pipeline: acceptance against k, measured speedup against the expected
    (1 - a^(k+1)) / ((1 - a)(k c + 1)); greedy against greedy, sampling against sampling (each labelled); BiLD on
    the same examples; and on each of `reference_pairs` (T5 pairs; None for none) fixed-k speculative decoding
    (k = 4) as the lossless reference next to BiLD."""
    grid = ([{"method": "speculative", "k": k} for k in ks]
            + [{"method": "speculative", "k": k, "do_sample": True, "temperature": temperature} for k in ks]
            + [{"method": "hf_assisted", "k": k} for k in ks]
            + [{"method": "bild", "fallback": bild_fallback, "rollback": bild_rollback}])
    recs = ev.sweep(pair, grid, **run)
    greedy, sampled, assisted = recs[: len(ks)], recs[len(ks): 2 * len(ks)], recs[2 * len(ks): 3 * len(ks)]
    bild = recs[-1]
    rows = []
    for mode, group in (("greedy vs greedy", greedy), (f"sampling (T={temperature:g}) vs sampling", sampled)):
        for k, rec in zip(ks, group):
            a, c = sm.acceptance(rec), sm.cost_ratio(rec)
            rows.append({"pair": pair, "mode": mode, "k": k, "acceptance a": round(a, 3), "cost ratio c": round(c, 3),
                         "tokens / large call": rec["summary"]["mean_accepted"],
                         "expected tokens / call": round(sm.expected_tokens_per_call(a, k), 3),
                         "speedup": sm.fmt(rec["summary"]["speedup"], rec["summary"]["speedup_ci"], "x"),
                         "expected speedup": round(sm.expected_speedup(a, k, c), 3), "N": rec["summary"]["examples"],
                         "identical to vanilla": f"{rec['summary']['identical_count']}/{rec['summary']['examples']}"})
    for k, rec in zip(ks, assisted):  # transformers' assisted generation with the same draft, same examples
        rows.append({"pair": pair, "mode": "transformers assisted generation", "k": k, **_cells(rec)})
    rows.append({"pair": pair, "mode": f"BiLD ({_policy(bild)})", **_cells(bild),
                 "tokens / large call": bild["summary"]["mean_accepted"]})
    ref, versus = [], []
    for ref_pair in _pairs(reference_pairs) if reference_pairs else []:
        spec, ref_bild = ev.sweep(ref_pair, [{"method": "speculative", "k": 4},
                                             {"method": "bild", "fallback": bild_fallback, "rollback": bild_rollback}],
                                  **run)
        for r in (spec, ref_bild):
            rows.append({"pair": ref_pair, "mode": f"{r['key']['method']} ({_policy(r)})", **_cells(r),
                         "tokens / large call": r["summary"]["mean_accepted"]})
        s = spec["summary"]
        versus.append(f"On {ref_pair} (N = {s['examples']}), fixed-k speculative decoding {_speed(spec)}, "
                      f"{s['identical_count']} of {s['examples']} outputs identical, against BiLD {_speed(ref_bild)}: "
                      f"{_compare_speed(spec, ref_bild, ('speculative decoding', 'BiLD'))}.")
        ref += [spec, ref_bild]
    table = _frame(rows)
    series, cis = {}, {}
    for mode, group in (("greedy", greedy), ("sampling", sampled)):
        series[f"{mode}: measured"] = [r["summary"]["speedup"] for r in group]
        cis[f"{mode}: measured"] = [r["summary"]["speedup_ci"] for r in group]
        series[f"{mode}: expected"] = [sm.expected_speedup(sm.acceptance(r), k, sm.cost_ratio(r)) for r, k in zip(group, ks)]
    series["transformers assisted (greedy): measured"] = [r["summary"]["speedup"] for r in assisted]
    cis["transformers assisted (greedy): measured"] = [r["summary"]["speedup_ci"] for r in assisted]
    fig = plots.lines(list(ks), series, cis=cis, reference=1.0, xlabel="draft length k",
                      ylabel="speedup over the large model alone (x)",
                      title=f"{pair}: speculative decoding, N = {greedy[0]['summary']['examples']}")
    plots.save(fig, "speculative_pipeline", figures)
    best = max(greedy, key=lambda r: r["summary"]["speedup"])
    others = [r for r in greedy if r is not best]
    rival = max(others, key=lambda r: r["summary"]["speedup"]) if others else None
    identical = sum(r["summary"]["identical_count"] for r in greedy)
    total = sum(r["summary"]["examples"] for r in greedy)
    answer = (f"Greedy speculative decoding on {pair} (N = {best['summary']['examples']}) is lossless: {identical} of "
              f"{total} outputs identical to the large model's. Fastest at k={best['key']['policy']['k']}: "
              f"{_speed(best)}" + (f"; against k={rival['key']['policy']['k']} ({_speed(rival)}): "
                                  f"{_compare_speed(best, rival)}" if rival else "")
              + f". transformers' assisted generation at k={best['key']['policy']['k']}: "
              f"{_speed(assisted[list(ks).index(best['key']['policy']['k'])])}. BiLD on the same examples: "
              f"{_speed(bild)}." + "".join(" " + v for v in versus))
    headline = {"best_k": best["key"]["policy"]["k"], "identical": identical, "outputs": total}
    return Result("speculative pipeline", table, fig, answer, headline, recs + ref)
