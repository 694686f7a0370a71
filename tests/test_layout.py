"""The house's shape, derived from its source: imports run one way, modules stay small, every import
is a declared dependency, the version has one source, and the README's links resolve."""

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import tomllib

import bildlab

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "bildlab"
# The packages, top to bottom: a package imports only packages below it (the README's layout section
# says what each holds). The engine, at the bottom, is what a `pip install` user needs: it imports
# nothing else of bildlab.
PACKAGES = ["cli", "study", "toy", "harness", "measure", "world", "engine", "atomic", ""]
# Within a package, top to bottom: a module imports only modules below it.
ORDER = [
    "cli",
    "study.plan",
    "study.stand_in",
    "study.runner",
    "study",
    "study.params",
    "study.rq1_small_writes_most",
    "study.rq2_policies",
    "study.rq3_alignment",
    "study.rq4_early_exit",
    "study.speculative_pipeline",
    "study.compiled",
    "study.batching",
    "study.rq5_main_table",
    "study.rq5_rows",
    "study.explained",
    "study.common",
    "study.present",
    "study.plots",
    "study.figcheck",
    "toy",
    "toy.zoo",
    "toy.card",
    "toy.train",
    "harness",
    "harness.evaluate",
    "harness.batch_sizes",
    "harness.retime",
    "harness.calibrate",
    "harness.records",
    "harness.pricing",
    "harness.distributed",
    "harness.shard",
    "harness.benchmark",
    "harness.registry",
    "harness.columns",
    "measure",
    "measure.mechanism",
    "measure.costs",
    "measure.summary",
    "measure.intervals",
    "measure.metrics",
    "world",
    "world.models",
    "world.tasks",
    "world.tasks.paper",
    "world.tasks.toy",
    "world.tasks.toy_mt",
    "world.tasks.toy_sum",
    "world.mirror",
    "engine",
    "engine.batch",
    "engine.ragged",
    "engine.memory",
    "engine.decoding",
    "engine.static",
    "engine.lookup",
    "engine.views",
    "engine.capabilities",
    "engine.early_exit",
    "engine.timing",
    "engine.tally",
    "engine.policy",
    "atomic",
    "",
]
# a module's size as the parser counts it (statements), not as the formatter wraps it: the 450-line
# cap of the hand-wrapped 120-column code held modules of up to 323 statements
MAX_STATEMENTS = 330


def _modules() -> dict[str, Path]:
    return {
        ".".join(f.relative_to(PACKAGE).with_suffix("").parts)
        .removesuffix("__init__")
        .rstrip("."): f
        for f in sorted(PACKAGE.rglob("*.py"))
    }


def import_graph() -> dict[str, set[str]]:
    """{module: the bildlab modules it imports} ('' is the package itself; 'study.common' a
    submodule)."""
    mods, graph = _modules(), {}
    for name, f in mods.items():
        package = name if f.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                parts = package.split(".") if package else []
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                target = ".".join(p for p in (base, node.module or "") if p)
                subs = {".".join(p for p in (target, a.name) if p) for a in node.names}
                deps |= (subs & set(mods)) or {target}
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                )
                deps |= {
                    n.removeprefix("bildlab").lstrip(".")
                    for n in names
                    if n.split(".")[0] == "bildlab"
                }
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def package(module: str) -> str:
    return module.split(".")[0]


def upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{m} imports {d}"
        for m, deps in graph.items()
        for d in deps
        if ORDER.index(d) <= ORDER.index(m)
    )


def upward_packages(graph: dict[str, set[str]]) -> list[str]:
    rank = PACKAGES.index
    return sorted(
        {
            f"{package(m)} imports {package(d)}"
            for m, deps in graph.items()
            for d in deps
            if package(m) != package(d) and rank(package(d)) <= rank(package(m))
        }
    )


def test_imports_run_one_way_top_to_bottom():
    graph = import_graph()
    assert sorted(graph) == sorted(ORDER), (
        "a module is missing from ORDER (or ORDER names one that is gone)"
    )
    assert upward(graph) == []
    assert sorted({package(m) for m in graph}) == sorted(PACKAGES)
    assert upward_packages(graph) == []
    # ORDER lists each package's modules together, in the packages' order
    assert [
        p for i, p in enumerate(map(package, ORDER)) if i == 0 or p != package(ORDER[i - 1])
    ] == PACKAGES


def test_the_engine_imports_nothing_else_of_bildlab():
    graph = import_graph()
    outside = sorted(
        f"{m} imports {d}"
        for m, deps in graph.items()
        if package(m) == "engine"
        for d in deps
        if package(d) != "engine"
    )
    assert outside == []


