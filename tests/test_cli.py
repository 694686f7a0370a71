"""The command line and the benchmark script, on the shipped zoo and a random pair (short runs)."""

import runpy
import sys
from pathlib import Path

import pytest

from bildlab.cli import main

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_decoding.py"


@pytest.mark.parametrize("pair", ["random", "toy-mt-llama"])
def test_demo_decodes_with_every_method(pair, capsys):
    assert main(["demo", "--pair", pair, "--n", "1", "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    for method in ("greedy", "speculative", "bild"):
        assert f"{method:>12}: " in out
    for method in ("hf_greedy", "hf_assisted", "greedy", "speculative", "bild"):
        assert f"'method': '{method}'" in out


@pytest.mark.parametrize("argv, words", [
    (["demo", "--n", "0"], ["--n", "integer >= 1", "'0'"]),
    (["demo", "--n", "x"], ["--n", "integer >= 1"]),
    (["zoo", "--profile", "huge"], ["--profile", "'full'", "'smoke'"]),
])
def test_bad_arguments_name_the_option(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err


def test_demo_unknown_pair_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown pair 'nope'; known pairs: toy-mt, toy-sum, toy-mt-llama"):
        main(["demo", "--pair", "nope"])


def test_a_bad_study_parameter_is_one_line(monkeypatch, capsys):
    import papermill

    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: pytest.fail("a notebook ran"))
    assert main(["study", "-p", "limit", "-5"]) == 2
    err = capsys.readouterr().err
    assert err == "bildlab study: error: limit must be None, an integer >= 1 or a dict of them per pair; got -5\n"
    assert main(["study", "-p", "pairs", "[toy-mt"]) == 2
    assert capsys.readouterr().err == "bildlab study: error: -p pairs: '[toy-mt' is not a YAML value\n"
    for argv, words in ((["--notebook", "rq9"], "argument --notebook: invalid choice: 'rq9'"),
                        (["--params", "nope.yaml"], "argument --params: no such file 'nope.yaml'")):
        with pytest.raises(SystemExit) as e:
            main(["study", *argv])
        assert e.value.code == 2 and words in capsys.readouterr().err


def test_an_error_while_running_is_not_a_usage_error(monkeypatch):
    from bildlab import runner

    def run_study(**kwargs):  # a ValueError from inside a run (a bug, a failing notebook) keeps its traceback
        raise ValueError("inside a notebook")

    monkeypatch.setattr(runner, "run_study", run_study)
    with pytest.raises(ValueError, match="inside a notebook"):
        main(["study", "--notebook", "rq1_small_writes_most"])


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the paper profile runs on this machine")
def test_the_paper_profile_on_a_machine_without_cuda_stops_at_once():
    import subprocess
    import time

    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "bildlab.cli", "study", "--profile", "paper"], capture_output=True,
                         text=True, timeout=60, cwd=Path(__file__).resolve().parent.parent)
    seconds = time.perf_counter() - t0
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.splitlines() == [
        f"bildlab study: error: device: 'cuda' was asked but this machine has no CUDA device (torch "
        f"{__import__('torch').__version__} sees none); run on a GPU box or pass -p device cpu"]
    assert seconds < 10, seconds


def run_bench(monkeypatch, *argv) -> int:
    monkeypatch.setattr(sys, "argv", [str(BENCH), *argv])
    with pytest.raises(SystemExit) as e:
        runpy.run_path(str(BENCH), run_name="__main__")
    return e.value.code


def test_bench_script_on_the_decoder_only_pair(monkeypatch, capsys):
    code = run_bench(monkeypatch, "--pair", "toy-mt-llama", "--n", "1", "--warmup", "1", "--max-new-tokens", "6",
                     "--methods", "hf_greedy,greedy,speculative")
    out = capsys.readouterr().out
    assert code == 0 and "lossless methods: identical outputs" in out
    assert "pair=toy-mt-llama inputs=1 (after 1 warm-up decodes)" in out and "dtype=float32" in out
    assert "bildlab greedy / HF greedy: " in out and "HF assisted" not in out


def test_bench_script_rejects_methods_without_the_reference(monkeypatch, capsys):
    assert run_bench(monkeypatch, "--methods", "greedy,speculative") == 2
    assert "--methods must include hf_greedy" in capsys.readouterr().err


def test_the_paper_size_benchmark_on_shrunken_configs(tmp_path, capsys):
    # the script at full size takes minutes (run once, its output committed); here with tiny layers and the real
    # vocabularies: every measurement is made and written, mT5 keeps its own output layer, T5 its tied one
    import importlib.util
    import json

    import transformers as tf

    from bildlab.models import cut_vocabulary

    spec = importlib.util.spec_from_file_location("paper_size", BENCH.parent / "paper_size.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for config in bench.CONFIGS.values():
        config.update(d_model=8, num_layers=1, num_heads=2, d_kv=4, d_ff=16)
    assert bench.main(["--steps", "1", "--out", str(tmp_path / "out.json")]) == 0
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["protocol"] == {"threads": 1, "repeats": 1, "warmup": 1}
    for family, rows, untied in (("t5", 32100, False), ("mt5", 250100, True)):
        r = doc["families"][family]
        tied = tf.T5ForConditionalGeneration(tf.T5Config(**bench.CONFIGS[f"{family}-large"], **bench.COMMON))
        cut_vocabulary(tied, rows)
        assert r["large"]["parameters"] == sum(p.numel() for p in tied.parameters()) + (rows * 8 if untied else 0)
        assert r["large"]["vocabulary_rows"] == r["small"]["vocabulary_rows"] == rows
        assert r["large"]["untied_output_layer"] is r["small"]["untied_output_layer"] is untied
        assert set(r["seconds"]) >= {"large step", "small step", "large verify 8", "large output layer",
                                     "large encoder 1024", "small encoder 64"}
        assert r["c"] > 0 and set(r["verify_over_step"]) == {"2", "4", "8"}
        # the derived numbers against formulas written here from the timings written out (rounded: 5 decimals of a
        # second, c to 4 decimals, ratios to 3): c and the verify ratios, Leviathan et al.'s expected speedup
        # (1 - a^(k+1)) / ((1 - a)(k c + 1)), and with the measured cost of verifying k + 1 tokens in place of one step
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
                assert row[f"k={k}"]["formula"] == pytest.approx(tokens / (k * c + 1), abs=0.006), (a, k)
                verify = r["verify_over_step"][str(k + 1)]
                assert row[f"k={k}"]["measured_verify"] == pytest.approx(tokens / (k * c + verify), abs=0.02), (a, k)
    assert "c = " in capsys.readouterr().out
