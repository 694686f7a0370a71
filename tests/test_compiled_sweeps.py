"""Sweeps timed with compiled steps (`compile=True`): registry keys (eager ones unchanged),
refusals, the study's section against a compiled baseline on made-up records, and (slow) a compiled
sweep's outputs equal to eager ones."""

import pytest

from bildlab import study
from bildlab.harness import evaluate as ev
from bildlab.harness.registry import Registry, digest
from bildlab.study import runner
from bildlab.study.params import ParameterError, check_params

REGISTRY = runner.ROOT / "results" / "toy"
# the speculative notebook's
SPEC = dict(split="test", limit=300, max_new_tokens=128, threads=1, registry=REGISTRY)


def test_eager_keys_are_those_of_the_committed_records():
    """compile=False (the default) finds the committed records, made before `compile` existed: byte
    for byte the same keys; compile=True is another key, the eager one plus compile: True."""
    grid = [{"method": "speculative", "k": 4}, {"method": "bild", "fallback": 0.5, "rollback": 3.0}]
    for found in (
        ev.lookup("toy-mt", grid, **SPEC),
        ev.lookup("toy-mt", grid, compile=False, **SPEC),
    ):
        assert found.todo == [] and [r["key"] for r in found.found] == found.keys
        assert all("compile" not in key for key in found.keys)
    compiled = ev.lookup("toy-mt", grid, compile=True, **SPEC)
    eager = ev.lookup("toy-mt", grid, **SPEC)
    assert [{**k, "compile": True} for k in eager.keys] == compiled.keys
    assert {digest(k) for k in compiled.keys}.isdisjoint(digest(k) for k in eager.keys)
    assert all(
        Registry(REGISTRY).get(k) is None or Registry(REGISTRY).get(k)["key"]["compile"] is True
        for k in compiled.keys
    )


@pytest.mark.parametrize(
    "run, error, words",
    [
        (dict(compile="yes"), TypeError, ["compile must be True or False", "'yes'"]),
        (dict(compile=1), TypeError, ["compile must be True or False"]),
        (dict(compile=True, method="hf_assisted"), ValueError, ["compile=True", "hf_assisted"]),
        (dict(compile=True, method="prompt-lookup"), ValueError, ["compile=True", "prompt-lookup"]),
        (dict(compile=True, draft="early-exit"), ValueError, ["compile=True", "early-exit"]),
    ],
)
def test_bad_compile_arguments_fail_before_any_model_loads(run, error, words):
    with pytest.raises(error) as e:
        ev.evaluate("toy-mt", check_only=True, registry=None, **run)
    assert all(w in str(e.value) for w in words)


def test_compile_parameter_is_checked():
    with pytest.raises(ParameterError, match="compile must be True or False; got 'no'"):
        check_params({"compile": "no"})
    check_params({"compile": True, "compiled_pairs": ["toy-mt"]})
    with pytest.raises(ParameterError, match="compiled_pairs: unknown pair 'toy-xx'"):
        check_params({"compiled_pairs": ["toy-mt", "toy-xx"]})
    with pytest.raises(TypeError, match="compile must be True or False"):
        study.against_compiled("toy-mt", compile="no")


def test_the_notebooks_rq5_choice_is_rq5s():
    """The speculative notebook times RQ5's choices with RQ5's own parameters (they cannot drift
    apart)."""
    spec, rq5 = (
        runner.notebook_defaults("speculative_pipeline"),
        runner.notebook_defaults("rq5_main_table"),
    )
    given = spec["compiled_rq5"]
    assert set(given["pairs"]) <= set(rq5["pairs"])
    for name, value in given.items():
        if name == "timing_limit":
            assert all(rq5["timing_limit"][p] == value[p] for p in given["pairs"])
        elif name != "pairs":
            assert value == rq5[name], name


