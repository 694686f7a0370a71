"""The evaluation harness and its results registry, on a tiny fake zoo."""

import json

import pytest

from bildlab import evaluate as ev

FAST = dict(limit=6, max_new_tokens=8, warmup=1, progress=False)


def test_a_run_is_recorded_and_reused(fake_zoo, tmp_path, monkeypatch):
    reg = tmp_path / "results"
    run = ev.evaluate("toy-mt", method="speculative", k=3, registry=reg, **FAST)
    s = run["summary"]
    assert s["examples"] == 6 and s["metric"] == "bleu"
    assert s["identical"] == 1.0  # greedy speculative decoding equals the HF greedy baseline
    assert s["tokens"] == sum(r["tokens"] for r in run["examples"]) > 0
    assert s["small_share"] == pytest.approx(sum(r["stats"]["small_tokens"] for r in run["examples"]) / s["tokens"],
                                             abs=1e-4)
    assert s["mean_accepted"] == pytest.approx(s["tokens"] / sum(r["stats"]["large_calls"] for r in run["examples"]),
                                               abs=1e-4)
    assert s["speedup"] > 0 and s["baseline_score"] == s["score"]
    files = list(reg.rglob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["key"]["policy"] == {"k": 3}

    # the rerun loads the record: no model is touched
    monkeypatch.setattr(ev, "_pair", lambda *a: pytest.fail("the rerun recomputed"))
    assert ev.evaluate("toy-mt", method="speculative", k=3, registry=reg, **FAST) == run


def test_the_key_separates_runs_and_ignores_unused_parameters(fake_zoo, tmp_path):
    reg = ev.Registry(tmp_path / "results")
    key = lambda **kw: ev.run_key("toy-mt", "toy-mt", kw.pop("method", "bild"), "test", 6, "small", "hf_greedy", 0,  # noqa: E731
                                  8, ev.policy_of(kw.pop("method2", "bild"), 4, kw.get("fb", 0.6), 5.0, 10), "cpu")
    assert reg.path(key(fb=0.5)) != reg.path(key(fb=0.6))
    assert ev.policy_of("speculative", 4, 0.1, 2.0, 3) == ev.policy_of("speculative", 4, 0.9, 7.0, 5) == {"k": 4}
    assert ev.policy_of("greedy", 2, 0.1, 2.0, 3) == {}
    k = key()
    for field in ("pair", "task", "split", "limit", "method", "policy", "seed", "bildlab", "torch", "transformers",
                  "models", "draft", "baseline", "max_new_tokens", "device"):
        assert field in k


def test_corrupt_records_are_reported_and_recomputed(fake_zoo, tmp_path):
    reg = tmp_path / "results"
    first = ev.evaluate("toy-mt", method="bild", registry=reg, **FAST)
    (path,) = reg.rglob("*.json")
    path.write_text(path.read_text()[:100])  # truncated
    with pytest.warns(UserWarning, match="corrupt results record"):
        again = ev.evaluate("toy-mt", method="bild", registry=reg, **FAST)
    assert again["summary"]["score"] == first["summary"]["score"]
    assert json.loads(path.read_text())["summary"]  # rewritten whole


def test_force_recomputes(fake_zoo, tmp_path):
    reg = tmp_path / "results"
    first = ev.evaluate("toy-mt", method="greedy", registry=reg, **FAST)
    second = ev.evaluate("toy-mt", method="greedy", registry=reg, force=True, **FAST)
    assert second["examples"][0]["seconds"] != first["examples"][0]["seconds"]
    assert [r["output"] for r in second["examples"]] == [r["output"] for r in first["examples"]]


def test_an_interrupted_sweep_leaves_no_partial_record_and_resumes(fake_zoo, tmp_path, monkeypatch):
    reg = tmp_path / "results"
    grid = [{"fallback": 0.2}, {"fallback": 0.5}, {"fallback": 0.8}]
    real = ev.generate
    calls = {"n": 0}

    def flaky(*a, **kw):
        calls["n"] += 1
        if kw.get("fallback") == 0.8 and calls["n"] > 3:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(ev, "generate", flaky)
    with pytest.raises(KeyboardInterrupt):
        ev.sweep("toy-mt", grid, registry=reg, progress=False, **{k: v for k, v in FAST.items() if k != "progress"})
    assert len(list(reg.rglob("*.json"))) == 2 and not list(reg.rglob("*.tmp-*"))
    monkeypatch.setattr(ev, "generate", real)
    runs = ev.sweep("toy-mt", grid, registry=reg, progress=False, **{k: v for k, v in FAST.items() if k != "progress"})
    assert [r["key"]["policy"]["fallback"] for r in runs] == [0.2, 0.5, 0.8]
    assert len(list(reg.rglob("*.json"))) == 3


@pytest.mark.parametrize("kwargs, words", [
    (dict(pair="toy-xx"), ["pair", "toy-mt"]),
    (dict(pair="toy-mt", task="toy-zz"), ["task", "toy-sum"]),
    (dict(pair="toy-mt", method="beam"), ["method", "'bild'"]),
    (dict(pair="toy-mt", fallback=1.2), ["fallback", "[0, 1]"]),
    (dict(pair="toy-mt", rollback=-2.0), ["rollback", ">= 0"]),
    (dict(pair="toy-mt", split="dev"), ["split", "validation"]),
    (dict(pair="toy-mt", limit=0), ["limit"]),
    (dict(pair="toy-mt", draft="tiny"), ["draft", "early-exit"]),
    (dict(pair="toy-mt", baseline="beam"), ["baseline", "hf_greedy"]),
])
def test_bad_arguments_fail_before_any_model_loads(monkeypatch, tmp_path, kwargs, words):
    monkeypatch.setattr(ev, "_pair", lambda *a: pytest.fail("a model was loaded"))
    with pytest.raises(ValueError) as info:
        ev.evaluate(registry=tmp_path, **kwargs)
    for w in words:
        assert w in str(info.value)


def test_a_bad_sweep_entry_fails_before_anything_runs(monkeypatch, tmp_path):
    monkeypatch.setattr(ev, "_pair", lambda *a: pytest.fail("a model was loaded"))
    with pytest.raises(ValueError, match="fallback"):
        ev.sweep("toy-mt", [{"fallback": 0.5}, {"fallback": 7.0}], registry=tmp_path, progress=False)


def test_pareto_front():
    def rec(speed, score):
        return {"summary": {"speedup": speed, "score": score}}

    records = [rec(1.0, 30), rec(1.5, 29), rec(1.4, 28), rec(2.0, 25), rec(2.0, 24), rec(0.9, 30)]
    assert [(r["summary"]["speedup"], r["summary"]["score"]) for r in ev.pareto(records)] == [
        (1.0, 30), (1.5, 29), (2.0, 25)]
