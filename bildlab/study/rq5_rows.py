"""RQ5's rows: the paper's main table (Kim et al. 2023, Table 2) and the main table as a notebook
shows it (rows that chose the same policy collapsed, quality in one column named by its metric, the
paper's numbers beside)."""

from __future__ import annotations

from ..harness import evaluate as ev
from ..measure import summary as sm
from ..measure.metrics import METRIC_NAMES
from ..world.models import task_of
from .common import to_table
from .present import value

# The paper's main table (Kim et al. 2023, Table 2; thresholds (alpha_RB, alpha_FB) as reported by a
# reproduction).
PAPER_TABLE = {
    "iwslt2017-de-en": {
        "vanilla": (40.32, 1.0),
        "unaligned": (40.33, 1.43, (2, 0.6)),
        "unaligned degraded": (39.44, 1.58, (3, 0.5)),
        "aligned": (40.24, 1.62, (3, 0.9)),
        "aligned degraded": (39.13, 1.78, (4, 0.6)),
    },
    "wmt14-de-en": {
        "vanilla": (31.38, 1.0),
        "unaligned": (31.28, 1.34, (2, 0.6)),
        "unaligned degraded": (30.47, 1.43, (3, 0.5)),
        "aligned": (31.26, 1.47, (2, 0.8)),
        "aligned degraded": (30.33, 1.70, (5, 0.6)),
    },
    "xsum": {
        "vanilla": (35.08, 1.0),
        "unaligned": (35.12, 1.48, (3, 0.5)),
        "unaligned degraded": (34.02, 1.72, (5, 0.3)),
        "aligned": (35.05, 1.50, (2, 0.6)),
        "aligned degraded": (33.95, 1.80, (5, 0.4)),
    },
    "cnn_dailymail": {
        "vanilla": (41.54, 1.0),
        "unaligned": (41.44, 1.71, (3, 0.4)),
        "unaligned degraded": (40.57, 2.05, (6, 0.2)),
        "aligned": (41.52, 1.85, (3, 0.3)),
        "aligned degraded": (40.96, 2.12, (6, 0.2)),
    },
}


def paper_table():
    """The paper's main table (PAPER_TABLE) as printed, for the shape of RQ5's rows: per task, each
    row's quality (BLEU or ROUGE-L) / speedup over the vanilla large model, with its (rb, fb); the
    paper has no lossless rows."""
    rows = []
    for row in ROWS:
        entry = {"row": row}
        for task, table in PAPER_TABLE.items():
            v = table.get(row)
            entry[task] = (
                "–"
                if v is None
                else f"{v[0]:.2f} / {v[1]:.2f}x" + (f" at {v[2]}" if len(v) > 2 else "")
            )
        rows.append(entry)
    return to_table(rows).set_index("row")


ROWS = (
    "vanilla",
    "unaligned lossless",
    "unaligned",
    "unaligned degraded",
    "aligned lossless",
    "aligned",
    "aligned degraded",
)
# a reference row: no small model at all (with lookup_ngrams, lookup_ks)
LOOKUP_ROW = "prompt lookup (no small model)"


def _paper_cell(pair: str, rows: list[str]) -> str:
    """The paper's numbers for `rows` beside ours: its row on the same task where the paper reports
    one, else the range of its speedups over its four tasks (the paper has no lossless rows)."""
    cells = []
    for row in rows:
        if pair in PAPER_TABLE:
            v = PAPER_TABLE[pair].get(row)
            if v:
                cells.append(f"{v[0]:.2f} / {v[1]:.2f}x")
            continue
        speeds = [t[row][1] for t in PAPER_TABLE.values() if row in t]
        if speeds and row != "vanilla":
            cells.append(f"{row_name(row)} {min(speeds):.2f}–{max(speeds):.2f}x")
    return "; ".join(cells)


def row_name(row: str) -> str:
    """A row's kind: 'lossless', 'no loss' or 'degraded'."""
    return row.split(" ", 1)[1] if " " in row else "no loss"


def compact(headline: dict, passes: int) -> tuple[list[dict], list[str], list[str]]:
    """The main table as shown: per task the vanilla row, then one row per distinct policy of each
    small model (the rows that chose it named together, e.g. 'lossless = no loss = degraded'), the
    quality in one column with its metric, the paper's numbers beside; the answer's lines and the
    pin's."""
    shown, lines, pins = [], [], []
    for pair, h in headline.items():
        metric = METRIC_NAMES[ev.tasks.task_metric(task_of(pair))]
        if "vanilla" in h:
            v = h["vanilla"]
            shown.append(
                {
                    "task": pair,
                    "rows": "vanilla large model",
                    "quality": f"{value(v['score'], v['score_ci'])} {metric}",
                    "speedup, pass 1": "1x",
                    "paper": _paper_cell(pair, ["vanilla"]),
                }
            )
        groups: dict = {}
        for row in ROWS[1:] + (LOOKUP_ROW,):
            if row in h:
                model = row.split()[0] if row != LOOKUP_ROW else LOOKUP_ROW
                groups.setdefault((model, str(h[row]["policy"])), []).append(row)
        parts = []
        for (model, _), rows in groups.items():
            x = h[rows[0]]
            name = (
                model
                if model == LOOKUP_ROW
                else f"{model}: " + " = ".join(row_name(r) for r in rows)
            )
            lossless = x["identical"] == x["examples"]
            delta = (
                "identical outputs" if lossless else value(x["delta"], x["delta_ci"], signed=True)
            )
            policy = x["policy"] if isinstance(x["policy"], str) else tuple(x["policy"])
            n = (
                x["examples"]
                if x["timed"] == x["examples"]
                else f"{x['examples']} ({x['timed']} timed)"
            )
            shown.append(
                {
                    "task": pair,
                    "rows": name if isinstance(policy, str) else f"{name} at (rb, fb) = {policy}",
                    "N": str(n),
                    "quality": f"{value(x['score'], x['score_ci'])} {metric}",
                    "Δ quality": delta,
                    **{
                        f"speedup, pass {p + 1}": value(v, ci, "x")
                        for p, (v, ci) in enumerate(zip(x["speedups"], x["speedup_cis"]))
                    },
                    "paper": _paper_cell(pair, [] if model == LOOKUP_ROW else rows),
                }
            )
            speeds = value(x["speedups"][0], x["speedup_cis"][0], "x")  # pass 1; all in the table
            said = "prompt lookup" if model == LOOKUP_ROW else name  # it has no small model
            if not lossless:
                note = f" ({delta} {metric})"
            elif "lossless" in name:
                note = ""  # its name says so
            else:
                note = " (lossless)"
            parts.append(f"{said} {speeds}{note}")
            pins.append(
                f"{pair} {name}: {policy} "
                + " ".join(sm.fmt(v, ci, "x", 3) for v, ci in zip(x["speedups"], x["speedup_cis"]))
                + f", identical {x['identical']}/{x['examples']}"
            )
        lines.append(f"**{pair}**: " + ("; ".join(parts) or "no BiLD policy qualifies") + ".")
    # the outputs identical to vanilla's are counted in the full table (CSV) and the README's
    cols = ["task", "rows", "N", "quality", "Δ quality"]
    cols += [f"speedup, pass {p + 1}" for p in range(passes)] + ["paper"]
    shown = [{c: r.get(c, "") for c in cols} for r in shown]
    return shown, lines, pins