def test_the_import_graph_sees_an_upward_import(tmp_path, monkeypatch):
    """The check above can fail: a harness that imported the planner would be caught."""
    fake = tmp_path / "bildlab"
    for sub in ("study", "harness"):
        (fake / sub).mkdir(parents=True)
        (fake / sub / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "study" / "plan.py").write_text("from ..harness import evaluate\n")
    (fake / "harness" / "evaluate.py").write_text(
        "def f():\n    from ..study.plan import Planner\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    graph = import_graph()
    assert graph == {
        "": set(),
        "study": set(),
        "harness": set(),
        "study.plan": {"harness.evaluate"},
        "harness.evaluate": {"study.plan"},
    }
    assert upward(graph) == ["harness.evaluate imports study.plan"]
    assert upward_packages(graph) == ["harness imports study"]


def statements(source: str) -> int:
    return sum(isinstance(node, ast.stmt) for node in ast.walk(ast.parse(source)))


def test_no_module_is_too_long():
    long = {
        name: n
        for name, f in _modules().items()
        if (n := statements(f.read_text())) > MAX_STATEMENTS
    }
    assert not long
    assert statements("x = 1\nif x:\n    y = 2\n") == 3


def test_every_import_is_a_declared_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {
        re.match(r"[A-Za-z0-9._-]+", r).group(0).lower().replace("_", "-")
        for r in project["dependencies"]
    }
    optional = {
        "ray": "ray",
        "ipywidgets": "notebooks",
    }  # imported only where their absence is handled
    dists = metadata.packages_distributions()
    missing = set()
    for f in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            for top in (
                {n.split(".")[0] for n in names}
                - set(sys.stdlib_module_names)
                - {"bildlab", "__future__"}
            ):
                dist = {d.lower().replace("_", "-") for d in dists.get(top, [top])}
                if not dist & declared and top not in optional:
                    missing.add(f"{top} ({f.relative_to(ROOT)})")
    assert not missing
    for top, extra in optional.items():
        assert top in str(project["optional-dependencies"][extra])


def test_the_version_has_one_source():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "bildlab.__version__"}
    assert metadata.version("bildlab") == bildlab.__version__


def _anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_fits_a_screen_or_two_and_its_links_resolve():
    readme = ROOT / "README.md"
    assert len(readme.read_text().splitlines()) <= 150
    docs = sorted((ROOT / "docs").glob("*.md"))
    assert {"protocol.md", "paper-profile.md", "toy-world.md", "decoding.md", "cluster.md"} <= {
        d.name for d in docs
    }
    linked = set()
    for page in [readme, *docs]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            assert dest.exists(), f"{page.name} links to {target}: no such file"
            if anchor:
                headings = re.findall(r"^#+ (.+)$", dest.read_text(), re.M)
                assert anchor in {_anchor(h) for h in headings}, (
                    f"{page.name} links to {target}: no such heading"
                )
            linked.add(dest)
    assert {d.resolve() for d in docs} <= linked, "a page in docs/ that nothing links to"


# A commit hash written into prose: a word of 7 to 40 lowercase hex digits with at least one digit
# and one letter (so neither a number nor a word like "decade"). Run history stays in the commits.
HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def commit_hashes(markdown: str) -> list[str]:
    """The hash-like words of a markdown page's prose: fenced code blocks and URLs, which may need
    one (a pinned revision, a command), are left out; inline code is prose's and is not."""
    return HASH.findall(URL.sub(" ", FENCE.sub(" ", markdown)))


def test_the_hash_check_finds_a_hash_in_prose_and_only_there():
    assert commit_hashes("the code of be35f2d and 6e11e2e, before f5ee1f1") == [
        "be35f2d",
        "6e11e2e",
        "f5ee1f1",
    ]
    assert commit_hashes("timed at `0c34a73`; " + "a" * 3 + "1" * 37) == [
        "0c34a73",
        "aaa" + "1" * 37,
    ]
    assert (
        commit_hashes(
            "64,200 of 64,200; 1234567 tokens; a decade; facade; t5-small; bf16; 1e-5; ±5%\n"
            "see https://github.com/o/r/commit/be35f2d0 or [it](https://x.org/a1b2c3d4e5)\n"
            "```bash\ngit checkout be35f2d\n```\n"
            + "f" * 41
            + "1 (too long for a hash); deadbee1x (not a word of hex)"
        )
        == []
    )


def test_no_commit_hash_in_the_docs_prose():
    pages = [
        ROOT / "README.md",
        ROOT / "tests" / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
    ]
    found = {p.name: h for p in pages if (h := commit_hashes(p.read_text()))}
    assert found == {}, "commit hashes in prose: run history belongs to the commits"
