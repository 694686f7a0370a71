"""The package as a user installs it: the wheel, built from the sdist, in a fresh venv, run from an
empty folder with the checkout nowhere on the path. The zoo loads offline, the README's example
runs, BiLD decodes, `bildlab demo` runs on the shipped pair, and `bildlab study` outside a checkout
stops with one line (exit status 2)."""

import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
ZOO = ROOT / "bildlab" / "toy" / "_zoo"


def _run(argv, cwd, env, timeout=300):
    run = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    return run


def _ok(run):
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("install")
    src, dist, venv, empty = tmp / "src", tmp / "dist", tmp / "venv", tmp / "empty"
    src.mkdir()
    empty.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "bildlab", src / "bildlab", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    # no PYTHONPATH, no zoo or study location: only what the wheel carries; a fresh task cache; no
    # network
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "BILDLAB_ZOO", "BILDLAB_ROOT", "BILDLAB_CACHE", "PYTHONHOME")
    }
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        PIP_NO_INDEX="1",
        BILDLAB_CACHE=str(tmp / "cache"),
        OMP_NUM_THREADS="1",
    )
    # sdist first, then the wheel from the sdist (what `python -m build` does): both must carry the
    # zoo
    _ok(
        _run(
            [
                sys.executable,
                "-c",
                "import sys; from setuptools import build_meta as b; b.build_sdist(sys.argv[1])",
                dist,
            ],
            src,
            env,
        )
    )
    sdist = next(dist.glob("bildlab-*.tar.gz"))
    _ok(
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                "-w",
                dist,
                sdist,
            ],
            empty,
            env,
        )
    )
    wheel = next(dist.glob("bildlab-*.whl"))
    # the dependencies from this environment (--system-site-packages), the package only from the
    # wheel; this environment's pip installs into the venv (the venv's python runs it)
    _ok(
        _run(
            [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv],
            empty,
            env,
        )
    )
    python = venv / "bin" / "python"
    _ok(_run([python, "-m", "pip", "install", "-q", "--no-deps", wheel], empty, env))
    return SimpleNamespace(
        sdist=sdist,
        wheel=wheel,
        venv=venv,
        python=python,
        bildlab=venv / "bin" / "bildlab",
        empty=empty,
        env=env,
    )


def test_the_wheel_and_the_sdist_carry_the_zoo_and_its_card(installed):
    shipped = sorted(str(p.relative_to(ROOT)) for p in ZOO.rglob("*") if p.is_file())
    assert "bildlab/toy/_zoo/card.json" in shipped and "bildlab/toy/_zoo/card.md" in shipped
    assert (
        "bildlab/toy/_zoo/t5-large/model.safetensors" in shipped
        and "bildlab/toy/_zoo/tokenizer/tokenizer.json" in shipped
    )
    in_wheel = set(zipfile.ZipFile(installed.wheel).namelist())
    assert set(shipped) <= in_wheel
    with tarfile.open(installed.sdist) as tar:
        in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert set(shipped) <= in_sdist
    assert not {n for n in in_wheel if n.startswith(("tests/", "notebooks/", "results/", "data/"))}


def test_the_readme_states_the_wheels_size(installed):
    stated = re.search(r"a (\d+(?:\.\d+)?) MB wheel", (ROOT / "README.md").read_text())
    assert stated, "the README states the wheel's size as 'a N MB wheel'"
    assert abs(installed.wheel.stat().st_size / 1e6 - float(stated.group(1))) < 0.5


def _readme_example() -> str:
    """The Python example of the README's install section."""
    section = (
        (ROOT / "README.md").read_text().split("## Install the package", 1)[1].split("\n## ", 1)[0]
    )
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_installed_package_loads_the_zoo_and_decodes_offline(installed):
    script = f"""
import os, sys, torch
import bildlab
from bildlab.world import models
venv = os.path.realpath({str(installed.venv)!r})
assert os.path.realpath(bildlab.__file__).startswith(venv + os.sep), bildlab.__file__  # the wheel's copy
assert os.path.realpath(models.zoo_dir()).startswith(venv + os.sep), models.zoo_dir()
assert models.read_card()["test_examples"] >= 300
pair = bildlab.load_pair("toy-mt")
x = pair.inputs("test", limit=1)[0]
greedy = bildlab.generate(pair.large, x, method="greedy", max_new_tokens=24)
out = bildlab.generate(pair.large, x, small=pair.small, method="bild", max_new_tokens=24)
assert out.tokens and out.stats["small_tokens"] > 0, out.stats
print("bild", len(out.tokens), out.stats["small_tokens"], out.stats["large_calls"], out.tokens == greedy.tokens)
"""
    run = _ok(_run([installed.python, "-c", script], installed.empty, installed.env))
    assert run.stdout.startswith("bild ")
    example = _ok(_run([installed.python, "-c", _readme_example()], installed.empty, installed.env))
    assert example.stdout.strip(), "the README's example prints something"


def test_the_installed_demo_runs_on_the_shipped_pair(installed):
    run = _ok(
        _run(
            [installed.bildlab, "demo", "--n", "2", "--max-new-tokens", "8"],
            installed.empty,
            installed.env,
        )
    )
    out = run.stdout
    assert out.startswith("toy-mt from the shipped zoo, its first 2 test sources")
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:5]}
    assert list(rows) == ["greedy", "speculative", "bild"]
    # lossless: identical outputs, counted
    assert rows["greedy"][-1] == rows["speculative"][-1] == "2/2"


@pytest.mark.parametrize(
    "argv", [["study", "--plan"], ["study"], ["study", "--notebook", "rq1_small_writes_most"]]
)
def test_the_study_outside_a_checkout_stops_with_one_line(installed, argv):
    run = _run([installed.bildlab, *argv], installed.empty, installed.env, timeout=60)
    assert run.returncode == 2 and run.stdout == ""
    here = installed.empty.resolve()
    assert run.stderr.splitlines() == [
        f"bildlab study: error: no study in {here} or a folder above it (notebooks/*.ipynb and params/): the study "
        f"lives in a checkout of the bildlab repository; git clone it and run bildlab there, or pass --root CHECKOUT "
        f"(or set BILDLAB_ROOT)"
    ]
