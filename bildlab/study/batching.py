"""Does speculation survive batching? (notebooks/speculative_pipeline.ipynb, its last section):
speculative decoding, BiLD and prompt lookup through `generate_batch` at batch sizes 1 to 64, each
over batched greedy on the same batches, beside what the calibrated costs predict.

The measurement is `benchmarks/bench_batch_sizes.py` (`harness.batch_sizes`: the one timing
protocol, paired intervals over the batches), one file per pair in `results/batch-sizes/`; this
section replays those files, whatever machine reads them, and says which machine and which zoo made
them."""

from __future__ import annotations

import json
from pathlib import Path

from ..engine.batch import BILD_LOCKSTEP_ROWS
from ..measure.intervals import interval, ratio_of_sums
from ..world.models import TOY_PAIRS, fingerprint
from . import plots
from .common import Result, Table, to_table, value

TOLERANCE = 0.05  # a prediction "within" the measurement: measured over predicted in 1 +- this
INSTALLED = "the installed zoo"
AUTO_LOCKSTEP = " lockstep"  # a table cell's mark: `engine="auto"` took the lockstep there


def load(folder) -> list[dict]:
    """The files of `folder` (`<pair>.json`), by name; a ValueError naming the folder if none."""
    paths = sorted(Path(folder).glob("*.json"))
    if not paths:
        raise ValueError(
            f"batch_results: no <pair>.json in {folder} (python benchmarks/bench_batch_sizes.py "
            "--pair PAIR writes one)"
        )
    return [json.loads(p.read_text()) for p in paths]


def _where(f: dict) -> str:
    threads = f"{f['threads']} thread{'s' * (f['threads'] > 1)}"
    return f"{f['machine']['processor']}, {threads}"


def _zoo(f: dict) -> str:
    """Which models: the installed zoo's, or another (its fingerprint)."""
    if f["pair"] in TOY_PAIRS and fingerprint(f["pair"]) == f["zoo"]:
        return INSTALLED
    return f"another zoo than the installed one (models {f['zoo']})"


def _drafted_by_auto(f: dict) -> list[dict]:
    """A file's rows of the methods that name no engine (`generate_batch` chooses): not greedy,
    not the lockstep-timed copies."""
    methods = f["methods"]
    return [r for r in f["rows"] if r["method"] in methods and "engine" not in methods[r["method"]]]


def _by_lockstep(r: dict) -> bool:
    """Whether `engine="auto"` took the lockstep for this row (BiLD's large batches, since
    `BILD_LOCKSTEP_ROWS`; a file made before that rule has the ragged engine everywhere)."""
    return r.get("engine") == "lockstep"


def _auto_took_lockstep(at: dict, method: str, b: int) -> bool:
    """Whether `method`'s row at batch size `b` (`at`: {(method, batch size): row}) exists and was
    decoded by the lockstep."""
    return (method, b) in at and _by_lockstep(at[(method, b)])


def _mark(f: dict, r: dict) -> str:
    """A cell's mark where `engine="auto"` took the lockstep: rows of methods that name no engine."""
    return AUTO_LOCKSTEP if "engine" not in f["methods"][r["method"]] and _by_lockstep(r) else ""


def figure(files: list[dict]):
    """A panel per pair: each method that names no engine, its measured speedup over batched greedy
    with its interval, and the prediction; a hollow marker where the lockstep decoded it."""
    panels = {}
    for f in files:
        methods = {}
        for r in _drafted_by_auto(f):
            point = (
                r["batch_size"],
                r["speedup"],
                r["speedup_ci"],
                r["predicted_speedup"],
                _by_lockstep(r),
            )
            methods.setdefault(r["method"], []).append(point)
        panels[f"{f['pair']} (N = {f['n']} rows a batch size; {_where(f)})"] = methods
    return plots.batch_speedups(panels)


def lockstep_copies(f: dict) -> dict[str, str]:
    """{method timed by the lockstep engine (its policy names engine="lockstep"): the method of the
    same policy that names no engine (the ragged engine, by `engine="auto"`'s choice)}."""

    def policy(p: dict) -> str:
        return json.dumps({k: v for k, v in p.items() if k != "engine"}, sort_keys=True)

    free = {policy(p): name for name, p in f["methods"].items() if "engine" not in p}
    return {
        name: free[policy(p)]
        for name, p in f["methods"].items()
        if p.get("engine") == "lockstep" and policy(p) in free
    }


