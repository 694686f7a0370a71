"""RQ1 (notebooks/rq1_small_writes_most.ipynb): can the small model write most of the text?"""

from __future__ import annotations

from ..harness import evaluate as ev
from ..measure import summary as sm
from ..measure.metrics import METRIC_NAMES
from . import plots
from .common import (
    MAX_ROWS,
    Result,
    Table,
    bullets,
    csv_note,
    n_text,
    pair_list,
    pin_speed,
    policy_label,
    record_cells,
    short_cells,
    speed,
    speed_text,
    speedup_ci,
    to_table,
    value,
    write_csv,
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
    rows, points, records, headline, sizes, shown = [], {}, [], {}, {}, []
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
        metric = METRIC_NAMES[s0["metric"]]
        shown.append(
            {
                "pair": pair,
                "policy": "large alone",
                "large-model share": "100%",
                "gap closed": "100%",
                "N": str(s0["examples"]),
                "quality": f"{value(s0['baseline_score'], s0['baseline_score_ci'])} {metric}",
            }
        )
        shown.append(
            {
                "pair": pair,
                "policy": "small alone",
                "large-model share": "0%",
                "gap closed": "0%",
                **short_cells(small, per_call=False),
            }
        )
        pts, gaps = [], {}
        for r in bild:
            gap, gap_ci = gaps[id(r)] = _gap_closed(r, small)
            shown.append(
                {
                    "pair": pair,
                    # the rollback is the question's one value (the answer and the figure say it)
                    "policy": f"BiLD fb {r['key']['policy']['fallback']:g}",
                    "large-model share": f"{1 - r['summary']['small_share']:.0%}",
                    "gap closed": _gap_cell(gap, gap_ci),
                    **short_cells(r, per_call=False),
                }
            )
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
                    if (r is bild[0] or r is bild[-1]) and not points  # the first pair's: no clash
                    else "",
                    "label_side": "left" if r is bild[0] else "right",  # off the next points
                }
            )
        points[f"{pair} ({n_text(s0)})"] = pts
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
            "label_side": "left",  # inside the axes
        },
    ]
    fig = plots.speed_quality(
        points,
        metric="small-to-large quality gap closed (%)",
        baseline=100.0,
        title=f"BiLD over fallback thresholds (rollback {rollback:g})",
        xlabel="large model's share of the output tokens",
        reference=None,
        xlim=(-0.05, 1.05),
    )
    plots.save(fig, "rq1_token_share", figures)
    if len(shown) > MAX_ROWS:  # many pairs: the large model alone is in the full table
        shown = [r for r in shown if r["policy"] != "large alone"][:MAX_ROWS]
    parts, lines, pins = [], [], []
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
        gap_words = (
            f"BiLD closes {_gap_cell(gap, gap_ci)} of the quality gap between the small and the "
            f"large model alone"
            if gap == gap
            else "the small model alone scores as the large (no gap to close)"
        )
        lines.append(
            f"**{pair}** ({n_text(mid['summary'])}): the small model writes {share:.0%} of the "
            f"tokens; {gap_words}, at {speed(mid, policy=False)}."
        )
        pins.append(
            f"{pair}: small model writes {share:.1%}, gap closed {100 * gap:.1f}%, "
            f"{pin_speed(mid)} at fb {head['fallback']:g}"
        )
    most = [h["small_share"] >= 0.5 for h in headline.values()]
    verdict = "Yes" if all(most) else "No" if not any(most) else "On some pairs"
    answer = f"{verdict}: " + "; ".join(parts) + "."
    fb = ", ".join(sorted({f"{h['fallback']:g}" for h in headline.values()}))
    short = (
        f"**{verdict}.** At fallback {fb} (rollback {rollback:g}), with 95% paired-bootstrap intervals:"
        f"\n\n" + bullets(lines)
    )
    full = to_table(rows)
    link = write_csv(full, "rq1_token_share", figures)
    return Result(
        "RQ1",
        full,
        fig,
        short,
        headline,
        records,
        summary=Table(shown),
        details=[csv_note(link, len(full), "every column of every policy")],
        pin="\n".join(pins),
        account=answer,
    )


def _gap_cell(gap: float, ci) -> str:
    if gap != gap:
        return "no gap"
    return value(100 * gap, [100 * ci[0], 100 * ci[1]], "%", default=0)


def _gap_closed(bild: dict, small: dict) -> tuple[float, tuple[float, float]]:
    """(score(BiLD) - score(small)) / (score(large) - score(small)), paired over the same examples,
    with its interval. The three systems' outputs come from the two records (both carry the same
    vanilla outputs)."""
    import numpy as np

    from ..measure import intervals, metrics

    outputs = [[e[f] for e in rec["examples"]] for rec, f in ((bild, "output"), (small, "output"))]
    if outputs[0] == outputs[1] == [e["baseline_output"] for e in bild["examples"]]:
        nan = float("nan")  # the three systems wrote the same: no gap, nothing to score
        return nan, (nan, nan)
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
