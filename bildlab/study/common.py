"""What the study's questions share: the `Result` they return, table cells and answer phrases of a
record, the split between validation (choices) and test (reports), and a question asked of every
pair."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..measure import summary as sm
from ..measure.metrics import METRIC_NAMES
from . import plots
from .present import (  # noqa: F401  (the questions import these from here too)
    MAX_COLUMNS,
    MAX_ROWS,
    Note,
    Table,
    against,
    bullets,
    csv_note,
    decimals,
    n_cell,
    pin_speed,
    policy_label,
    short_cells,
    speed,
    tokens_per_call,
    value,
    versus,
    write_csv,
)

INF = math.inf


@dataclass
class Result:
    """What a question returns. A notebook shows, top-down: `answer` (a few sentences, Markdown:
    its `_repr_markdown_`), `figure`, `summary` (a compact `Table`), then each of `details` (`Note`s
    and `Table`s; a text given is made a Note); `pin` is one short line per headline number (the
    notebook's nbval check). `table` is the full table (also written beside the figure as CSV),
    `account` the whole account in words, every comparison spelled out."""

    name: str
    table: object  # pandas.DataFrame: every row and column
    figure: object  # matplotlib Figure
    answer: str  # Markdown
    headline: dict = field(default_factory=dict)
    records: list = field(default_factory=list)
    sections: dict = field(default_factory=dict)  # a notebook's further sections: {name: Result}
    summary: object = None  # Table: the rows that matter
    details: list = field(default_factory=list)  # Notes (Markdown) and Tables, in order
    pin: str = ""
    account: str = ""

    def __post_init__(self):
        self.details = [Note(d) if isinstance(d, str) else d for d in self.details]

    def _repr_markdown_(self) -> str:
        return self.answer

    def __repr__(self) -> str:
        return f"<{self.name}: {self.pin or self.answer[:80]}>"


# the run settings a notebook passes on to its question (`run_settings`): the protocol's, then
# where records and figures go and how sweeps run
RUN = (
    "split",
    "device",
    "threads",
    "max_new_tokens",
    "rollback_rule",
    "timing_limit",
    "registry",
    "figures",
    "progress",
    "executor",
    "shard_size",
    "recompute",
    "batch_size",
    "memory",
    "chunk_size",
)


def run_settings(namespace: dict) -> dict:
    """The run settings a notebook defines (its `globals()`: the run-settings cell's values, or
    papermill's), as keyword arguments of its question."""
    return {name: namespace[name] for name in RUN if name in namespace}


def to_table(rows: list[dict]):
    """A table for the notebook; cells that do not apply to a row are blank (not NaN)."""
    import pandas as pd

    return pd.DataFrame(rows).astype(object).fillna("")


def n_text(summary: dict) -> str:
    """A record's sizes for an answer or a title: 'N = 1000', or 'N = 1000, 300 timed' where speed
    comes from a timed sample and quality from every example."""
    timed = summary.get("timed_examples")
    return f"N = {summary['examples']}" + (f", {timed} timed" if timed is not None else "")


def record_cells(record: dict) -> dict:
    """A record's numbers with their 95% intervals, as table cells (N in every row; the timed N
    where speed comes from a timed sample): first what the method did, counted exactly (`mechanism`:
    the same on every machine), then quality, then the speedup measured on this machine and the one
    its counts predict on the calibrated costs."""
    s, m = record["summary"], record.get("mechanism") or {}
    metric = METRIC_NAMES.get(s["metric"], s["metric"])
    share = m.get("small_share", s["small_share"])
    predicted = s.get("predicted_speedup")
    return {
        "N": s["examples"],
        **({"N timed": s["timed_examples"]} if "timed_examples" in s else {}),
        "large-model share": None if share is None else round(1 - share, 3),
        "tokens / large call": tokens_per_call(record),
        metric: sm.fmt(s["score"], s["score_ci"]),
        f"Δ {metric} vs vanilla": sm.fmt(s["delta"], s["delta_ci"], signed=True),
        "speedup": sm.fmt(s["speedup"], s["speedup_ci"], "x"),
        "predicted speedup": sm.fmt(predicted, s.get("predicted_speedup_ci"), "x")
        if predicted
        else None,
        "speedup vs HF generate": sm.fmt(s["speedup_hf"], s["speedup_hf_ci"], "x"),
        "identical to vanilla": f"{s['identical_count']}/{s['examples']}",
        "hit max_new_tokens (method / vanilla)": f"{s['truncated']} / {s['baseline_truncated']}",
        # outputs computed in batches: on the timed examples, the batch-1 outputs must equal
        # them
        **(
            {"batch-1 = batched (timed)": f"{record['timed_identical']}/{len(record['timed'])}"}
            if "timed" in record
            else {}
        ),
    }


def plot_point(record: dict, label: str = "") -> dict:
    s = record["summary"]
    return {
        "speedup": s["speedup"],
        "speedup_ci": s["speedup_ci"],
        "score": s["score"],
        "score_ci": s["score_ci"],
        "label": label,
    }


def speed_text(record: dict | None) -> str:
    """What a record's method did and gave, for an answer: its tokens per large-model call (counted
    exactly, the same on every machine), then its speedup with its interval here and its quality
    change; 'none' when no policy qualified."""
    if record is None:
        return "none"
    s = record["summary"]
    loss = (
        "lossless"
        if sm.lossless(record)
        else f"{sm.fmt(s['delta'], s['delta_ci'], signed=True)} {METRIC_NAMES.get(s['metric'], s['metric'])}"
    )
    # counted exactly, where it is
    per_call = (record.get("mechanism") or {}).get("tokens_per_large_call")
    calls = f"{per_call:.2f} tokens per large call, " if per_call is not None else ""
    return f"{calls}{sm.fmt(s['speedup'], s['speedup_ci'], 'x')} ({policy_label(record)}; {loss})"


def speedup_ci(record: dict | None) -> list | None:
    """A record's speedup with its interval, [1.42, [1.38, 1.46]], for a headline (None: no policy
    qualified)."""
    return (
        None if record is None else [record["summary"]["speedup"], record["summary"]["speedup_ci"]]
    )


def versus_text(a: dict | None, b: dict | None, names=("the first", "the second")) -> str:
    """Two rows timed on the same examples, by the intervals of their paired differences
    (`summary.compare`): speed, and quality where their outputs differ. Never by whether their own
    intervals overlap."""
    if a is None or b is None:
        return "not comparable (a side has no qualifying policy)"
    c = sm.compare(a, b)
    text = sm.says(c, names)
    if c["delta_ci"] != [0, 0]:
        metric = METRIC_NAMES.get(c["metric"], c["metric"])
        text += f"; quality {names[0]} - {names[1]} {sm.fmt(c['delta'], c['delta_ci'], signed=True)} {metric}"
    return text


def on_test(pair: str, chosen: dict, sweep, **run) -> dict:
    """The policies chosen on validation ({label: record or None}), evaluated together on the test
    split (`run`'s split and limit) in one sweep: {label: test record or None}."""
    picked = {label: r for label, r in chosen.items() if r is not None}
    entries = [
        {"method": r["key"]["method"], "draft": r["key"]["draft"], **r["key"]["policy"]}
        for r in picked.values()
    ]
    tested = sweep(pair, entries, **run) if entries else []
    out = dict.fromkeys(chosen)
    out.update(zip(picked, tested))
    return out


def lookup_sweep(
    pair: str,
    ngrams,
    ks,
    sweep,
    run: dict,
    val_split="validation",
    val_limit=None,
    val_timing_limit=200,
) -> tuple[list[dict], dict | None]:
    """Prompt lookup (no small model) on validation: its grid of n-gram sizes x draft lengths, one
    sweep; the records and the fastest with every output identical to vanilla (None without a grid),
    to be reported on test."""
    grid = lookup_grid(ngrams, ks)
    if not grid:
        return [], None
    recs = sweep(pair, grid, **validation_run(run, val_split, val_limit, val_timing_limit))
    return recs, sm.choose(recs, None)


def lookup_grid(ngrams, ks) -> list[dict]:
    """Prompt lookup's sweep entries: every n-gram size x draft length."""
    return [{"method": "prompt-lookup", "ngram": n, "k": k} for n in ngrams for k in ks]


def lookup_entry(record: dict, method: str = "prompt-lookup") -> dict:
    """The policy of a prompt-lookup record as a sweep entry (the same n-gram size and k for
    `method`)."""
    return {"method": method, **record["key"]["policy"]}


def bild_grid(fallbacks, rollbacks) -> list[dict]:
    return [{"fallback": f, "rollback": r} for f in fallbacks for r in rollbacks]


def validation_run(run: dict, val_split: str, val_limit, val_timing_limit=None) -> dict:
    """The run arguments for the validation sweep (same everything, other split, size and timed
    sample)."""
    return {**run, "split": val_split, "limit": val_limit, "timing_limit": val_timing_limit}


def pair_list(pairs) -> list[str]:
    """`pairs` as a list: one pair's name or a non-empty sequence of names."""
    if isinstance(pairs, str):
        return [pairs]
    if (
        not isinstance(pairs, (list, tuple))
        or not pairs
        or not all(isinstance(p, str) for p in pairs)
    ):
        raise TypeError(f"pairs must be a pair's name or a non-empty list of names; got {pairs!r}")
    return list(pairs)


def each_pair(name: str, figure: str, pairs, figures, one, lead: str = "") -> Result:
    """A question asked of every pair: `one(pair, ax)` draws into its own panel of one figure (each
    pair has its own metric), saved as `figure`, and returns a dict: `rows` (the full table's),
    `records`, `headline`, `account` (in words, every comparison), `line` (the pair's sentence of
    the answer), `shown` (its rows of the compact table), `pin` (its pin line) and optionally
    `details` (Markdown and Tables). The full table is written beside the figure as CSV."""
    pairs = pair_list(pairs)
    fig, axes = plots.panels(len(pairs))
    rows, records, headline, accounts, lines, shown, pins, details = [], [], {}, [], [], [], [], []
    for pair, ax in zip(pairs, axes):
        d = one(pair, ax)
        rows, records = rows + d["rows"], records + d["records"]
        headline[pair] = d["headline"]
        accounts.append(d["account"])
        lines.append(d["line"])
        shown += d["shown"]
        pins.append(d["pin"])
        details += d.get("details", [])
    plots.save(fig, figure, figures)
    full = to_table(rows)
    link = write_csv(full, figure, figures)
    return Result(
        name,
        full,
        fig,
        (lead + "\n\n" if lead else "") + bullets(lines),
        headline,
        records,
        summary=Table(shown),
        details=details + [csv_note(link, len(full), "every policy of the sweep, every column")],
        pin="\n".join(pins),
        account=" ".join(accounts),
    )


def front_rows(pair: str, records: list[dict], name_of=policy_label, chosen=()) -> list[dict]:
    """The rows of a table of the policies not dominated on validation (`summary.pareto`, the
    fastest MAX_ROWS of them), the chosen ones marked; `name_of(record)` names a policy."""
    return [
        {
            "pair": pair,
            "policy": name_of(r),
            **short_cells(r),
            "chosen": "yes" if any(r is c for c in chosen) else "",
        }
        for r in sm.pareto(records)[-MAX_ROWS:]
    ]


def draft_sweep(
    pair,
    drafts: dict[str, str],
    grid,
    title,
    tolerance,
    val_split,
    val_limit,
    val_timing_limit,
    ax,
    sweep,
    **run,
) -> dict:
    """Sweep the same grid with several drafts in one interleaved sweep on validation (shared
    vanilla run); table rows, both fronts drawn into `ax`; each draft's fastest policy within the
    tolerance, reported on test."""
    flat = [{**g, "draft": d} for d in drafts for g in grid]
    recs = sweep(pair, flat, **validation_run(run, val_split, val_limit, val_timing_limit))
    by = {
        label: recs[i * len(grid) : (i + 1) * len(grid)] for i, label in enumerate(drafts.values())
    }
    rows = [
        {"pair": pair, "draft": label, "thresholds": policy_label(r), **record_cells(r)}
        for label, rs in by.items()
        for r in rs
    ]
    s0 = recs[0]["summary"]
    metric = METRIC_NAMES[s0["metric"]]
    best = {label: sm.choose(rs, tolerance) for label, rs in by.items()}
    plots.speed_quality(
        {
            f"{label} (front)": [
                plot_point(r, policy_label(r) if r is best[label] else "") for r in sm.pareto(rs)
            ]
            for label, rs in by.items()
        },
        metric=metric,
        baseline=s0["baseline_score"],
        annotate="mark",
        title=f"{title} ({val_split}, {n_text(s0)})",
        ax=ax,
    )
    test = on_test(pair, best, sweep, **run)
    n_test = next((n_text(t["summary"]) for t in test.values() if t), "N = 0")
    within = (
        f"fastest within {tolerance:g} {metric} point of vanilla on {val_split} ({n_text(s0)}), "
        f"reported on {run.get('split', 'test')} ({n_test})"
    )
    return {
        "rows": rows,
        "best": test,
        "by": by,
        "within": within,
        "records": recs + [t for t in test.values() if t],
    }
