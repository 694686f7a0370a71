"""Running the study notebooks: papermill into a run folder, parameters checked first, outputs
written whole."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from ..atomic import atomic_path
from .params import ParameterError

ROOT_ENV = "BILDLAB_ROOT"  # the study checkout, for a command run outside it
# the folder the package sits in: a checkout, or site-packages
HOME = Path(__file__).resolve().parents[2]
ROOT = HOME  # the study in use: notebooks/, params/, runs/, figures/, README.md (`use_root`)
NOTEBOOKS = ROOT / "notebooks"
PARAMS = ROOT / "params"


class NotebookFailed(RuntimeError):
    """A study notebook raised: its message is one line (the notebook, the cell, the exception's
    last line and where the executed notebook is); `traceback` holds the cell's traceback as
    papermill gave it."""

    def __init__(self, message: str, traceback: str = ""):
        super().__init__(message)
        self.traceback = traceback


class StudyNotFound(ParameterError):
    """No study checkout where the command line looked: one line (exit status 2), what is missing,
    how to get it."""


def is_study(folder: str | os.PathLike) -> bool:
    """A study checkout: notebooks/ with at least one notebook, and params/ beside it."""
    folder = Path(folder)
    return (folder / "params").is_dir() and any((folder / "notebooks").glob("*.ipynb"))


def find_root(root: str | os.PathLike | None = None) -> Path:
    """Where the study is: `root` (`--root`), else $BILDLAB_ROOT, else the first of the current
    folder and the folders above it that holds one, else the checkout this package sits in (an
    editable install); an installed copy (wheel) carries the zoo but not the study."""
    given, where = (root, "--root") if root else (os.environ.get(ROOT_ENV), f"${ROOT_ENV}")
    if given:
        path = Path(given).expanduser().resolve()
        if not is_study(path):
            raise StudyNotFound(
                f"{where} {given}: no study there (notebooks/*.ipynb and params/, as in a checkout "
                f"of the bildlab repository)"
            )
        return path
    here = Path.cwd().resolve()
    for folder in (here, *here.parents, HOME):
        if is_study(folder):
            return folder
    raise StudyNotFound(
        f"no study in {here} or a folder above it (notebooks/*.ipynb and params/): the study lives "
        f"in a checkout of the bildlab repository; git clone it and run bildlab there, or pass "
        f"--root CHECKOUT (or set {ROOT_ENV})"
    )


def use_root(root: str | os.PathLike) -> None:
    """Read and write the study in `root` (what `find_root` found) from now on; the root in use
    already keeps its NOTEBOOKS and PARAMS as they are (a caller may have pointed them elsewhere).
    """
    global ROOT, NOTEBOOKS, PARAMS
    if Path(root) == ROOT:
        return
    ROOT = Path(root)
    NOTEBOOKS, PARAMS = ROOT / "notebooks", ROOT / "params"


def notebook_names() -> list[str]:
    # not a run in progress
    return sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb") if not p.name.startswith("."))


def profile_params(profile: str, name: str) -> dict:
    """The parameters of a profile for one notebook: none for toy (the stored defaults),
    params/paper/NAME.yaml."""
    if profile == "toy":
        return {}
    import yaml

    path = PARAMS / profile / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(
            f"no parameters for notebook {name!r} in profile {profile!r}: {path}"
        )
    return yaml.safe_load(path.read_text()) or {}


def run_study(
    profile: str = "toy",
    notebooks: list[str] | None = None,
    out: str | os.PathLike | None = None,
    overrides: dict | None = None,
    params_file: str | None = None,
    progress: bool = True,
    recompute: bool = False,
) -> list[Path]:
    """Execute the chosen notebooks (default: all) with papermill into `out`.

    Records are replayed from the registry whatever library versions made them; where those differ
    from this environment's, one line says so. `recompute=True` recomputes such records (in place:
    the study stays where it is).

    The toy profile with the stored parameters writes the executed notebooks back into notebooks/
    (what JupyterLab opens and nbval checks); any other profile or parameter goes to runs/<profile>
    by default. All parameters of all chosen notebooks are checked before the first one runs; each
    executed notebook is written to a temporary name and renamed when it finished, so an interrupted
    run leaves no half-written notebook."""
    import papermill as pm
    import yaml
    from tqdm.auto import tqdm

    from .params import check_params

    known = notebook_names()
    chosen = notebooks or known
    for name in chosen:
        if name not in known:
            raise ValueError(f"unknown notebook {name!r}; notebooks: {', '.join(known)}")
    extra = dict(yaml.safe_load(Path(params_file).read_text()) or {}) if params_file else {}
    extra.update(overrides or {})
    plan, defaults = [], {name: notebook_defaults(name) for name in chosen}
    for name in chosen:
        path = NOTEBOOKS / f"{name}.ipynb"
        allowed = set(pm.inspect_notebook(str(path))) | set(defaults[name])
        params = {**profile_params(profile, name), **extra}
        if profile != "toy":  # paper runs keep their own registry and figures
            params.setdefault("registry", f"../results/{profile}")
            params.setdefault("figures", f"../figures/{profile}")
        elif extra:  # other parameters: a run folder, never over the committed study
            params.setdefault("registry", "../runs/toy/results")
            params.setdefault("figures", "../runs/toy/figures")
        # the overrides with what they meet
        check_params({**defaults[name], **params}, allowed)
        if recompute:
            params["recompute"] = True
        plan.append((name, path, params))
    print(
        replay_note({registry_of(name, params) for name, _, params in plan}, recompute),
        file=sys.stderr,
    )
    stored = profile == "toy" and not extra
    out = Path(out or (NOTEBOOKS if stored else ROOT / "runs" / profile))
    out.mkdir(parents=True, exist_ok=True)
    written = []
    bar = tqdm(plan, desc=f"study ({profile})", disable=not progress)
    for name, path, params in bar:
        bar.set_postfix(notebook=name)
        target = out / f"{name}.ipynb"
        tmp = out / f".{name}.running.ipynb"
        try:
            with kernel_config() as kernel, _quiet_run_settings(defaults[name]):
                pm.execute_notebook(
                    str(path),
                    str(tmp),
                    parameters=params,
                    cwd=str(NOTEBOOKS),
                    progress_bar=False,
                    kernel_name="python3",
                    config=kernel,
                )
        except BaseException as e:
            failed = out / f".{name}.failed.ipynb"  # hidden: not a notebook of the study
            if tmp.exists():
                os.replace(tmp, failed)  # keep the evidence, never under the finished name
            # the cause in one line; the traceback for --verbose
            if isinstance(e, pm.PapermillExecutionError):
                cell = (
                    f"cell {e.exec_count}"
                    if e.exec_count is not None
                    else f"cell {e.cell_index + 1}"
                )
                last = f"{e.ename}: {e.evalue}".strip().splitlines()[-1] if e.evalue else e.ename
                raise NotebookFailed(
                    f"{name} failed in {cell}: {last}; the executed notebook: {failed}",
                    _plain("\n".join(e.traceback or [])),
                ) from None
            if tmp.exists() or failed.exists():
                print(f"[study] {name} stopped; see {failed}", file=sys.stderr)
            raise
        _clean(tmp)
        os.replace(tmp, target)
        written.append(target)
    if stored and set(chosen) == set(known):
        update_readme()  # the README's table of toy results, regenerated from the registry
    return written


@contextmanager
def _quiet_run_settings(names):
    """Papermill warns of every parameter outside the `parameters` cell ("Passed unknown
    parameter"); the run settings live in the cell before it, and `check_params` has already
    refused what neither cell has, so those warnings (for `names`, the notebook's stored
    parameters) say nothing."""
    import logging

    settings = {f"Passed unknown parameter: {p}" for p in names}

    def keep(record: logging.LogRecord) -> bool:
        return record.getMessage() not in settings

    log = logging.getLogger("papermill")
    log.addFilter(keep)
    try:
        yield
    finally:
        log.removeFilter(keep)


def _plain(text: str) -> str:
    """A traceback without the terminal's colour codes."""
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


# The kernel talks to papermill over local sockets, not TCP: nothing to eavesdrop on, and ipykernel
# then does not warn "Kernel is running over TCP without encryption" into the terminal once per
# notebook.
KERNEL_TRANSPORT = "ipc" if os.name == "posix" else "tcp"
# a live progress bar's output (its state is in the metadata)
WIDGET = "application/vnd.jupyter.widget-view+json"
# what ipykernel writes
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


@contextmanager
def kernel_config():
    """The kernel manager's configuration for one notebook run. Over ipc, jupyter_client names the
    sockets `<ip>-1` ... `<ip>-5`, picking the first numbers with no file yet, and `ip` defaults to
    "kernel-ipc" in the working directory (notebooks/): two study runs at once would pick the same
    sockets before either kernel binds them, and one kernel would answer the other's client. So each
    kernel gets its own directory, removed afterwards. jupyter_client interrupts a kernel before it
    asks it to shut down, and ipykernel logs that interrupt as an error ("KeyboardInterrupt caught
    in kernel") into this terminal after a good run: the kernel logs only what is critical (a cell's
    error reaches the user through papermill, in one line: `NotebookFailed`)."""
    from traitlets.config import Config

    quiet = {"NotebookClient": {"extra_arguments": ["--IPKernelApp.log_level=CRITICAL"]}}
    if KERNEL_TRANSPORT != "ipc":
        yield Config({"KernelManager": {"transport": KERNEL_TRANSPORT}, **quiet})
        return
    with tempfile.TemporaryDirectory(prefix="bildlab-kernel-") as sockets:
        yield Config(
            {"KernelManager": {"transport": "ipc", "ip": os.path.join(sockets, "kernel")}, **quiet}
        )


def _clean(path: Path) -> None:
    """Make a rerun with the same results give the same file, and keep only what a reader needs:
    drop papermill's and Jupyter's clock readings and machine paths, progress bars (stderr text
    redrawn with carriage returns, and tqdm's widgets with their state, which carry random ids),
    merge the pieces of a stream the kernel flushed apart, and store the kernelspec a fresh install
    writes (so that opening the notebook does not modify it)."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    for key in ("start_time", "end_time", "duration", "input_path", "output_path"):
        nb.metadata.get("papermill", {}).pop(key, None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        for key in ("start_time", "end_time", "duration", "exception", "status"):
            cell.metadata.get("papermill", {}).pop(key, None)
        if cell.cell_type == "code":
            cell.outputs = [
                o
                for o in cell.outputs
                if not (
                    o.get("output_type") == "stream"
                    and o.get("name") == "stderr"
                    and "\r" in o.text
                )
                and WIDGET not in o.get("data", {})
            ]
            merged = []  # one printed text in one output, however the kernel happened to flush it
            for o in cell.outputs:
                last = merged[-1] if merged else {}
                if o.get("output_type") == last.get("output_type") == "stream" and o.get(
                    "name"
                ) == last.get("name"):
                    last["text"] += o["text"]
                else:
                    merged.append(o)
            cell.outputs = merged
    nbformat.write(nb, str(path))


START, END = "<!-- toy-results:start -->", "<!-- toy-results:end -->"
EXPLAINED_START, EXPLAINED_END = "<!-- explained:start -->", "<!-- explained:end -->"


def registry_of(name: str, params: dict) -> Path:
    """The registry folder a notebook run reads and writes (its `registry` parameter is relative to
    notebooks/)."""
    return (NOTEBOOKS / params.get("registry", notebook_defaults(name)["registry"])).resolve()


def replay_note(registries, recompute: bool = False) -> str:
    """One line on what a run will reuse: the number of records, and the library versions that made
    them where these differ from this environment's. A registry whose keys still hold library
    versions (bildlab <= 0.2) fails with the command that migrates it."""
    from ..harness.registry import Registry, differences, versions

    here, total, n, differ = versions(), 0, 0, {}
    for root in sorted(registries):
        survey = Registry(root).survey()
        if survey["old_keys"]:
            raise ValueError(
                f"{root} holds {survey['old_keys']} records keyed by library versions (bildlab <= 0.2); "
                f"run `bildlab registry --migrate {root}` once (nothing is recomputed)"
            )
        total += survey["records"]
        for made, count in survey["versions"].items():
            diff = differences(json.loads(made), here)
            n += count if diff else 0
            for name, (old, _) in diff.items():
                differ.setdefault(name, set()).add(old)
    if not differ:
        return f"[study] {total} records in the registry, made with this environment's library versions"
    made = "; ".join(
        f"{name} {', '.join(sorted(vs))} (here {here[name]})" for name, vs in sorted(differ.items())
    )
    todo = (
        "recomputing them (--recompute)"
        if recompute
        else "replaying them (--recompute recomputes them)"
    )
    return f"[study] {total} records in the registry; {n} were made with other library versions: {made}; {todo}"


RUN_SETTINGS = "run-settings"  # the tag of the (collapsed) cell of run settings before `parameters`


def notebook_defaults(name: str) -> dict:
    """The stored parameters of a study notebook (its run-settings cell and its `parameters` cell,
    evaluated: papermill sets either's)."""
    import nbformat

    nb = nbformat.read(str(NOTEBOOKS / f"{name}.ipynb"), as_version=4)
    values: dict = {}
    for tag in (RUN_SETTINGS, "parameters"):
        for cell in nb.cells:
            if tag in cell.metadata.get("tags", []):
                exec(cell.source, {}, values)
    return values


def results_table(table: str | os.PathLike | None = None) -> str:
    """A markdown table of the toy study's main table, from the rows RQ5 wrote beside its figure:
    per task and row, the policy chosen on validation and its test numbers with 95% intervals, each
    timing pass (over the timed sample where one was: N says how many)."""
    from ..measure.summary import fmt

    data = json.loads(Path(table or ROOT / "figures" / "rq5_main_table.json").read_text())
    passes = data["passes"]
    speed_heads = [f"speedup, pass {i + 1}" for i in range(passes)] if passes > 1 else ["speedup"]
    lines = [
        "| task | row | (rb, fb) chosen on validation | N (test) | quality change | "
        + " | ".join(speed_heads)
        + " | vs transformers generate | identical to vanilla |",
        "|---" * (7 + len(speed_heads)) + "|",
    ]
    for pair, table in data["pairs"].items():
        metric, head = table["metric"], table["rows"]
        van = head.get("vanilla")
        if van:
            lines.append(
                f"| {pair} | vanilla {metric} | – | | {fmt(van['score'], van['score_ci'])} | "
                + " | ".join(["1x"] * len(speed_heads))
                + " | | |"
            )
        for row in data["rows"][1:]:
            h = head.get(row)
            if not h:
                lines.append(f"| {pair} | {row} | none qualifies |" + " |" * (5 + len(speed_heads)))
                continue
            speeds = [fmt(v, ci, "x") for v, ci in zip(h["speedups"], h["speedup_cis"])]
            speeds += ["–"] * (len(speed_heads) - len(speeds))  # a row timed in fewer passes
            n, timed = h["examples"], h.get("timed", h["examples"])
            n = n if timed == n else f"{n}, {timed} timed"
            # prompt lookup: "n=.., k=.."
            policy = h["policy"] if isinstance(h["policy"], str) else tuple(h["policy"])
            lines.append(
                f"| {pair} | {row} | {policy} | {n} | "
                f"{fmt(h['delta'], h['delta_ci'], signed=True)} {metric} | {' | '.join(speeds)} | "
                f"{fmt(h['speedup_hf'], h['speedup_hf_ci'], 'x')} | {h['identical']}/{h['examples']} |"
            )
    return "\n".join(lines)


def explained_table(path: str | os.PathLike | None = None) -> str:
    """The README's table of speedups explained by measured costs, from the count RQ2 wrote beside
    its figure (figures/rq2_costs.json): per method, the records priced by a calibration and those
    whose measured speedup lies within the tolerance of the predicted one; then all of them, with
    the median and range of measured / predicted."""
    data = json.loads(Path(path or ROOT / "figures" / "rq2_costs.json").read_text())
    n, k, tol, r = data["records"], data["within"], data["tolerance"], data["ratio"]
    lines = [
        f"| method | records | within ±{tol:.0%} of prediction | measured / predicted |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {m} | {b} | {a} ({a / max(b, 1):.0%}) | |"
        for m, (a, b) in sorted(data["per_method"].items())
    ]
    spread = f"median {r['median']:.3f} [{r['min']:.3f}, {r['max']:.3f}]" if r else "–"
    lines.append(f"| all | {n} | {k} ({k / max(n, 1):.0%}) | {spread} |")
    return "\n".join(lines)


def _block(text: str, start: str, end: str, body: str, readme: Path) -> str:
    if start not in text or end not in text:
        raise ValueError(f"{readme} has no {start} ... {end} block")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def update_readme(readme: Path | None = None) -> None:
    """Replace the README's generated blocks with what the study wrote: the toy-results table (RQ5's
    rows) and the table of speedups explained by measured costs (RQ2's count)."""
    readme = Path(readme or ROOT / "README.md")
    text = _block(readme.read_text(), START, END, results_table(), readme)
    text = _block(text, EXPLAINED_START, EXPLAINED_END, explained_table(), readme)
    with atomic_path(readme) as tmp:
        tmp.write_text(text)
