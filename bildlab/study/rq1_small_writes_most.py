"""RQ1 (notebooks/rq1_small_writes_most.ipynb): can the small model write most of the text?"""

from __future__ import annotations

from ..harness import evaluate as ev
from ..measure import summary as sm
from ..measure.metrics import METRIC_NAMES
from . import plots
from .common import (
    Result,
    n_text,
    pair_list,
    policy_label,
    record_cells,
    speed_text,
    speedup_ci,
    to_table,
)


def rq1(
    pairs=("toy-mt", "toy-sum"),
    *,
    fallbacks=(0.1, 0.3, 0.5, 0.7, 0.9),
    rollback: float = 3.0,
    figures="figures",
    sweep=None,
    **run,
) -> Result:
    """RQ1: can the small model write most of the text? Quality and speed against the large model's
    share of the tokens, over fallback thresholds, with the small model alone and the large model
    alone as anchors: how much of the small-to-large quality gap BiLD closes."""
    sweep = sweep or ev.sweep  # the harness; a plan passes one that records instead of computing
    rows, points, records, headline, sizes = [], {}, [], {}, {}
    for pair in pair_list(pairs):
        grid = [{"method": "small"}] + [{"fallback": f, "rollback": rollback} for f in fallbacks]
        recs = sweep(pair, grid, **run)
        records += recs
        small, bild = recs[0], recs[1:]
        s0 = small["summary"]
        sizes[pair] = n_text(s0)
        rows.append(
            {
                "pair": pair,
                "policy": "large model alone (vanilla)",
                "N": s0["examples"],
                METRIC_NAMES[s0["metric"]]: sm.fmt(s0["baseline_score"], s0["baseline_score_ci"]),
                "large-model share": 1.0,
                "gap closed": "100%",
            }
        )
        rows.append(
            {
                "pair": pair,
                "policy": "small model alone",
                **record_cells(small),
                "large-model share": 0.0,
                "gap closed": "0%",
            }
        )
        pts, gaps = [], {}
        for r in bild:
            gap, gap_ci = gaps[id(r)] = _gap_closed(r, small)
            rows.append(
                {
                    "pair": pair,
                    "policy": f"BiLD {policy_label(r)}",
                    **record_cells(r),
                    "gap closed": sm.fmt_gap(gap, gap_ci),
                }
            )
            pts.append(
                {
                    "speedup": 1 - r["summary"]["small_share"],
                    "speedup_ci": [1 - r["summary"]["small_share"]] * 2,
                    "score": 100 * gap,
                    "score_ci": [100 * gap_ci[0], 100 * gap_ci[1]],
                    "label": f"fb {r['key']['policy']['fallback']:g}"
                    if r is bild[0] or r is bild[-1]
                    else "",
                }
            )
        points[pair] = pts
        mid = min(bild, key=lambda r: abs(r["key"]["policy"]["fallback"] - 0.5))
        headline[pair] = {
            "small_share": mid["summary"]["small_share"],
            "gap_closed": gaps[id(mid)][0],
            "gap_closed_ci": gaps[id(mid)][1],
            "fallback": mid["key"]["policy"]["fallback"],
            "speedup": speedup_ci(mid),
            "record": mid,
        }
    points["anchors: small alone, large alone"] = [
        {
            "speedup": 0.0,
            "speedup_ci": [0.0, 0.0],
            "score": 0.0,
            "score_ci": [0.0, 0.0],
            "label": "small alone",
        },
        {
            "speedup": 1.0,
            "speedup_ci": [1.0, 1.0],
            "score": 100.0,
            "score_ci": [100.0, 100.0],
            "label": "large alone",
        },
    ]
    fig = plots.speed_quality(
        points,
        metric="small-to-large quality gap closed (%)",
        baseline=100.0,
        title=f"BiLD over fallback thresholds (rollback {rollback:g}), "
        + ", ".join(f"{n} ({pair})" for pair, n in sizes.items()),
        xlabel="large model's share of the output tokens",
        reference=None,
        xlim=(-0.05, 1.05),
    )
    plots.save(fig, "rq1_token_share", figures)
    parts = []
    for pair, head in headline.items():
        mid, share, gap, gap_ci = (
            head.pop("record"),
            head["small_share"],
            head["gap_closed"],
            head["gap_closed_ci"],
        )
        closes = (
            f"BiLD closes {sm.fmt_gap(gap, gap_ci)} of the small-to-large gap at {speed_text(mid)}"
            if gap == gap
            # NaN: no gap
            else f"BiLD runs at {speed_text(mid)}, with {sm.fmt_gap(gap, gap_ci)}"
        )
        parts.append(
            f"on {pair} ({n_text(mid['summary'])}), at fallback {head['fallback']:g} the small model "
            f"writes {share:.0%} of the tokens and {closes}"
        )
    most = [h["small_share"] >= 0.5 for h in headline.values()]
    verdict = "Yes" if all(most) else "No" if not any(most) else "On some pairs"
    answer = f"{verdict}: " + "; ".join(parts) + "."
    return Result("RQ1", to_table(rows), fig, answer, headline, records)


def _gap_closed(bild: dict, small: dict) -> tuple[float, tuple[float, float]]:
    """(score(BiLD) - score(small)) / (score(large) - score(small)), paired over the same examples,
    with its interval. The three systems' outputs come from the two records (both carry the same
    vanilla outputs)."""
    import numpy as np

    from ..measure import intervals, metrics

    if bild.get("placeholder"):  # planning: nothing was decoded
        return 0.0, (0.0, 0.0)
    key = bild["key"]
    refs = [
        ex["target"] for ex in ev.tasks.load_task(key["task"], key["split"], limit=key["limit"])
    ]
    metric = bild["summary"]["metric"]
    data = {
        name: metrics.sentence_data(metric, [e[field] for e in rec["examples"]], refs)
        for name, rec, field in (
            ("bild", bild, "output"),
            ("small", small, "output"),
            ("large", bild, "baseline_output"),
        )
    }

    def gap(idx):
        s, b, lg = (metrics.corpus(metric, data[n], idx) for n in ("small", "bild", "large"))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(lg != s, (b - s) / (lg - s), np.nan)

    value = float(gap(np.arange(len(refs))[None])[0])
    lo, hi = intervals.interval(lambda idx: np.nan_to_num(gap(idx), nan=1.0), len(refs))
    return value, (lo, hi)
