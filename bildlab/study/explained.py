"""Speedups explained by measured costs (notebooks/rq2_policies.ipynb, its second section): every
committed record's measured speedup against the one its exact call counts predict on a calibration
of the machine (`costs`), and the chosen policies' speedups against the cost ratio c (the counts
fixed, the costs varied), with the calibrated machines marked: what the same policy would give on a
machine whose draft costs c of a large pass."""

from __future__ import annotations

import numpy as np

from ..harness import pricing
from ..harness.registry import Registry, digest
from ..measure import costs
from . import plots
from .common import Result, Table, policy_label, to_table

CS = tuple(np.round(np.linspace(0.02, 1.0, 50), 3))  # the cost ratios the curves are drawn at


def _label(record: dict) -> str:
    k = record["key"]
    draft = k.get("draft", "small")
    return f"{k['pair']}: {policy_label(record)}" + (f", {draft}" if draft != "small" else "")


def explained(
    registry, chosen: list[dict], *, figures="figures", tolerance: float = costs.TOLERANCE
) -> Result:
    """Measured against predicted for every priced record of `registry` (a path or a Registry), per
    pair: how many lie within `tolerance` (the ratio's point) and the spread of the ratio; and for
    the `chosen` records (e.g. RQ2's policies on test), the predicted speedup against c on this
    pair's calibration, each calibrated machine's c marked."""
    reg = Registry.of(registry)
    records = [r for r in reg.records() if r["summary"].get("measured_over_predicted") is not None]
    machines = {}  # the newest calibration of each pair on each machine (CPU or GPU model)
    for c in sorted(reg.calibrations(), key=lambda c: c["made"]):
        machines.setdefault(c["key"]["pair"], {})[_machine(c["key"])] = c
    rows, groups, per_pair = [], {}, {}
    for r in records:  # by pair, by the calibrated machine, and by where the record was timed
        groups.setdefault((r["key"]["pair"], _machine(r["calibration"]), _where(r)), []).append(r)
    for (pair, machine, where), rs in sorted(groups.items()):
        ratios = np.array([r["summary"]["measured_over_predicted"] for r in rs])
        within = int((np.abs(ratios - 1) <= tolerance).sum())
        per_pair[f"{pair}, {where} ({machine})"] = [within, len(ratios)]
        cal, made = rs[0]["calibration"], sorted({r["calibration"].get("made") for r in rs})
        rows.append(
            {
                "pair": pair,
                "timed": where,
                "records priced": len(ratios),
                f"within ±{tolerance:.0%}": within,
                "share within": round(within / len(ratios), 3),
                "measured / predicted: median [min, max]": f"{np.median(ratios):.3f} [{ratios.min():.3f}, "
                f"{ratios.max():.3f}]",
                "calibration": (
                    f"{cal.get('processor')}, {cal.get('threads')} thread(s), "
                    + (
                        made[0]
                        if len(made) == 1
                        else f"{len(made)} of them, {made[0]} to {made[-1]}"
                    )
                ),
            }
        )
    fig, (ax1, ax2) = plots.panels(2, 6.4, 6.0)
    plots.measured_predicted(
        {
            f"{p}, {w} ({m})": [
                (
                    r["summary"]["predicted_speedup"],
                    r["summary"]["predicted_speedup_ci"],
                    r["summary"]["speedup"],
                    r["summary"]["speedup_ci"],
                )
                for r in rs
            ]
            for (p, m, w), rs in sorted(groups.items())
        },
        tolerance=tolerance,
        ax=ax1,
        title=f"every priced record: measured against predicted (N = {len(records)} records)",
    )
    curves, marks = {}, {}
    for r in chosen:
        there, own = machines.get(r["key"]["pair"], {}), r.get("calibration")
        cal = (there.get(_machine(own)) if own else None) or (
            list(there.values())[-1] if there else None
        )
        if cal is None or r["summary"].get("predicted_speedup") is None:
            continue
        sources, enc_dec = pricing.source_lengths(
            r["key"]["pair"], r["key"]["task"], r["key"]["split"], r["key"]["limit"]
        )
        draft = r["key"].get("draft", "small")
        curves[_label(r)] = [
            costs.predict(
                r, costs.with_cost_ratio(cal, c, draft), sources, encoder_decoder=enc_dec
            )["predicted_speedup"]
            for c in CS
        ]
        marks[_label(r)] = []
        for machine, other in there.items():
            try:
                c = costs.cost_ratio(other, draft)
            except ValueError:  # a draft that machine's calibration did not measure
                continue
            predicted = costs.predict(r, other, sources, encoder_decoder=enc_dec)[
                "predicted_speedup"
            ]
            # measured there: where the registry says the record was timed (its machines)
            timed = machine in {_machine(m) for m in r.get("machines", [])}
            marks[_label(r)].append(
                (c, predicted, r["summary"]["speedup"] if timed else None, machine)
            )
    plots.against_cost_ratio(
        list(CS),
        curves,
        marks,
        ax=ax2,
        title="chosen policies: predicted speedup against c (their counts, other costs)",
    )
    if not curves:  # say why the panel is empty
        ax2.text(
            0.5,
            0.5,
            "no chosen policy is priced:\nnone was timed where\na calibration was made",
            ha="center",
            va="center",
            fontsize=8,
            transform=ax2.transAxes,
        )
        ax2.set_xticks([]), ax2.set_yticks([])
    fig.tight_layout()
    plots.save(fig, "rq2_costs", figures)
    n, inside = len(records), sum(bool(costs.explained(r, tolerance)) for r in records)
    answer = (
        f"Of {n} records priced by a calibration, {inside} ({inside / max(n, 1):.0%}) have a measured speedup "
        f"within ±{tolerance:.0%} of the one their exact call counts predict"
        + "".join(
            f"; {row['pair']} (timed {row['timed']}): {row[f'within ±{tolerance:.0%}']} of "
            f"{row['records priced']} (measured / predicted "
            f"{row['measured / predicted: median [min, max]']})"
            for row in rows
        )
        + ". "
        + "; ".join(
            f"{name}: "
            + ", ".join(
                f"{'measured ' + format(m, '.2f') + 'x and ' if m is not None else ''}predicted {p:.2f}x on {w} "
                f"(c = {c:.3f})"
                for c, p, m, w in marks[name]
            )
            + f"; predicted {_at(CS, curves[name], 0.1):.2f}x "
            f"at c = 0.1 and {_at(CS, curves[name], 0.5):.2f}x at c = 0.5"
            for name in curves
        )
        + "."
    )
    ratios = np.array([r["summary"]["measured_over_predicted"] for r in records])
    per_method = {}
    for r in records:
        m = per_method.setdefault(r["key"]["method"], [0, 0])
        m[0], m[1] = m[0] + bool(costs.explained(r, tolerance)), m[1] + 1
    headline = {
        "chosen": [
            digest(r["key"]) for r in chosen
        ],  # what the curves are of (a replay reads them)
        "records": n,
        "within": inside,
        "tolerance": tolerance,
        "per_pair": per_pair,
        "per_method": per_method,
        "ratio": {  # none without a priced record
            "median": round(float(np.median(ratios)), 3),
            "min": round(float(ratios.min()), 3),
            "max": round(float(ratios.max()), 3),
        }
        if records
        else None,
    }
    plots.save_data(headline, "rq2_costs", figures)  # the README's line on it is made from this
    at = {c: [_at(CS, ys, c) for ys in curves.values()] for c in (0.1, 0.5)}
    ratio = headline["ratio"]
    short = (
        f"Of {n} records priced by a calibration of the machine they ran on, **{inside} "
        f"({inside / max(n, 1):.0%}) have a measured speedup within ±{tolerance:.0%} of the one "
        f"their exact call counts predict** (measured / predicted: median {ratio['median']:.3f}, "
        f"range {ratio['min']:.3f} to {ratio['max']:.3f})."
        if ratio
        else "No record is priced by a calibration of the machine it ran on yet (`bildlab "
        "calibrate` there, or `bildlab registry --retime`)."
    ) + (
        f" With their counts fixed and other costs, the {len(curves)} chosen policies would run at "
        f"{min(at[0.1]):.2f}–{max(at[0.1]):.2f}x on a machine whose draft step costs c = 0.1 of a "
        f"large pass, and at {min(at[0.5]):.2f}–{max(at[0.5]):.2f}x at c = 0.5."
        if curves
        else ""
    )
    shown = Table(
        [
            {
                "pair": row["pair"],
                "timed": row["timed"],
                "records": row["records priced"],
                f"within ±{tolerance:.0%}": f"{row[f'within ±{tolerance:.0%}']} "
                f"({row['share within']:.0%})",
                "measured / predicted: median [min, max]": row[
                    "measured / predicted: median [min, max]"
                ],
                "calibration": row["calibration"],
            }
            for row in rows
        ]
    )
    return Result(
        "speedups explained by measured costs",
        to_table(rows),
        fig,
        short,
        headline,
        records,
        summary=shown,
        pin=f"{inside} of {n} within ±{tolerance:.0%}; measured / predicted {headline['ratio']}",
        account=answer,
    )


