"""RQ2 (notebooks/rq2_policies.ipynb): what the fallback and rollback policies each contribute."""

from __future__ import annotations

from ..harness import evaluate as ev
from ..measure import summary as sm
from ..measure.metrics import METRIC_NAMES
from . import plots
from .common import (
    INF,
    Result,
    Table,
    against,
    bild_grid,
    each_pair,
    front_rows,
    n_text,
    on_test,
    pin_speed,
    plot_point,
    policy_label,
    record_cells,
    short_cells,
    speed,
    speed_text,
    speedup_ci,
    validation_run,
    versus_text,
)


def rq2(
    pairs=("toy-mt", "toy-sum"),
    *,
    fallbacks=(0.1, 0.3, 0.5, 0.7, 0.9),
    rollbacks=(1.0, 2.0, 3.0, 4.0, 6.0),
    tolerance: float = 1.0,
    val_split: str = "validation",
    val_limit=None,
    val_timing_limit=None,
    figures="figures",
    sweep=None,
    **run,
) -> Result:
    """RQ2: what do the fallback and rollback policies each contribute? alpha_FB x alpha_RB over the
    paper's ranges, the speed-quality Pareto front (a policy is dominated only by paired differences
    that separate), and the two ablations (fallback only: no rollback; rollback only: no fallback),
    per pair. Rollback thresholds below ln 2 are lossless by construction (every disagreement is
    rolled back), so the trade-off lives above it."""
    sweep = sweep or ev.sweep  # the harness; a plan passes one that records instead of computing
    kinds = {
        "fallback + rollback": bild_grid(fallbacks, rollbacks),
        "fallback only": bild_grid(fallbacks, [INF]),
        "rollback only": bild_grid([0.0], rollbacks),
    }
    flat = [g for grid in kinds.values() for g in grid]

    def one(pair, ax):
        val = sweep(pair, flat, **validation_run(run, val_split, val_limit, val_timing_limit))
        by_kind, i = {}, 0
        for kind, grid in kinds.items():
            by_kind[kind] = val[i : i + len(grid)]
            i += len(grid)
        front = sm.pareto(val)
        rows = [
            {
                "pair": pair,
                "policy": kind,
                "thresholds": policy_label(r),
                **record_cells(r),
                "on the front": any(r is f for f in front),
            }
            for kind, recs in by_kind.items()
            for r in recs
        ]
        s0 = val[0]["summary"]
        metric = METRIC_NAMES[s0["metric"]]
        best = {kind: sm.choose(recs, tolerance) for kind, recs in by_kind.items()}
        plots.speed_quality(
            {
                kind: [plot_point(r, policy_label(r) if r is best[kind] else "") for r in recs]
                for kind, recs in by_kind.items()
            },
            metric=metric,
            baseline=s0["baseline_score"],
            annotate="mark",
            front=[plot_point(r) for r in front],
            focus=["fallback + rollback", "rollback only"],
            ax=ax,
            title=f"{pair}: fallback x rollback ({val_split}, {n_text(s0)})",
        )
        both = sum(any(r is f for f in by_kind["fallback + rollback"]) for r in front)
        test = on_test(pair, best, sweep, **run)
        vs = {
            kind: versus_text(
                test["fallback + rollback"], test[kind], ("fallback + rollback", kind)
            )
            for kind in ("fallback only", "rollback only")
        }
        n_test = next((n_text(t["summary"]) for t in test.values() if t), "N = 0")
        account = (
            f"On {pair}, the fastest policy of each kind within {tolerance:g} {metric} point of vanilla on "
            f"{val_split} ({n_text(s0)}), reported on {run.get('split', 'test')} ({n_test}): "
            + "; ".join(f"{kind}: {speed_text(t)}" for kind, t in test.items())
            + f". Fallback + rollback vs fallback only: {vs['fallback only']}; vs rollback only: "
            f"{vs['rollback only']}. On {val_split}, {len(front)} of {len(val)} policies are not dominated "
            f"by another's paired differences (with both thresholds: {both})."
        )
        headline = {
            "front": len(front),
            "policies": len(val),
            "chosen": {k: (policy_label(b) if b else None) for k, b in best.items()},
            "test": {k: speedup_ci(t) for k, t in test.items()},
        }
        fr = test["fallback + rollback"]
        line = (
            f"**{pair}** ({n_test}): fallback + rollback {speed(fr, policy=False)}, "
            + " and ".join(
                against(fr, test[kind], kind) if fr is not None else f"{kind} {speed(test[kind])}"
                for kind in ("rollback only", "fallback only")
            )
            + "."
        )
        kind_of = {id(r): kind for kind, recs in by_kind.items() for r in recs}
        shown = [
            {
                "pair": pair,
                "policy": kind,
                "thresholds": policy_label(t) if t else "none qualifies",
                **(short_cells(t) if t else {}),
            }
            for kind, t in test.items()
        ]
        details = [
            f"**{pair}**: the {min(len(front), 25)} fastest of the {len(front)} policies not "
            f"dominated on {val_split} ({n_text(s0)}; {both} with both thresholds)",
            Table(
                front_rows(
                    pair,
                    val,
                    lambda r: f"{kind_of[id(r)]}: {policy_label(r)}",
                    [b for b in best.values() if b],
                )
            ),
        ]
        pin = "\n".join(  # a line per kind
            f"{pair} {kind}: "
            + (f"{headline['chosen'][kind]}, {pin_speed(t)}" if t else "none qualifies")
            for kind, t in test.items()
        )
        return {
            "rows": rows,
            "records": val + [t for t in test.values() if t],
            "headline": headline,
            "account": account,
            "line": line,
            "shown": shown,
            "pin": pin,
            "details": details,
        }

    lead = (
        f"Per kind, the fastest policy within {tolerance:g} quality point of vanilla on {val_split}, "
        f"reported on {run.get('split', 'test')} (95% intervals; paired differences):"
    )
    return each_pair("RQ2", "rq2_policies", pairs, figures, one, lead)
