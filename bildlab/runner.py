"""Running the study notebooks: papermill into a run folder, parameters checked first, outputs written whole."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .atomic import atomic_path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
PARAMS = ROOT / "params"


def notebook_names() -> list[str]:
    return sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))


def profile_params(profile: str, name: str) -> dict:
    """The parameters of a profile for one notebook: none for toy (the stored defaults), params/paper/NAME.yaml."""
    if profile == "toy":
        return {}
    import yaml

    path = PARAMS / profile / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"no parameters for notebook {name!r} in profile {profile!r}: {path}")
    return yaml.safe_load(path.read_text()) or {}


def run_study(profile: str = "toy", notebooks: list[str] | None = None, out: str | os.PathLike | None = None,
              overrides: dict | None = None, params_file: str | None = None, progress: bool = True) -> list[Path]:
    """Execute the chosen notebooks (default: all) with papermill into `out`.

    The toy profile with the stored parameters writes the executed notebooks back into notebooks/ (what JupyterLab
    opens and nbval checks); any other profile or parameter goes to runs/<profile> by default. All parameters of all
    chosen notebooks are checked before the first one runs; each executed notebook is written to a temporary name
    and renamed when it finished, so an interrupted run leaves no half-written notebook."""
    import papermill as pm
    import yaml
    from tqdm.auto import tqdm

    from .study import check_params

    known = notebook_names()
    chosen = notebooks or known
    for name in chosen:
        if name not in known:
            raise ValueError(f"unknown notebook {name!r}; notebooks: {', '.join(known)}")
    extra = dict(yaml.safe_load(Path(params_file).read_text()) or {}) if params_file else {}
    extra.update(overrides or {})
    plan = []
    for name in chosen:
        path = NOTEBOOKS / f"{name}.ipynb"
        allowed = set(pm.inspect_notebook(str(path)))
        params = {**profile_params(profile, name), **extra}
        if profile != "toy":  # paper runs keep their own registry and figures
            params.setdefault("registry", f"../results/{profile}")
            params.setdefault("figures", f"../figures/{profile}")
        check_params(params, allowed)
        plan.append((name, path, params))
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
            pm.execute_notebook(str(path), str(tmp), parameters=params, cwd=str(NOTEBOOKS), progress_bar=False,
                                kernel_name="python3")
        except BaseException:
            failed = out / f"{name}.failed.ipynb"
            if tmp.exists():
                os.replace(tmp, failed)  # keep the evidence, never under the finished name
                print(f"[study] {name} failed; see {failed}", file=sys.stderr)
            raise
        _strip_timings(tmp)
        os.replace(tmp, target)
        written.append(target)
    if stored and set(chosen) == set(known):
        update_readme()  # the README's table of toy results, regenerated from the registry
    return written


def _strip_timings(path: Path) -> None:
    """Drop papermill's and Jupyter's clock readings so that a rerun with the same results gives the same file."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    for key in ("start_time", "end_time", "duration"):
        nb.metadata.get("papermill", {}).pop(key, None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        for key in ("start_time", "end_time", "duration", "exception", "status"):
            cell.metadata.get("papermill", {}).pop(key, None)
    nbformat.write(nb, str(path))


START, END = "<!-- toy-results:start -->", "<!-- toy-results:end -->"


def results_table(registry: str | os.PathLike = ROOT / "results" / "toy") -> str:
    """A markdown table of the toy study from the results registry: per pair, the vanilla large model and the fastest
    BiLD run within 0.2 and within 1 point of it (any draft, any policy that was run)."""
    from .evaluate import Registry
    from .study import best_within

    records = [r for r in Registry(registry).records() if r["key"]["method"] == "bild"]
    lines = ["| pair | metric | fastest BiLD within 0.2 of vanilla | fastest BiLD within 1 of vanilla |",
             "|---|---|---|---|"]
    for pair in sorted({r["key"]["pair"] for r in records}):
        mine = [r for r in records if r["key"]["pair"] == pair]
        cells = []
        for tol in (0.2, 1.0):
            b = best_within(mine, tol)
            if b is None:
                cells.append("–")
                continue
            s, k = b["summary"], b["key"]
            cells.append(f"{s['speedup']:.2f}x, {s['score']:.2f} vs vanilla {s['baseline_score']:.2f} "
                         f"({k['draft']} draft, fb {k['policy']['fallback']}, rb {k['policy']['rollback']}, "
                         f"{s['examples']} examples)")
        lines.append(f"| {pair} | {mine[0]['summary']['metric']} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def update_readme(readme: Path = ROOT / "README.md") -> None:
    """Replace the toy-results block of the README with the table regenerated from the registry."""
    text = readme.read_text()
    if START not in text or END not in text:
        raise ValueError(f"{readme} has no {START} ... {END} block")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    with atomic_path(readme) as tmp:
        tmp.write_text(f"{head}{START}\n{results_table()}\n{END}{tail}")