def ragged_over_lockstep(files: list[dict]) -> dict:
    """{(pair, method, batch size): (ratio, (lo, hi))}: each lockstep-timed method's ragged engine
    (`lockstep_copies`) over its lockstep on the same batches, with its paired interval; none where
    `engine="auto"` took the lockstep too (`_by_lockstep`: both rows the same engine)."""
    found = {}
    for f in files:
        at = {(r["method"], r["batch_size"]): r for r in f["rows"]}
        copies = lockstep_copies(f)
        for (method, b), lock in at.items():
            ragged = copies.get(method)
            if ragged is not None and (ragged, b) in at and not _auto_took_lockstep(at, ragged, b):
                rag, lock = at[(ragged, b)]["seconds"], lock["seconds"]
                ci = interval(lambda idx: ratio_of_sums(lock, rag, idx), len(rag))
                found[(f["pair"], ragged, b)] = (sum(lock) / sum(rag), ci)
    return found


def table_rows(files: list[dict], engines: dict | None = None) -> tuple[list[dict], list[dict]]:
    """Speedup over batched greedy [95% interval] (predicted), a row per pair and method, a column
    per batch size; then each lockstep-timed method's ragged engine over its lockstep on the same
    batches (`engines`: `ragged_over_lockstep(files)`, computed if not given)."""
    engines = ragged_over_lockstep(files) if engines is None else engines
    sizes = sorted({r["batch_size"] for f in files for r in f["rows"]})
    speedups, over = [], []
    for f in files:
        at = {(r["method"], r["batch_size"]): r for r in f["rows"]}
        copies = lockstep_copies(f)
        for method in f["methods"]:
            cells = {}
            for b in sizes:
                r = at.get((method, b))
                cells[f"batch {b}"] = (
                    ""
                    if r is None
                    else f"{r['speedup']:.2f}x [{r['speedup_ci'][0]:.2f}, "
                    f"{r['speedup_ci'][1]:.2f}] ({r['predicted_speedup']:.2f}x)" + _mark(f, r)
                )
            speedups.append({"pair": f["pair"], "method": method, **cells})
            ragged = copies.get(method)
            if ragged is not None:
                cells = {
                    f"batch {b}": (
                        "both lockstep"
                        if _auto_took_lockstep(at, ragged, b)
                        else _ratio_cell(engines.get((f["pair"], ragged, b)))
                    )
                    for b in sizes
                }
                over.append({"pair": f["pair"], "ragged over lockstep": ragged, **cells})
    return speedups, over


def markdown_table(files: list[dict]) -> str:
    """`table_rows` as two Markdown tables (docs/benchmark.md)."""

    def markdown(rows):
        head = list(rows[0])
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return lines + ["| " + " | ".join(row[k] for k in head) + " |" for row in rows]

    speedups, engines = table_rows(files)
    return "\n".join(markdown(speedups) + [""] + markdown(engines))


def _ratio_cell(found: tuple | None) -> str:
    if found is None:
        return ""
    ratio, (lo, hi) = found
    return f"{ratio:.2f}x [{lo:.2f}, {hi:.2f}]"


def verdict(points: list[tuple]) -> str:
    """Where a speedup pays, shows no detectable difference, and is slower, by its 95% intervals
    over the batch sizes (`points`: (batch size, (lo, hi)), in order)."""
    faster = [b for b, (lo, hi) in points if lo > 1]
    slower = [b for b, (lo, hi) in points if hi < 1]
    even = [b for b, _ in points if b not in faster + slower]
    parts = []
    for sizes, what in ((faster, "faster"), (even, "no detectable difference"), (slower, "slower")):
        if sizes:
            parts.append(f"{what} at batch {', '.join(map(str, sizes))}")
    return "; ".join(parts)


