"""The study layer: parameter checks before anything runs, the speculative-decoding formulas, figure files."""

import hashlib
import math

import pytest

from bildlab import plots, runner, study


@pytest.mark.parametrize("params, words", [
    ({"pair": "toy-xx"}, ["pair", "toy-xx", "toy-mt"]),
    ({"pairs": ["toy-mt", "nope"]}, ["pairs", "nope"]),
    ({"fallback": 1.5}, ["fallback", "[0, 1]"]),
    ({"fallbacks": [0.2, -0.1]}, ["fallbacks", "[0, 1]"]),
    ({"rollbacks": [2.0, -3.0]}, ["rollbacks", ">= 0"]),
    ({"ks": [1, 0]}, ["ks", ">= 1"]),
    ({"limit": 0}, ["limit"]),
    ({"split": "dev"}, ["split", "validation"]),
    ({"tolerance": -1}, ["tolerance"]),
    ({"temperature": 0}, ["temperature"]),
    ({"device": "tpu"}, ["device"]),
])
def test_bad_parameters_are_named(params, words):
    with pytest.raises(ValueError) as info:
        study.check_params(params)
    for w in words:
        assert w in str(info.value)


def test_unknown_parameter_names_are_rejected():
    with pytest.raises(ValueError, match="unknown parameter.*fallbak.*this notebook takes"):
        study.check_params({"fallbak": 0.5}, allowed={"fallback", "rollback"})
    study.check_params({"fallback": 0.5, "rollback": float("inf")}, allowed={"fallback", "rollback"})


def test_run_study_checks_every_notebook_before_running_any(monkeypatch, tmp_path):
    import papermill

    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: pytest.fail("a notebook ran"))
    with pytest.raises(ValueError, match="fallback"):
        runner.run_study(overrides={"fallback": 3.0}, notebooks=["rq1_small_writes_most"], out=tmp_path,
                         progress=False)
    with pytest.raises(ValueError, match="unknown notebook 'rq9'"):
        runner.run_study(notebooks=["rq9"], out=tmp_path, progress=False)
    with pytest.raises(ValueError, match="pairs: unknown pair 'toy-zz'"):
        runner.run_study(overrides={"pairs": ["toy-zz"]}, notebooks=["rq5_main_table"], out=tmp_path,
                         progress=False)
    assert not list(tmp_path.iterdir())


def test_run_study_stores_toy_notebooks_in_place_without_clock_readings(monkeypatch, tmp_path):
    import nbformat
    import papermill

    def fake_execute(src, dst, **kwargs):  # what papermill writes: the notebook plus its clock readings
        nb = nbformat.read(src, as_version=4)
        nb.metadata["papermill"] = {"start_time": "t0", "end_time": "t1", "duration": 1.5, "parameters": {}}
        for cell in nb.cells:
            cell.metadata["papermill"] = {"start_time": "t0", "duration": 0.1, "status": "completed"}
            cell.metadata["execution"] = {"iopub.execute_input": "t0"}
        nbformat.write(nb, dst)

    monkeypatch.setattr(papermill, "execute_notebook", fake_execute)
    monkeypatch.setattr(runner, "NOTEBOOKS", tmp_path)
    monkeypatch.setattr(runner, "update_readme", lambda: None)
    source = nbformat.read(runner.ROOT / "notebooks" / "rq1_small_writes_most.ipynb", as_version=4)
    nbformat.write(source, tmp_path / "rq1_small_writes_most.ipynb")
    written = runner.run_study(progress=False)
    assert written == [tmp_path / "rq1_small_writes_most.ipynb"]  # toy with stored parameters: back in place
    nb = nbformat.read(written[0], as_version=4)
    assert nb.metadata["papermill"] == {"parameters": {}}
    assert all("execution" not in c.metadata and not c.metadata.get("papermill") for c in nb.cells)
    assert [f.name for f in tmp_path.iterdir()] == ["rq1_small_writes_most.ipynb"]  # no temporary left behind
    monkeypatch.setattr(runner, "ROOT", tmp_path)
    assert runner.run_study(overrides={"limit": 2}, progress=False) == [tmp_path / "runs" / "toy" /
                                                                         "rq1_small_writes_most.ipynb"]


