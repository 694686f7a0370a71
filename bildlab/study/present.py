"""How the study's numbers read: values with the digits their interval supports, the tables a
notebook shows (`Table`: no index column, a value and its interval on one line, at most
MAX_COLUMNS x MAX_ROWS), Markdown notes, and the phrases of the answers (in words, by the
intervals of paired differences)."""

from __future__ import annotations

import math

from ..measure import summary as sm
from ..measure.metrics import METRIC_NAMES

NBSP, NB_HYPHEN = "\u00a0", "\u2011"  # a space and a hyphen no line breaks at
MAX_COLUMNS, MAX_ROWS = 10, 25  # what a shown table may have


class Table:
    """A table as a reader sees it: no index column, each value with its interval on one line (the
    spaces inside a cell unbreakable), every row and column shown (at most MAX_COLUMNS columns and
    MAX_ROWS rows: longer tables are written as CSV and linked, `write_csv`)."""

    def __init__(self, rows, columns: list[str] | None = None):
        import pandas as pd

        frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows, columns=columns)
        frame = frame.astype(object).fillna("")
        if frame.shape[1] > MAX_COLUMNS:
            raise ValueError(
                f"a shown table has at most {MAX_COLUMNS} columns; this one has {frame.shape[1]}: "
                f"{list(frame.columns)}"
            )
        # a longer one (e.g. the paper profile's four tasks) shows its first MAX_ROWS; the rest
        # are in the full table (CSV) the details link
        self.frame, self.more = frame.iloc[:MAX_ROWS], max(len(frame) - MAX_ROWS, 0)

    def _repr_html_(self) -> str:
        shown = self.frame.map(
            lambda v: str(v).replace(" ", NBSP).replace("-", NB_HYPHEN) if _interval(v) else v
        )
        html = shown.to_html(index=False, border=0, na_rep="")
        if self.more:
            html += f"<p>{self.more} more rows: in the full table (CSV), linked below.</p>"
        return html

    def __repr__(self) -> str:
        return self.frame.to_string(index=False)


class Note:
    """A Markdown text among a question's details (a notebook displays each in turn)."""

    def __init__(self, text: str):
        self.text = text

    def _repr_markdown_(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text


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


def tokens_per_call(record: dict):
    """Tokens per large-model call: of every example where the record counts them (`mechanism`),
    else of the timed."""
    return (record.get("mechanism") or {}).get(
        "tokens_per_large_call", record["summary"]["mean_accepted"]
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


def short_cells(record: dict, *, quality: bool = True, per_call: bool = True) -> dict:
    """A record's few numbers for a compact table: N, quality and its change against vanilla (the
    metric named in the cell), speedup, tokens per large-model call (unless `per_call` is False),
    each value with its interval to the digits the interval supports."""
    s = record["summary"]
    metric = METRIC_NAMES.get(s["metric"], s["metric"])
    calls = tokens_per_call(record)
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
        **({"tokens / large call": "" if calls is None else f"{calls:.2f}"} if per_call else {}),
    }


def pin_speed(record: dict | None) -> str:
    """A record's speedup for a pin line: '1.244x [1.214, 1.276]'."""
    if record is None:
        return "none"
    s = record["summary"]
    return sm.fmt(s["speedup"], s["speedup_ci"], "x", 3)