def lead(files: list[dict]) -> str:
    """The answer's first sentence, from the intervals of the methods that name no engine: whether
    any is faster than batched greedy at the smallest batch size, and at the largest."""
    rows = [r for f in files for r in _drafted_by_auto(f)]
    first = min(r["batch_size"] for r in rows)
    last = max(r["batch_size"] for r in rows)
    faster = {
        b: sorted({r["method"] for r in rows if r["batch_size"] == b and r["speedup_ci"][0] > 1})
        for b in (first, last)
    }
    if faster[last]:
        return f"Speculation still pays at batch {last}: {', '.join(faster[last])}."
    if faster[first]:
        return f"Speculation pays at small batches and no longer at batch {last}."
    return "Speculation pays at no batch size measured here."


def _reach(points: list[tuple]) -> str:
    """How far a speedup pays, in a few words: up to which batch size it is faster, from which one
    slower, or at which (`points` as for `verdict`)."""
    sizes = [b for b, _ in points]
    faster = [b for b, (lo, hi) in points if lo > 1]
    slower = [b for b, (lo, hi) in points if hi < 1]
    if not faster:
        return f"never faster, slower at {len(slower)} of {len(points)} batch sizes"
    said = (
        f"faster up to batch {max(faster)}"
        if faster == sizes[: len(faster)]
        else f"faster at batch {', '.join(map(str, faster))}"
    )
    if not slower:
        return said + ", never slower"
    # "from" only for two or more sizes that run to the largest
    if len(slower) > 1 and slower == sizes[len(sizes) - len(slower) :]:
        return said + f", slower from batch {min(slower)}"
    return said + f", slower at batch {', '.join(map(str, slower))}"


def _grids(f: dict) -> dict[int, dict]:
    """The forward grid timed at each batch size (`batch_sizes.measure` keeps it in the batch size's
    last row): {batch size: {model: {rows: {columns: seconds}}}}; {} for a run without costs."""
    return {r["batch_size"]: r["grid"] for r in f["rows"] if r.get("grid")}


def verification(files: list[dict]) -> str:
    """Why speculation stops paying, from the grids: the large model's pass over k + 1 tokens (k, the
    files' largest speculative k) in one-token steps, and the draft's step over the large model's
    (c), at the smallest and the largest batch size; "" where a file has no grid."""
    ks = [m["k"] for f in files for m in f["methods"].values() if m.get("method") == "speculative"]
    grids = [_grids(f) for f in files]
    if not ks or not all(grids):
        return ""
    m = max(ks) + 1
    ends = sorted({b for g in grids for b in g})
    lo, hi = ends[0], ends[-1]

    def span(get, b, digits) -> str:
        vs = [f"{v:.{digits}f}" for v in sorted(get(g[b], str(b)) for g in grids if b in g)]
        return vs[0] if vs[0] == vs[-1] else f"{vs[0]}–{vs[-1]}"

    def passes(g, r):
        return g["large"][r][str(m)] / g["large"][r]["1"]

    def c(g, r):
        return g["small"][r]["1"] / g["large"][r]["1"]

    return (
        f"Why: the large model's pass over {m} tokens costs {span(passes, lo, 2)} one-token steps "
        f"at {lo} row{'s' * (lo > 1)} and {span(passes, hi, 2)} at {hi} rows, the draft's step "
        f"c = {span(c, lo, 3)} and {span(c, hi, 3)} of the large model's (the grids timed in the "
        "same runs)."
    )


