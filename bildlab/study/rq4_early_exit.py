"""RQ4 (notebooks/rq4_early_exit.ipynb): the large model's early exit as the draft, against a
separate small model."""

from __future__ import annotations

from ..harness import evaluate as ev
from ..measure import summary as sm
from .common import (
    Result,
    Table,
    against,
    bild_grid,
    draft_sweep,
    each_pair,
    front_rows,
    n_text,
    pin_speed,
    policy_label,
    short_cells,
    speed,
    speed_text,
    speedup_ci,
    versus_text,
)


def rq4(
    pairs=("toy-mt", "toy-sum"),
    *,
    fallbacks=(0.3, 0.5, 0.7, 0.9),
    rollbacks=(0.5, 2.0, 3.0, 5.0),
    tolerance: float = 1.0,
    val_split: str = "validation",
    val_limit=None,
    val_timing_limit=None,
    figures="figures",
    sweep=None,
    **run,
) -> Result:
    """RQ4: BiLD with an early exit of the large model as the draft, against a separate small model;
    each draft's cost ratio c and acceptance, per pair."""
    sweep = sweep or ev.sweep  # the harness; a plan passes one that records instead of computing

    def one(pair, ax):
        d = draft_sweep(
            pair,
            {"small": "separate small", "early-exit": "early exit"},
            bild_grid(fallbacks, rollbacks),
            f"{pair}: early-exit draft vs separate small model",
            tolerance,
            val_split,
            val_limit,
            val_timing_limit,
            ax,
            sweep,
            **run,
        )
        best, by = d["best"], d["by"]
        costs = {
            label: round(sum(sm.cost_ratio(r) for r in rs) / len(rs), 3) for label, rs in by.items()
        }
        accept = {
            label: round(sum(sm.acceptance(r) for r in rs) / len(rs), 3) for label, rs in by.items()
        }
        account = (
            f"On {pair}, the {d['within']}: early exit {speed_text(best['early exit'])}, separate small "
            f"{speed_text(best['separate small'])}: "
            f"{versus_text(best['early exit'], best['separate small'], ('the early exit', 'the small'))}. "
            f"Cost ratio c (draft step / large step): early exit {costs['early exit']}, separate small "
            f"{costs['separate small']}; acceptance {accept['early exit']} vs {accept['separate small']}."
        )
        headline = {
            "cost_ratio": costs,
            "acceptance": accept,
            "speedup_within_tolerance": {k: speedup_ci(b) for k, b in best.items()},
        }
        e, s_ = best["early exit"], best["separate small"]
        n_test = next((n_text(t["summary"]) for t in best.values() if t), "N = 0")
        line = (
            f"**{pair}** ({n_test}): the early exit {speed(e, policy=False)}, "
            f"{against(e, s_, 'the separate small model') if e else 'none qualifies'} "
            f"at {speed(s_, policy=False)}; its steps cost c = {costs['early exit']:.2f} of a large "
            f"step (the small model's {costs['separate small']:.2f})."
        )
        shown = [
            {
                "pair": pair,
                "draft": label,
                "cost ratio c": f"{costs[label]:.2f}",
                "acceptance": f"{accept[label]:.1%}",
                "thresholds": policy_label(t) if t else "none qualifies",
                **(short_cells(t, per_call=False) if t else {}),
            }
            for label, t in best.items()
        ]
        draft_of = {id(r): label for label, rs in by.items() for r in rs}
        details = [
            f"**{pair}**: the policies not dominated on {val_split}, both drafts together",
            Table(
                front_rows(
                    pair,
                    d["records"][: sum(len(rs) for rs in by.values())],
                    lambda r: f"{draft_of[id(r)]}: {policy_label(r)}",
                    [b for b in best.values() if b],
                )
            ),
        ]
        pin = (  # a line per headline
            f"{pair} acceptance: early exit {accept['early exit']:.3f}, "
            f"separate small {accept['separate small']:.3f}"
            + "".join(f"\n{pair} {k}: {pin_speed(b)}" for k, b in best.items())
        )
        return {
            "rows": d["rows"],
            "records": d["records"],
            "headline": headline,
            "account": account,
            "line": line,
            "shown": shown,
            "pin": pin,
            "details": details,
        }

    lead = (
        f"Per draft, the fastest policy within {tolerance:g} quality point of vanilla on {val_split}, "
        f"reported on {run.get('split', 'test')} (95% intervals; paired differences):"
    )
    return each_pair("RQ4", "rq4_early_exit", pairs, figures, one, lead)
