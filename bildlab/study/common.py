"""What the study's questions share: the `Result` they return, table cells and answer phrases of a
record, the split between validation (choices) and test (reports), and a question asked of every
pair."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..measure import summary as sm
from ..measure.metrics import METRIC_NAMES
from . import plots

INF = math.inf


@dataclass
class Result:
    """What a question returns. A notebook shows, top-down: `answer` (a few sentences, Markdown:
    its `_repr_markdown_`), `figure`, `summary` (a compact `Table`), then `show_details()`; `pin` is
    one short line per headline number (the notebook's nbval check). `table` is the full table (also
    written beside the figure as CSV, `csv`), `account` the whole account in words, every comparison
    spelled out."""

    name: str
    table: object  # pandas.DataFrame: every row and column
    figure: object  # matplotlib Figure
    answer: str  # Markdown
    headline: dict = field(default_factory=dict)
    records: list = field(default_factory=list)
    sections: dict = field(default_factory=dict)  # a notebook's further sections: {name: Result}
    summary: object = None  # Table: the rows that matter
    details: list = field(default_factory=list)  # Markdown strings and Tables, in order
    pin: str = ""
    account: str = ""

    def _repr_markdown_(self) -> str:
        return self.answer

    def __repr__(self) -> str:
        return f"<{self.name}: {self.pin or self.answer[:80]}>"

    def show_details(self) -> None:
        """Display the details: each Markdown text and table in order."""
        from IPython.display import Markdown, display

        for item in self.details:
            display(Markdown(item) if isinstance(item, str) else item)


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


NBSP = "\u00a0"
MAX_COLUMNS, MAX_ROWS = 10, 25  # what a shown table may have


class Table:
    """A table as a reader sees it: no index column, each value with its interval on one line (the
    spaces inside a cell unbreakable), every row and column shown (at most MAX_COLUMNS columns and
    MAX_ROWS rows: longer tables are written as CSV and linked, `write_csv`)."""

    def __init__(self, rows, columns: list[str] | None = None):
        import pandas as pd

        frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows, columns=columns)
        self.frame = frame.astype(object).fillna("")
        rows_n, cols_n = self.frame.shape
        if cols_n > MAX_COLUMNS or rows_n > MAX_ROWS:
            raise ValueError(
                f"a shown table has at most {MAX_COLUMNS} columns and {MAX_ROWS} rows; this one has "
                f"{cols_n} x {rows_n}: {list(self.frame.columns)}"
            )

    def _repr_html_(self) -> str:
        shown = self.frame.map(lambda v: str(v).replace(" ", NBSP) if _interval(v) else v)
        return shown.to_html(index=False, border=0, na_rep="")

    def __repr__(self) -> str:
        return self.frame.to_string(index=False)


def _interval(v) -> bool:
    """A cell kept on one line: a value with its interval, or a short text ('1000 (300 timed)');
    longer texts (row names) may wrap."""
    return isinstance(v, str) and (("[" in v and len(v) < 40) or len(v) <= 18)


def decimals(ci, default: int = 2) -> int:
    """The decimals an interval supports: down to the first significant digit of its half-width
    (0 to 3); `default` where there is no interval or it has no width."""
    try:
        half = (float(ci[1]) - float(ci[0])) / 2
    except (TypeError, IndexError, ValueError):
        return default
    if not half > 0 or half != half:
        return default
    return int(min(3, max(0, -math.floor(math.log10(half)))))


def value(v, ci, unit: str = "", signed: bool = False, default: int = 2) -> str:
    """'1.24x [1.21, 1.28]': a value and its 95% interval, to the digits the interval supports."""
    if v is None:
        return "–"
    return sm.fmt(v, ci, unit, decimals(ci, default), signed=signed).replace("-", "−")


def write_csv(frame, name: str, folder) -> str:
    """The full table beside the figure, folder/name.csv (written whole or not at all); returns the
    link a notebook shows (the folder as given, relative to notebooks/)."""
    from pathlib import Path

    from ..atomic import atomic_path

    path = Path(folder) / f"{name}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, lineterminator="\n")
    return f"{Path(str(folder)).as_posix()}/{name}.csv"


def csv_note(link: str, rows: int, what: str = "every row") -> str:
    return f"The full table, {what} ({rows} rows): [{link.rsplit('/', 1)[-1]}]({link})."


def to_table(rows: list[dict]):
    """A table for the notebook; cells that do not apply to a row are blank (not NaN)."""
    import pandas as pd

    return pd.DataFrame(rows).astype(object).fillna("")


def policy_label(record: dict) -> str:
    """A record's policy in words, e.g. 'fb 0.5, rb 3' or 'k=4'."""
    key, pol = record["key"], record["key"]["policy"]
    if key["method"] == "hf_assisted":
        return f"assisted k={pol['k']}"
    if key["method"] in ("prompt-lookup", "hf_prompt_lookup"):
        return f"n={pol['ngram']}, k={pol['k']}"
    if key["method"] == "bild":
        rb = pol["rollback"]
        return f"fb {pol['fallback']:g}, rb {'inf' if math.isinf(rb) else f'{rb:g}'}"
    if key["method"] == "speculative":
        return f"k={pol['k']}" + (" (sampling)" if pol.get("do_sample") else "")
    return key["method"]


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