def batch_answer(results="../results/batch-sizes", *, figures="figures") -> Result:
    """The section: the files of `results` replayed (a pair a file), their figure written as
    `figures`/batch_sizes, and the answer in words."""
    files = load(results)
    fig = figure(files)
    plots.save(fig, "batch_sizes", figures)
    notes, summary, within, rows_n, reach = [], [], 0, 0, {}
    engines = ragged_over_lockstep(files)
    zoos = [_zoo(f) for f in files]  # each a fingerprint of the installed zoo's files
    lockstep = set()  # (pair, method) of the lockstep-timed methods
    for f, zoo in zip(files, zoos):
        copies = lockstep_copies(f)
        lockstep.update((f["pair"], method) for method in copies)
        lines = []
        at = {(r["method"], r["batch_size"]): r for r in f["rows"]}
        sizes = sorted({r["batch_size"] for r in f["rows"]})
        lossless = [
            r
            for r in f["rows"]
            if f["methods"].get(r["method"], {}).get("method") in ("speculative", "prompt-lookup")
        ]
        lines.append(
            f"- **{f['pair']}** (N = {f['n']} test inputs at each batch size, {f['max_new_tokens']} "
            f"new tokens; {_where(f)}; {zoo}; the lossless methods' outputs equal greedy's "
            f"in {sum(r['identical'] for r in lossless)} of {sum(r['rows'] for r in lossless)}):"
        )
        for method in f["methods"]:
            rows = [at[(method, b)] for b in sizes if (method, b) in at]
            cells = {
                f"batch {r['batch_size']}": value(r["speedup"], r["speedup_ci"], "x") + _mark(f, r)
                for r in rows
            }
            summary.append({"pair": f["pair"], "method": method, **cells})
            rows_n += len(rows)
            within += sum(abs(r["measured_over_predicted"] - 1) <= TOLERANCE for r in rows)
            ragged = copies.get(method)
            if ragged is None:
                points = [(r["batch_size"], r["speedup_ci"]) for r in rows]
                lines.append(f"  - {method} over batched greedy: {verdict(points)}")
                reach.setdefault(method, []).append(f"{f['pair']} {_reach(points)}")
            else:
                points = [
                    (b, engines[(f["pair"], ragged, b)][1])
                    for b in sizes
                    if (f["pair"], ragged, b) in engines
                ]
                both = [b for b in sizes if _auto_took_lockstep(at, ragged, b)]
                lines.append(
                    f"  - {ragged}, the ragged engine over the lockstep: {verdict(points)}"
                    + (
                        f' (at batch {", ".join(map(str, both))} `engine="auto"` took the '
                        "lockstep: nothing to compare)"
                        if both
                        else ""
                    )
                )
        notes.append("\n".join(lines))
    everywhere = sorted({r["batch_size"] for f in files for r in f["rows"]})
    lo, hi = everywhere[0], everywhere[-1]
    shown = [f"batch {b}" for b in dict.fromkeys((lo, everywhere[len(everywhere) // 2], hi))]
    installed = all(zoo == INSTALLED for zoo in zoos)
    where = "; ".join(dict.fromkeys(_where(f) for f in files)) + (
        ", the installed zoo" if installed else ", not the installed zoo's models (see the details)"
    )
    answer = (
        f"**{lead(files)}** Speedup over batched greedy at the same batch size, by 95% paired "
        f"intervals ({where}):\n\n"
        + "\n".join(f"- {method}: {'; '.join(said)}" for method, said in reach.items())
        + f"\n\nThe calibrated costs predict {within} of {rows_n} rows within ±{TOLERANCE:.0%}. "
        f'`engine="auto"` takes the lockstep for BiLD batches of {BILD_LOCKSTEP_ROWS} rows or '
        "more."
    )
    speedups, over = table_rows(files, engines)
    details = [
        "Each verdict by its 95% paired interval over the batches; the rows ending in "
        '"lockstep" as the ragged engine over the lockstep on the same batches. The calibrated '
        "costs: a grid of forwards timed in the same run, each batch's counted forwards priced by "
        "it. Each table cell below: speedup [95% interval] (predicted); marked lockstep where "
        '`engine="auto"` took the lockstep.',
        *([why] if (why := verification(files)) else []),
        *notes,
        Table(speedups),
        Table(over),
    ]
    return Result(
        name="batch_sizes",
        table=to_table(summary),
        figure=fig,
        answer=answer,
        # compact: the methods "auto" decodes, at the smallest, a middle and the largest batch size
        summary=Table(
            [
                {k: v for k, v in row.items() if k in ("pair", "method", *shown)}
                for row in summary
                if (row["pair"], row["method"]) not in lockstep
            ]
        ),
        details=details,
        pin="\n".join(
            f"{row['pair']} {row['method']}: {row.get(f'batch {lo}', '')} at batch {lo}, "
            f"{row.get(f'batch {hi}', '')} at batch {hi}"
            for row in summary
            if (row["pair"], row["method"]) not in lockstep
        ),
    )
