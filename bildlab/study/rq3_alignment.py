"""RQ3 (notebooks/rq3_alignment.ipynb): does prediction alignment of the small model help?"""

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


def rq3(
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
    """RQ3: does prediction alignment (fine-tuning the small model on the large model's outputs)
    help? Agreement with the large model on held-out data (the zoo card) and both Pareto fronts side
    by side, with intervals, per pair."""
    sweep = sweep or ev.sweep  # the harness; a plan passes one that records instead of computing

    def one(pair, ax):
        d = draft_sweep(
            pair,
            {"small": "unaligned", "aligned": "aligned"},
            bild_grid(fallbacks, rollbacks),
            f"{pair}: aligned vs unaligned small model",
            tolerance,
            val_split,
            val_limit,
            val_timing_limit,
            ax,
            sweep,
            **run,
        )
        best, agree = d["best"], _agreement(pair)
        matched = _matched(d["by"]["aligned"], d["by"]["unaligned"], val_split)
        account = (
            f"On {pair}: agreement with the large model's greedy tokens (zoo card, held-out test): unaligned "
            f"{agree.get('unaligned', float('nan')):.1%}, aligned {agree.get('aligned', float('nan')):.1%}. "
            f"The {d['within']}: aligned {speed_text(best['aligned'])}, unaligned {speed_text(best['unaligned'])}: "
            f"{versus_text(best['aligned'], best['unaligned'], ('the aligned', 'the unaligned'))}. "
            + matched
        )
        headline = {
            "agreement": agree,
            "chosen": {k: (policy_label(b) if b else None) for k, b in best.items()},
            "speedup_within_tolerance": {k: speedup_ci(b) for k, b in best.items()},
        }
        a, u = best["aligned"], best["unaligned"]
        n_test = next((n_text(t["summary"]) for t in best.values() if t), "N = 0")
        agreement = (
            f"agreement with the large model {agree['unaligned']:.1%} unaligned, "
            f"{agree['aligned']:.1%} aligned; "
            if "aligned" in agree and "unaligned" in agree
            else ""
        )
        line = (
            f"**{pair}** ({n_test}): {agreement}aligned {speed(a, policy=False)}, "
            f"{against(a, u, 'the unaligned') if a else 'no aligned policy qualifies'} "
            f"at {speed(u, policy=False)}."
        )
        shown = [
            {
                "pair": pair,
                "small model": label,
                "agreement": f"{agree[label]:.1%}" if label in agree else "",
                "thresholds": policy_label(t) if t else "none qualifies",
                **(short_cells(t) if t else {}),
            }
            for label, t in best.items()
        ]
        draft_of = {id(r): label for label, rs in d["by"].items() for r in rs}
        details = [
            f"**{pair}**: the policies not dominated on {val_split}, both small models together. "
            + matched,
            Table(
                front_rows(
                    pair,
                    d["records"][: sum(len(rs) for rs in d["by"].values())],
                    lambda r: f"{draft_of[id(r)]}: {policy_label(r)}",
                    [b for b in best.values() if b],
                )
            ),
        ]
        pin = (  # two headlines, a line each
            f"{pair} agreement: "
            + ", ".join(f"{k} {v:.4f}" for k, v in agree.items())
            + "".join(
                f"\n{pair} {k}: " + (f"{headline['chosen'][k]}, {pin_speed(b)}" if b else "none")
                for k, b in best.items()
            )
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
        f"With each small model, the fastest policy within {tolerance:g} quality point of the vanilla "
        f"large model on {val_split}, reported on {run.get('split', 'test')} (95% intervals; the "
        f"aligned against the unaligned by paired differences):"
    )
    return each_pair("RQ3", "rq3_alignment", pairs, figures, one, lead)


def _agreement(pair: str) -> dict:
    from ..world.models import TOY_PAIRS, read_card

    if pair not in TOY_PAIRS:
        return {}
    test = read_card()["test"].get(pair, {})
    large, small, aligned = TOY_PAIRS[pair][:3]
    out = {
        "unaligned": test.get(small, {}).get("agreement"),
        "aligned": test.get(aligned, {}).get("agreement"),
    }
    out["early exit"] = (
        test.get("t5-early-exit", {}).get("agreement") if large.startswith("t5") else None
    )
    return {k: v for k, v in out.items() if v is not None}


def _matched(aligned: list[dict], unaligned: list[dict], split: str) -> str:
    """Aligned against unaligned at the same policy, where both are lossless (so their outputs are
    the same and only speed differs), each pair of records by its paired speed difference on the
    shared validation examples."""
    pairs = [(a, u) for a, u in zip(aligned, unaligned) if sm.lossless(a) and sm.lossless(u)]
    if not pairs:
        return f"No policy keeps every output identical to vanilla's for both on {split}."
    diffs = [sm.speed_difference(a, u) for a, u in pairs]
    faster = sum(c["speedup_difference_ci"][0] > 0 for c in diffs)
    slower = sum(c["speedup_difference_ci"][1] < 0 for c in diffs)
    lo, hi = (
        min(c["speedup_difference"] for c in diffs),
        max(c["speedup_difference"] for c in diffs),
    )
    return (
        f"At the same policy, where both are lossless on {split} ({len(pairs)} "
        f"{'policy' if len(pairs) == 1 else 'policies'}, N = {diffs[0]['n']}), "
        f"the aligned is detectably faster at {faster or 'none'} of them, the unaligned at "
        f"{slower or 'none'} (paired speed differences, aligned − unaligned, from {lo:+.3f}x to "
        f"{hi:+.3f}x)."
    )