def _record(pair, entry, speed, base, compiled=False, n=20):
    """A made-up record: `base` greedy seconds per example (varying), the method `speed` times
    faster on each."""
    e = {"method": "bild", "draft": "small", "fallback": 0.5, "rollback": 3.0, "k": 4, **entry}
    policy = (
        {"k": e["k"]}
        if e["method"] == "speculative"
        else {"fallback": e["fallback"], "rollback": e["rollback"]}
    )
    seconds = [base * (1 + i % 5 / 10) for i in range(n)]
    rows = [
        {
            "seconds": s / speed,
            "baseline_seconds": s,
            "hf_seconds": 0.1 * (1 + i % 5 / 10),
            "output": "",
            "stats": {},
        }
        for i, s in enumerate(seconds)
    ]
    s = {
        "metric": "bleu",
        "examples": n,
        "identical_count": n,
        "speedup": speed,
        "speedup_ci": [speed - 0.1, speed + 0.1],
        "score": 30.0,
        "score_ci": [29.0, 31.0],
        "delta": 0.0,
        "delta_ci": [0, 0],
    }
    return {
        "key": {
            "pair": pair,
            "task": "toy-mt",
            "split": "test",
            "limit": n,
            "method": e["method"],
            "draft": e["draft"],
            "policy": policy,
            **({"compile": True} if compiled else {}),
        },
        "summary": s,
        "examples": rows,
        "protocol": {"compile_seconds": 150.0} if compiled else {},
        "machines": [{"host": "vm", "platform": "Linux", "processor": "x", "device_name": "cpu"}],
    }


def test_against_a_compiled_baseline_answers_from_the_intervals(monkeypatch, tmp_path):
    """Eager rows beside compiled ones, each over its own mode's greedy; the answer says what the
    paired differences allow: speculative decoding loses its speedup over compiled greedy, BiLD
    keeps it."""
    calls = []

    def sweep(pair, grid, compile=False, **run):
        calls.append((pair, compile, len(grid)))
        speed = {
            ("speculative", False): 1.4,
            ("speculative", True): 1.0,
            ("bild", False): 1.6,
            ("bild", True): 1.6,
        }
        return [
            _record(pair, g, speed[g["method"], compile], 0.05 if compile else 0.1, compile)
            for g in grid
        ]

    monkeypatch.setattr(study.ev, "sweep", sweep)
    r = study.against_compiled("toy-mt", figures=tmp_path)
    assert calls == [("toy-mt", False, 2), ("toy-mt", True, 2)]
    assert list(r.table["policy"]) == ["speculative (k=4)", "bild (fb 0.5, rb 3)"]
    assert list(r.table["speedup, eager"]) == ["1.40x [1.30, 1.50]", "1.60x [1.50, 1.70]"]
    assert list(r.table["compiled greedy over transformers' greedy"]) == ["2.00x [2.00, 2.00]"] * 2
    assert list(r.table["eager greedy over transformers' greedy"]) == ["1.00x [1.00, 1.00]"] * 2
    assert list(r.table["same machine"]) == [True, True] and "another machine" not in r.account
    assert (
        "Over compiled greedy, 1 of 2 rows stay detectably faster than greedy; 1 of 2 speedups are detectably "
        "below their eager ones and 0 above (compiled − eager -0.40x to +0.00x). Greedy over transformers' greedy "
        "`generate` in the same runs: 1.00-1.00x eager, 2.00-2.00x compiled. On toy-mt"
    ) in r.account
    assert (
        "On toy-mt (N = 20), speculative (k=4): 1.40x [1.30, 1.50] eager, 1.00x [0.90, 1.10] compiled, not "
        "detectably faster than compiled greedy; detectably below its eager speedup (compiled − eager -0.400x "
        "[-0.400, -0.400], paired)."
    ) in r.account
    assert (
        "bild (fb 0.5, rb 3): 1.60x [1.50, 1.70] eager, 1.60x [1.50, 1.70] compiled, detectably faster than "
        "compiled greedy; no detectable difference from its eager speedup" in r.account
    )
    assert r.headline["toy-mt"]["bild (fb 0.5, rb 3)"]["difference"] == [0.0, [0.0, 0.0]]
    assert (tmp_path / "speculative_compiled.png").is_file()
    # the compiled rows timed on another machine than the eager ones: the answer says so
    moved = sweep

    def sweep(pair, grid, compile=False, **run):
        out = moved(pair, grid, compile=compile, **run)
        for rec in out if compile else []:
            rec["machines"] = [{**rec["machines"][0], "platform": "another kernel"}]
        return out

    monkeypatch.setattr(study.ev, "sweep", sweep)
    other = study.against_compiled("toy-mt", figures=tmp_path)
    assert list(other.table["same machine"]) == [False, False]
    assert (
        "The eager rows were timed in another run, on another machine, than the compiled ones."
        in other.account
    )
    assert "paired; the two were timed on different machines)" in other.account
    eager = study.against_compiled("toy-mt", compile=False, figures=tmp_path)  # nothing compiled
    assert calls[-1] == ("toy-mt", False, 2) and "speedup, compiled" not in eager.table
    assert eager.account.endswith("compile=False: the compiled rows were not run.")