def _machine(key: dict) -> str:
    """A calibrated machine, as a figure names it: its CPU model, or its GPU's name (`key`: a
    calibration's key, or the reference a record keeps of its calibration)."""
    return key["processor"] if key.get("device_name") == "cpu" else key.get("device_name", "?")


def _where(record: dict) -> str:
    """Where a priced record was timed, against the machine of the calibration that priced it."""
    cal = record.get("calibration") or {}
    if cal.get("same_run"):  # `bildlab registry --retime`: calibrated and timed in one run
        return "in the calibration's run"
    return {
        True: "on a machine of the calibrated model, in another run",
        False: "on another machine",
    }.get(cal.get("timed_here"), "before records named the CPU")


def _at(xs, ys, x: float) -> float:
    return float(np.interp(x, xs, ys))


def elsewhere(registry, calibration, records: list[dict] | None = None):
    """A table of every priced record's speedup on another machine: `calibration` is a calibration
    record (a dict, or the path of its JSON file, e.g. copied from that machine's registry
    `.calibrations/` after `bildlab calibrate`); `records` default to every record of `registry` of
    the calibration's pair. Measured here, predicted here, predicted there (with its 95% interval).
    """
    import json
    from pathlib import Path

    reg = Registry.of(registry)
    cal = (
        json.loads(Path(calibration).read_text())
        if isinstance(calibration, (str, Path))
        else calibration
    )
    if not isinstance(cal, dict) or "costs" not in cal or "key" not in cal:
        raise ValueError(
            f"calibration must be a calibration record (a dict with 'key' and 'costs', or its JSON "
            f"file); got {calibration!r}"
        )
    rows = pricing.elsewhere(records if records is not None else reg.records(), cal)
    where = f"{cal['key'].get('device_name')} / {cal['key'].get('processor')}"
    return to_table(
        [
            {
                "pair": r["pair"],
                "split": r["split"],
                "method": r["method"],
                "draft": r["draft"],
                "policy": policy_label({"key": r["key"]}),
                "measured here": f"{r['measured here']:.2f}x [{r['measured here ci'][0]:.2f}, "
                f"{r['measured here ci'][1]:.2f}]",
                "predicted here": r["predicted here"],
                f"predicted on {where}": f"{r['predicted there']:.2f}x [{r['predicted there ci'][0]:.2f}, "
                f"{r['predicted there ci'][1]:.2f}]",
            }
            for r in rows
        ]
    )