def tokens_per_call(record: dict):
    """Tokens per large-model call: of every example where the record counts them (`mechanism`),
    else of the timed."""
    return (record.get("mechanism") or {}).get(
        "tokens_per_large_call", record["summary"]["mean_accepted"]
    )


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


def against(a: dict | None, b: dict | None, name_b: str) -> str:
    """How `a` stands against `b` in speed, paired over the same examples, for an answer:
    'detectably faster than rollback only (+0.17x [+0.12, +0.21], paired)'."""
    if b is None:
        return f"no {name_b} policy qualifies"
    if a is None:
        return f"only {name_b} qualifies"
    c = sm.compare(a, b)
    d, ci = c["speedup_difference"], c["speedup_difference_ci"]
    lo, hi = round(ci[0], 3), round(ci[1], 3)
    word = (
        "detectably faster than"
        if lo > 0
        else "detectably slower than"
        if hi < 0
        else ("not detectably faster than")
    )
    return f"{word} {name_b} ({value(d, ci, 'x', signed=True)}, paired)"


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


def speed(record: dict | None, *, policy: bool = True) -> str:
    """A record's speedup with its interval, its policy and its quality change, for an answer:
    '1.24x [1.21, 1.28] (fb 0.5, rb 3; −0.8 [−1.3, −0.3] BLEU)'; 'none qualifies' without one."""
    if record is None:
        return "none qualifies"
    s = record["summary"]
    loss = (
        "lossless"
        if sm.lossless(record)
        else f"{value(s['delta'], s['delta_ci'], signed=True)} {METRIC_NAMES.get(s['metric'], s['metric'])}"
    )
    what = f"{policy_label(record)}; {loss}" if policy else loss
    return f"{value(s['speedup'], s['speedup_ci'], 'x')} ({what})"


def versus(a: dict | None, b: dict | None, names=("the first", "the second")) -> str:
    """Two rows timed on the same examples, in words, by their paired speed difference's interval
    (never by whether their own intervals overlap): 'A is detectably faster than B (+0.38x [+0.36,
    +0.41], paired, N = 300)'."""
    if a is None or b is None:
        return f"{names[0]} and {names[1]} are not comparable (a side has no qualifying policy)"
    c = sm.compare(a, b)
    d, (lo, hi) = c["speedup_difference"], c["speedup_difference_ci"]
    lo3, hi3 = round(lo, 3), round(hi, 3)  # judged as `summary.says` judges: as printed
    if hi3 < 0:  # b is the faster: its lead, positive
        names, d, lo, hi = names[::-1], -d, -hi, -lo
    detail = f"{value(d, [lo, hi], 'x', signed=True)}, paired, N = {c['n']}"
    if lo3 > 0 or hi3 < 0:
        return f"{names[0]} is detectably faster than {names[1]} ({detail})"
    return f"no detectable difference in speed between {names[0]} and {names[1]} ({detail})"


def bullets(lines) -> str:
    return "\n".join(f"- {line}" for line in lines)


def n_cell(summary: dict) -> str:
    """N for a table cell: '1000', or '1000 (300 timed)'."""
    timed = summary.get("timed_examples")
    return f"{summary['examples']}" + (f" ({timed} timed)" if timed is not None else "")


def short_cells(record: dict, *, quality: bool = True) -> dict:
    """A record's few numbers for a compact table: N, quality and its change against vanilla (the
    metric named in the cell), speedup, tokens per large-model call, each value with its interval
    to the digits the interval supports."""
    s = record["summary"]
    metric = METRIC_NAMES.get(s["metric"], s["metric"])
    per_call = tokens_per_call(record)
    return {
        "N": n_cell(s),
        **(
            {
                "quality": f"{value(s['score'], s['score_ci'])} {metric}",
                "Δ quality": "identical outputs"
                if sm.lossless(record)
                else value(s["delta"], s["delta_ci"], signed=True),
            }
            if quality
            else {}
        ),
        "speedup": value(s["speedup"], s["speedup_ci"], "x"),
        "tokens / large call": "" if per_call is None else f"{per_call:.2f}",
    }


def pin_speed(record: dict | None) -> str:
    """A record's speedup for a pin line: '1.244x [1.214, 1.276]'."""
    if record is None:
        return "none"
    s = record["summary"]
    return sm.fmt(s["speedup"], s["speedup_ci"], "x", 3)
