"""The command line and the benchmark script, on the shipped zoo and a random pair (short runs)."""

import json
import os
import re
import runpy
import sys
from pathlib import Path

import pytest

from bildlab.cli import main

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_decoding.py"
COMPILE = BENCH.parent / "bench_compile.py"


def _demo_rows(out: str) -> dict[str, list[str]]:
    """The demo's table: method -> its cells (tokens, large calls, small-model tokens, speedup...,
    identical)."""
    rows = {
        line.split()[0]: line.split()
        for line in out.splitlines()
        if line.split()[:1] in (["greedy"], ["speculative"], ["bild"])
    }
    assert list(rows) == ["greedy", "speculative", "bild"], out
    return rows


@pytest.mark.parametrize("pair", [None, "random", "toy-mt-llama"])
def test_demo_counts_identical_outputs_and_states_the_speedup(pair, capsys):
    n = 3
    assert (
        main(["demo", *(["--pair", pair] if pair else []), "--n", str(n), "--max-new-tokens", "6"])
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith(
        "a random T5 pair" if pair == "random" else f"{pair or 'toy-mt'} from the shipped zoo"
    )
    rows = _demo_rows(out)
    assert rows["greedy"][3] == "0" and rows["greedy"][4] == "1x"
    for name in ("greedy", "speculative"):  # lossless: every output identical to greedy's, counted
        assert rows[name][-1] == f"{n}/{n}" and rows[name][1] == rows["greedy"][1]
    assert int(rows["speculative"][2]) <= int(rows["greedy"][2]) and int(rows["speculative"][3]) > 0
    speed = re.fullmatch(r"(\d+\.\d\d)x \[(\d+\.\d\d), (\d+\.\d\d)\]", " ".join(rows["bild"][4:7]))
    assert speed and float(speed[2]) <= float(speed[1]) <= float(speed[3]), rows["bild"]


def test_demo_counts_bilds_identical_outputs_as_decoded():
    """The demo's BiLD count is the number of its outputs equal to greedy's, decoded here on their
    own."""
    import bildlab

    pair = bildlab.load_pair("toy-mt")
    inputs = pair.inputs("test", limit=4)
    same = sum(
        bildlab.generate(pair.large, x, small=pair.small, method="bild", max_new_tokens=16).tokens
        == bildlab.generate(pair.large, x, max_new_tokens=16).tokens
        for x in inputs
    )
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["demo", "--n", "4", "--max-new-tokens", "16"]) == 0
    assert _demo_rows(out.getvalue())["bild"][-1] == f"{same}/4"


