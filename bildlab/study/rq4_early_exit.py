"""RQ4 (notebooks/rq4_early_exit.ipynb): the large model's early exit as the draft, against a
separate small model."""

from __future__ import annotations

from ..harness import evaluate as ev
from ..measure import summary as sm
from .common import Result, bild_grid, draft_sweep, each_pair, speed_text, speedup_ci, versus_text


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
        answer = (
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
        return d["rows"], d["records"], headline, answer

    return each_pair("RQ4", "rq4_early_exit", pairs, figures, one)