def test_rq5s_choices_are_timed_on_rq5s_test_examples(monkeypatch, tmp_path):
    seen = []

    def sweep(pair, grid, compile=False, **run):
        seen.append((run["split"], run.get("limit"), run.get("timing_pass", 1), compile, grid))
        fast = {"fallback": 0.5, "rollback": 0.5, "draft": "small"}
        return [
            _record(pair, g, 2.0 if {k: g.get(k) for k in fast} == fast else 1.2, 0.1, compile)
            for g in grid
        ]

    monkeypatch.setattr(study.ev, "sweep", sweep)
    rq5 = dict(
        pairs=["toy-mt"],
        fallbacks=[0.5],
        rollbacks=[0.5, 3.0],
        tolerance=0.2,
        degraded_tolerance=1.2,
        val_split="validation",
        val_limit=None,
        val_timing_limit=200,
        limit=None,
        timing_limit=300,
    )
    study.against_compiled("toy-mt", rq5=rq5, figures=tmp_path, split="test", limit=300)
    # the choice, on validation
    assert seen[0][:3] == ("validation", None, 1) and len(seen[0][4]) == 4
    # speculative and BiLD, this run's
    assert [x[3] for x in seen[1:3]] == [False, True] and seen[1][1] == 300
    # every row lossless: the fastest of each small model, on RQ5's test examples in its first pass,
    # eager and compiled
    picked = [
        {"method": "bild", "fallback": 0.5, "rollback": 0.5, "draft": "small"},
        {"method": "bild", "fallback": 0.5, "rollback": 0.5, "draft": "aligned"},
    ]
    assert seen[3:] == [("test", None, 2, False, picked), ("test", None, 2, True, picked)]


@pytest.mark.slow
def test_a_compiled_sweep_gives_the_eager_outputs(fake_zoo, tmp_path):
    """Compiled steps timed on a sample, outputs in batches (eager) on every example: the timed
    batch-1 outputs are those, and every output is the eager sweep's; the compilation is reported,
    apart from the timed seconds."""
    run = dict(
        limit=4,
        timing_limit=2,
        max_new_tokens=8,
        warmup=1,
        progress=False,
        registry=tmp_path / "reg",
        hf_baseline=False,
    )
    grid = [{"method": "speculative", "k": 2}, {"method": "bild", "fallback": 0.5, "rollback": 1.0}]
    eager, compiled = ev.sweep("toy-mt", grid, **run), ev.sweep("toy-mt", grid, compile=True, **run)
    for e, c in zip(eager, compiled):
        assert c["key"] == {**e["key"], "compile": True}
        assert c["timed_identical"] == 2 and c["timed"] == e["timed"]
        assert [x["output"] for x in c["examples"]] == [x["output"] for x in e["examples"]]
        assert c["protocol"]["compile_seconds"] > 0 and "compile_seconds" not in e["protocol"]
    # speculative decoding: lossless over compiled greedy
    assert compiled[0]["summary"]["identical_count"] == 4
    # timed again on this machine (bildlab registry --retime): compiled again, its outputs kept, not
    # priced
    from bildlab.harness import calibrate
    from bildlab.harness.retime import retime

    reg = Registry(tmp_path / "reg")
    cal = calibrate.calibrate(
        "toy-mt",
        registry=reg,
        n=2,
        batch_n=2,
        batch_sizes=[2],
        ms=(1, 2, 3),
        prefixes=(0,),
        max_new_tokens=8,
        warmup=0,
    )
    out = retime(
        reg, only=lambda r: r["key"].get("compile"), progress=False, calibration={"toy-mt": cal}
    )
    assert out["retimed"] == 2 and out["differ"] == []
    for c in compiled:
        again = reg.get(c["key"])
        assert [x["output"] for x in again["examples"]] == [x["output"] for x in c["examples"]]
        assert again["protocol"]["compile_seconds"] > 0 and again["calibration"]["same_run"]
        assert again["summary"]["predicted_speedup"] is None and again["summary"]["speedup"] > 0