@pytest.mark.parametrize(
    "argv, words",
    [
        (["demo", "--n", "0"], ["--n", "integer >= 1", "'0'"]),
        (["demo", "--n", "x"], ["--n", "integer >= 1"]),
        (["zoo", "--profile", "huge"], ["--profile", "'full'", "'smoke'"]),
    ],
)
def test_bad_arguments_name_the_option(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err


def test_demo_unknown_pair_lists_the_known_ones():
    with pytest.raises(
        ValueError, match="unknown pair 'nope'; known pairs: toy-mt, toy-sum, toy-mt-llama"
    ):
        main(["demo", "--pair", "nope"])


def test_a_bad_study_parameter_is_one_line(monkeypatch, capsys):
    import papermill

    monkeypatch.setattr(
        papermill, "execute_notebook", lambda *a, **k: pytest.fail("a notebook ran")
    )
    assert main(["study", "-p", "limit", "-5"]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == "bildlab study: error: limit must be None, an integer >= 1 or a dict of them per pair; got -5\n"
    )
    assert main(["study", "-p", "pairs", "[toy-mt"]) == 2
    assert (
        capsys.readouterr().err == "bildlab study: error: -p pairs: '[toy-mt' is not a YAML value\n"
    )
    for argv, words in (
        (["--notebook", "rq9"], "argument --notebook: invalid choice: 'rq9'"),
        (["--params", "nope.yaml"], "argument --params: no such file 'nope.yaml'"),
    ):
        with pytest.raises(SystemExit) as e:
            main(["study", *argv])
        assert e.value.code == 2 and words in capsys.readouterr().err


def test_an_error_while_running_is_not_a_usage_error(monkeypatch):
    from bildlab.study import runner

    # a ValueError from inside a run (a bug, a failing notebook) keeps its traceback
    def run_study(**kwargs):
        raise ValueError("inside a notebook")

    monkeypatch.setattr(runner, "run_study", run_study)
    with pytest.raises(ValueError, match="inside a notebook"):
        main(["study", "--notebook", "rq1_small_writes_most"])


CHECKOUT = Path(__file__).resolve().parent.parent


@pytest.fixture
def no_study(tmp_path, monkeypatch):
    """An empty folder as the current one, and a package that sits in no checkout (as an installed
    copy does)."""
    from bildlab.study import runner

    for name in ("ROOT", "NOTEBOOKS", "PARAMS"):
        monkeypatch.setattr(runner, name, getattr(runner, name))  # restored after the test
    monkeypatch.setattr(runner, "HOME", tmp_path / "site-packages")
    monkeypatch.delenv("BILDLAB_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path.resolve()


@pytest.mark.parametrize(
    "argv",
    [
        ["study", "--plan"],
        ["study"],
        ["study", "--notebook", "rq1_small_writes_most"],
        ["study", "--profile", "paper", "--plan"],
    ],
)
def test_the_study_outside_a_checkout_stops_with_one_line(no_study, argv, monkeypatch, capsys):
    import papermill

    monkeypatch.setattr(
        papermill, "execute_notebook", lambda *a, **k: pytest.fail("a notebook ran")
    )
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        f"bildlab study: error: no study in {no_study} or a folder above it (notebooks/*.ipynb and params/): the "
        f"study lives in a checkout of the bildlab repository; git clone it and run bildlab there, or pass --root "
        f"CHECKOUT (or set BILDLAB_ROOT)"
    ]


def test_the_study_is_found_up_from_here_by_root_and_by_the_environment(no_study, monkeypatch):
    from bildlab.study import runner

    monkeypatch.chdir(CHECKOUT / "notebooks")
    assert runner.find_root() == CHECKOUT
    monkeypatch.chdir(no_study)
    assert runner.find_root(CHECKOUT) == CHECKOUT
    with pytest.raises(
        runner.StudyNotFound, match=r"^--root .*: no study there \(notebooks/\*\.ipynb and params/"
    ):
        runner.find_root(no_study)
    monkeypatch.setenv("BILDLAB_ROOT", str(CHECKOUT))
    assert runner.find_root() == CHECKOUT
    monkeypatch.setenv("BILDLAB_ROOT", str(no_study))
    with pytest.raises(runner.StudyNotFound, match=r"^\$BILDLAB_ROOT .*: no study there"):
        runner.find_root()
    (no_study / "notebooks").mkdir()
    (no_study / "params").mkdir()
    # folders without a notebook: no study (never a plan of nothing)
    with pytest.raises(runner.StudyNotFound):
        runner.find_root()


def test_the_plan_reads_the_study_it_is_pointed_at(no_study, capsys):
    assert (
        main(["study", "--plan", "--root", str(CHECKOUT), "--notebook", "rq1_small_writes_most"])
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("costs: ")  # where the plan's costs come from
    row = lines[2].split()
    # its sweeps (the committed ones: 0 decodes to run)
    assert row[0] == "rq1_small_writes_most" and int(row[1]) > 0
    with pytest.raises(SystemExit) as e:
        main(["study", "--root", str(CHECKOUT), "--notebook", "rq9"])
    assert (
        e.value.code == 2
        and "(choose from rq1_small_writes_most, rq2_policies," in capsys.readouterr().err
    )


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="the paper profile runs on this machine"
)
def test_the_paper_profile_on_a_machine_without_cuda_stops_at_once():
    """It stops with one line before papermill is even imported (no notebook, no kernel): checked
    by what the process imported, not by a wall-clock time."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    run = subprocess.run(
        [sys.executable, "-m", "bildlab.cli", "study", "--profile", "paper"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.splitlines() == [
        f"bildlab study: error: device: 'cuda' was asked but this machine has no CUDA device (torch "
        f"{__import__('torch').__version__} sees none); run on a GPU box or pass -p device cpu"
    ]
    probe = (
        "import sys\nfrom bildlab import cli\ncode = cli.main(['study', '--profile', 'paper'])\n"
        "print(code, 'papermill' in sys.modules)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=root
    )
    assert run.stdout.split() == ["2", "False"], run.stderr


def run_bench(monkeypatch, *argv) -> int:
    monkeypatch.setattr(sys, "argv", [str(BENCH), *argv])
    with pytest.raises(SystemExit) as e:
        runpy.run_path(str(BENCH), run_name="__main__")
    return e.value.code


def test_bench_script_on_the_decoder_only_pair(monkeypatch, capsys):
    code = run_bench(
        monkeypatch,
        "--pair",
        "toy-mt-llama",
        "--n",
        "1",
        "--warmup",
        "1",
        "--max-new-tokens",
        "6",
        "--methods",
        "hf_greedy,greedy,speculative",
    )
    out = capsys.readouterr().out
    assert code == 0 and "lossless methods: identical outputs" in out
    assert "pair=toy-mt-llama inputs=1 (after 1 warm-up decodes)" in out and "dtype=float32" in out
    assert "bildlab greedy / HF greedy: " in out and "HF assisted" not in out


def test_bench_script_rejects_methods_without_the_reference(monkeypatch, capsys):
    assert run_bench(monkeypatch, "--methods", "greedy,speculative") == 2
    assert "--methods must include hf_greedy" in capsys.readouterr().err


def test_the_paper_size_benchmark_on_shrunken_configs(tmp_path, capsys):
    # the script at full size takes minutes (run once, its output committed); here with tiny layers
    # and the real vocabularies: every measurement is made and written, mT5 keeps its own output
    # layer, T5 its tied one
    import importlib.util
    import json

    import transformers as tf

    from bildlab.world.models import cut_vocabulary

    spec = importlib.util.spec_from_file_location("paper_size", BENCH.parent / "paper_size.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # the script's own configs shrunk (a new dict: the package's models.PAPER_CONFIGS stay as they
    # are)
    bench.CONFIGS = {
        name: {**config, "d_model": 8, "num_layers": 1, "num_heads": 2, "d_kv": 4, "d_ff": 16}
        for name, config in bench.CONFIGS.items()
    }
    assert bench.main(["--steps", "1", "--out", str(tmp_path / "out.json")]) == 0
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["protocol"] == {"threads": 1, "repeats": 1, "warmup": 1}
    for family, rows, untied in (("t5", 32100, False), ("mt5", 250100, True)):
        r = doc["families"][family]
        tied = tf.T5ForConditionalGeneration(
            tf.T5Config(**bench.CONFIGS[f"{family}-large"], **bench.COMMON)
        )
        cut_vocabulary(tied, rows)
        assert r["large"]["parameters"] == sum(p.numel() for p in tied.parameters()) + (
            rows * 8 if untied else 0
        )
        assert r["large"]["vocabulary_rows"] == r["small"]["vocabulary_rows"] == rows
        assert r["large"]["untied_output_layer"] is r["small"]["untied_output_layer"] is untied
        assert set(r["seconds"]) >= {
            "large step",
            "small step",
            "large verify 8",
            "large output layer",
            "large encoder 1024",
            "small encoder 64",
        }
        assert r["c"] > 0 and set(r["verify_over_step"]) == {"2", "4", "8"}
        # the derived numbers against formulas written here from the timings written out (rounded: 5
        # decimals of a second, c to 4 decimals, ratios to 3): c and the verify ratios, Leviathan et
        # al.'s expected speedup (1 - a^(k+1)) / ((1 - a)(k c + 1)), and with the measured cost of
        # verifying k + 1 tokens in place of one step
        s, c = r["seconds"], r["c"]
        assert c == pytest.approx(s["small step"] / s["large step"], rel=0.05)
        for n, ratio in r["verify_over_step"].items():
            assert ratio == pytest.approx(s[f"large verify {n}"] / s["large step"], rel=0.05)
        assert sorted(r["expected_speedup"]) == ["a=0.6", "a=0.7", "a=0.8", "a=0.9"]
        for a in (0.6, 0.7, 0.8, 0.9):
            row = r["expected_speedup"][f"a={a}"]
            assert sorted(row) == ["k=1", "k=3", "k=7"]
            for k in (1, 3, 7):
                tokens = sum(a**i for i in range(k + 1))  # expected tokens per large call
                assert row[f"k={k}"]["formula"] == pytest.approx(tokens / (k * c + 1), abs=0.006), (
                    a,
                    k,
                )
                verify = r["verify_over_step"][str(k + 1)]
                assert row[f"k={k}"]["measured_verify"] == pytest.approx(
                    tokens / (k * c + verify), abs=0.02
                ), (a, k)
    assert "c = " in capsys.readouterr().out


def test_a_combination_that_cannot_run_fails_before_papermill(monkeypatch, capsys):
    import papermill

    monkeypatch.setattr(
        papermill, "execute_notebook", lambda *a, **k: pytest.fail("a notebook ran")
    )
    # each parameter is valid alone; RQ3's aligned draft and RQ4's early exit are not there for
    # these pairs
    for notebook, pairs, words in (
        (
            "rq3_alignment",
            "toy-mt-llama",
            "draft='aligned': pair 'toy-mt-llama' has no aligned small model",
        ),
        ("rq4_early_exit", "xsum", "draft='early-exit' is for the toy pairs"),
    ):
        assert (
            main(
                [
                    "study",
                    "--notebook",
                    notebook,
                    "-p",
                    "pairs",
                    f"[{pairs}]",
                    "-p",
                    "timing_limit",
                    "10",
                    "-p",
                    "registry",
                    "/nonexistent",
                ]
            )
            == 2
        )
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"bildlab study: error: {notebook}: {words}")
    assert main(["study", "--notebook", "rq1_small_writes_most", "-p", "memory", "12 GiBs"]) == 2
    assert capsys.readouterr().err.startswith("bildlab study: error: memory must be None")


def test_a_failed_notebook_is_one_line_naming_the_cell_and_the_exception(tmp_path):
    import subprocess
    import sys

    empty = tmp_path / "zoo"
    empty.mkdir()
    # no model: the notebook fails when it loads the pair
    env = {**os.environ, "BILDLAB_ZOO": str(empty)}
    argv = [
        sys.executable,
        "-m",
        "bildlab.cli",
        "study",
        "--notebook",
        "rq1_small_writes_most",
        "--out",
        str(tmp_path / "run"),
        "-p",
        "pairs",
        '["toy-mt"]',
        "-p",
        "limit",
        "4",
        "-p",
        "timing_limit",
        "2",
        "-p",
        "fallbacks",
        "[0.5]",
        "-p",
        "registry",
        str(tmp_path / "reg"),
        "-p",
        "figures",
        str(tmp_path / "fig"),
        "-p",
        "progress",
        "false",
    ]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 1
    lines = [
        line
        for line in run.stderr.splitlines()
        if line and not line.startswith(("study (toy)", "[study]"))
    ]
    failed = tmp_path / "run" / ".rq1_small_writes_most.failed.ipynb"
    assert lines[-1] == (
        f"bildlab study: rq1_small_writes_most failed in cell 4: FileNotFoundError: toy tokenizer "
        f"missing at {empty}/tokenizer; rebuild the zoo with `bildlab zoo`; the executed notebook: "
        f"{failed}"
    )
    assert failed.is_file() and not (tmp_path / "run" / "rq1_small_writes_most.ipynb").exists()
    assert (
        "Traceback" not in run.stderr and "KeyboardInterrupt" not in run.stderr and len(lines) == 1
    )
    verbose = subprocess.run(
        argv + ["--verbose"], capture_output=True, text=True, timeout=600, env=env
    )
    assert (
        verbose.returncode == 1 and "load_pair" in verbose.stderr and "\x1b[" not in verbose.stderr
    )


def test_the_readmes_compiled_table_is_made_from_the_committed_runs(monkeypatch, capsys):
    """The README's eager-vs-compiled table is `bench_compile.py --table` over
    benchmarks/compile/*.json, docs/benchmark.md's `--table --full`, and each run they read gave
    every lossless row greedy's outputs."""
    monkeypatch.syspath_prepend(str(COMPILE.parent))
    monkeypatch.setattr(sys, "argv", [str(COMPILE), "--table"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(COMPILE), run_name="__main__")
    assert done.value.code == 0
    table = capsys.readouterr().out
    assert (
        f"<!-- compiled:start -->\n{table}<!-- compiled:end -->"
        in (BENCH.parents[1] / "README.md").read_text()
    )
    runs = sorted((COMPILE.parent / "compile").glob("*.json"))
    assert runs and table.count("|\n") == 2 + 7
    # docs/benchmark.md's fuller table: `--table --full`, the README's rows first
    full = runpy.run_path(str(COMPILE))["table"](runs, full=True)
    assert full.startswith(table.rsplit("| cost ratio", 1)[0]) and full.count("|\n") == 2 + 11
    assert (
        f"<!-- compiled-full:start -->\n{full}<!-- compiled-full:end -->"
        in (BENCH.parents[1] / "docs" / "benchmark.md").read_text()
    )
    for run in runs:
        for pair in json.loads(run.read_text())["pairs"]:
            assert pair["not_identical"] == [], (run.name, pair["pair"])
            assert pair["rows"]["greedy compiled"]["same_as_greedy"] == pair["n"]