def test_every_notebook_has_one_parameters_cell_and_paper_params_are_valid():
    import nbformat
    import papermill

    for name in runner.notebook_names():
        book = nbformat.read(runner.NOTEBOOKS / f"{name}.ipynb", as_version=4)
        tagged = [c for c in book.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, name
        assert book.cells[0].cell_type == "markdown" and book.cells[0].source.startswith("# ")
        allowed = set(papermill.inspect_notebook(str(runner.NOTEBOOKS / f"{name}.ipynb")))
        study.check_params(runner.profile_params("paper", name), allowed)


def test_expected_speedup_formula():
    assert study.expected_speedup(0.0, 4, 0.1) == pytest.approx(1 / 1.4)
    assert study.expected_speedup(1.0, 4, 0.0) == 5
    assert study.expected_speedup(0.999999, 3, 0.2) == pytest.approx(4 / 1.6, rel=1e-4)
    a, k, c = 0.8, 4, 0.05
    assert study.expected_speedup(a, k, c) == pytest.approx((1 - a ** 5) / ((1 - a) * (k * c + 1)))
    assert study.expected_tokens_per_call(0.8, 4) == pytest.approx(1 + 0.8 + 0.64 + 0.512 + 0.4096)


def test_acceptance_estimate_recovers_a_geometric_rate():
    import random

    rng, a, k, rows = random.Random(0), 0.7, 4, []
    for _ in range(4000):
        n = 0
        while n < k and rng.random() < a:
            n += 1
        rows.append({"stats": {"accepted": n, "rollbacks": int(n < k)}})
    assert study.acceptance({"examples": rows}) == pytest.approx(a, abs=0.02)


def test_best_within_picks_the_fastest_acceptable():
    def rec(score, speed):
        return {"summary": {"score": score, "baseline_score": 30.0, "speedup": speed}}

    records = [rec(30.1, 1.2), rec(29.5, 1.8), rec(28.0, 2.5)]
    assert study.best_within(records, 0.2)["summary"]["speedup"] == 1.2
    assert study.best_within(records, 1.0)["summary"]["speedup"] == 1.8
    assert study.best_within([rec(20, 3.0)], 1.0) is None


def test_answers_say_none_when_no_policy_is_within_the_tolerance(monkeypatch, tmp_path):
    def sweep(pair, grid, *, draft="small", **run):  # every policy loses 5 points, except the early exit's fastest
        return [{"summary": {"metric": "bleu", "score": 30.0 if draft == "early-exit" and i == 0 else 25.0,
                             "baseline_score": 30.0, "speedup": 1.5 + i, "small_share": 0.8,
                             "large_calls_per_token": 0.2, "mean_accepted": 3.0},
                 "key": {"policy": g, "method": "bild", "draft": draft}} for i, g in enumerate(grid)]

    monkeypatch.setattr(study.ev, "sweep", sweep)
    grid = dict(fallbacks=[0.5, 0.9], rollbacks=[1.0], figures=str(tmp_path))
    rq4 = study.rq4("toy-mt", **grid).answer
    assert "early-exit draft reaches 1.50x and the separate small model none" in rq4 and "early exit is the" in rq4
    monkeypatch.setattr(study.ev, "sweep", lambda pair, grid, draft="small", **run: sweep(pair, grid, draft="small"))
    for answer in (study.rq2("toy-mt", **grid).answer, study.rq3("toy-mt", **grid).answer,
                   study.rq4("toy-mt", **grid).answer, study.rq5(("toy-mt",), **grid).answer):
        assert "nan" not in answer
    assert "neither draft" in study.rq4("toy-mt", **grid).answer
    assert "no BiLD policy of the sweep stays within 1.0 point" in study.rq5(("toy-mt",), **grid).answer


def test_figures_are_deterministic_and_written_whole(tmp_path):
    def draw():
        return plots.speed_quality({"a": [(1.0, 30.0), (1.5, 29.0)]}, metric="bleu", baseline=30.0,
                                   front=[(1.0, 30.0), (1.5, 29.0)], title="t")

    first = plots.save(draw(), "fig", tmp_path)
    digests = [hashlib.sha256(p.read_bytes()).hexdigest() for p in first]
    second = plots.save(draw(), "fig", tmp_path)
    assert [hashlib.sha256(p.read_bytes()).hexdigest() for p in second] == digests
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.pdf", "fig.png"]
    assert b"CreationDate" not in (tmp_path / "fig.pdf").read_bytes()
    assert not math.isnan(study.expected_speedup(0.5, 2, 0.1))
