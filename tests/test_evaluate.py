"""The evaluation harness and its results registry, on a tiny fake zoo."""

import json

import pytest

from bildlab.engine.decoding import truncated
from bildlab.harness import evaluate as ev
from bildlab.harness import shard
from bildlab.measure import summary as sm

FAST = dict(limit=6, max_new_tokens=8, warmup=1, progress=False)


def test_a_run_is_recorded_and_reused(fake_zoo, tmp_path, monkeypatch):
    reg = tmp_path / "results"
    run = ev.evaluate("toy-mt", method="speculative", k=3, registry=reg, **FAST)
    s = run["summary"]
    assert s["examples"] == 6 and s["metric"] == "bleu"
    # greedy speculative decoding equals vanilla greedy
    assert s["identical"] == 1.0 and s["identical_count"] == 6
    assert s["hf_identical"] == 1.0  # ... and the vanilla loop equals transformers' greedy generate
    assert s["delta"] == 0 and s["delta_ci"] == [0, 0]
    assert s["tokens"] == sum(r["tokens"] for r in run["examples"]) > 0
    assert s["small_share"] == pytest.approx(
        sum(r["stats"]["small_tokens"] for r in run["examples"]) / s["tokens"], abs=1e-4
    )
    assert s["mean_accepted"] == pytest.approx(
        s["tokens"] / sum(r["stats"]["large_calls"] for r in run["examples"]), abs=1e-4
    )
    assert s["speedup"] == pytest.approx(
        sum(r["baseline_seconds"] for r in run["examples"])
        / sum(r["seconds"] for r in run["examples"]),
        rel=1e-3,
    )
    assert s["speedup_ci"][0] <= s["speedup"] <= s["speedup_ci"][1]
    assert s["speedup_hf"] == pytest.approx(
        sum(r["hf_seconds"] for r in run["examples"]) / sum(r["seconds"] for r in run["examples"]),
        rel=1e-3,
    )
    assert run["key"]["baseline"] == "greedy" and run["key"]["secondary"] == "hf_greedy"
    assert run["protocol"]["threads"] == 1 and run["protocol"]["interleaved_with"] == [
        "greedy",
        "hf_greedy",
        "policy0",
    ]
    files = ev.Registry(reg).files()
    assert len(files) == 1 and json.loads(files[0].read_text())["key"]["policy"] == {"k": 3}

    # the rerun loads the record: no model is touched
    monkeypatch.setattr(shard, "load", lambda *a: pytest.fail("the rerun recomputed"))
    assert ev.evaluate("toy-mt", method="speculative", k=3, registry=reg, **FAST) == run


def _count_decodes(monkeypatch):
    """Count generate calls by kind: the vanilla large model alone, transformers' generate, the
    policies."""
    calls = {"vanilla": 0, "hf": 0, "policy": 0}
    real, real_hf = shard.generate, shard.hf_generate

    def counted(model, x, **kw):
        calls[
            "vanilla" if kw.get("method") == "greedy" and kw.get("small") is None else "policy"
        ] += 1
        return real(model, x, **kw)

    def counted_hf(*a, **kw):
        calls["hf"] += 1
        return real_hf(*a, **kw)

    monkeypatch.setattr(shard, "generate", counted)
    monkeypatch.setattr(shard, "hf_generate", counted_hf)
    return calls


def test_a_sweep_decodes_the_vanilla_model_once_per_example(fake_zoo, tmp_path, monkeypatch):
    calls = _count_decodes(monkeypatch)
    grid = [{"fallback": f, "rollback": r} for f in (0.3, 0.6, 0.9) for r in (1.0, 4.0)]
    runs = ev.sweep("toy-mt", grid, registry=tmp_path, **{**FAST, "warmup": 0})
    assert len(runs) == 6 and calls == {"vanilla": 6, "hf": 6, "policy": 36}
    vanilla = [[e["baseline_output"] for e in r["examples"]] for r in runs]
    assert all(v == vanilla[0] for v in vanilla)  # one vanilla run, shared by every policy
    assert len({r["protocol"]["sweep"] for r in runs}) == 1

    # a later sweep with one new policy reruns only that one, interleaved with a fresh vanilla run
    calls.update(vanilla=0, hf=0, policy=0)
    more = ev.sweep(
        "toy-mt",
        grid + [{"fallback": 0.5, "rollback": 2.0}],
        registry=tmp_path,
        **{**FAST, "warmup": 0},
    )
    assert more[:6] == runs and calls == {"vanilla": 6, "hf": 6, "policy": 6}
    assert [e["baseline_output"] for e in more[6]["examples"]] == vanilla[0]

    # without the secondary denominator a sweep of G policies costs G + 1 decodes per example
    calls.update(vanilla=0, hf=0, policy=0)
    lone = ev.sweep(
        "toy-mt", grid[:2], registry=tmp_path, hf_baseline=False, **{**FAST, "warmup": 0}
    )
    assert (
        calls == {"vanilla": 6, "hf": 0, "policy": 12} and lone[0]["summary"]["speedup_hf"] is None
    )


def test_warmup_decodes_are_not_timed_and_threads_are_recorded(fake_zoo, tmp_path, monkeypatch):
    calls = _count_decodes(monkeypatch)
    run = ev.evaluate(
        "toy-mt", method="bild", registry=tmp_path, threads=2, **{**FAST, "warmup": 2}
    )
    assert calls == {"vanilla": 8, "hf": 8, "policy": 8} and len(run["examples"]) == 6
    assert run["key"]["threads"] == 2 and run["protocol"]["warmup"] == 2


def test_the_key_separates_runs_and_ignores_unused_parameters(fake_zoo):
    def key(entry, **kw):
        run = dict(
            seed=0,
            max_new_tokens=8,
            device="cpu",
            threads=1,
            repeats=1,
            hf_baseline=True,
            timing_pass=1,
        )
        return ev.run_key("toy-mt", "toy-mt", "test", 6, entry, **{**run, **kw})

    reg = ev.Registry("results")
    assert reg.path(key({"fallback": 0.5})) != reg.path(key({"fallback": 0.6}))
    assert reg.path(key({})) != reg.path(key({}, timing_pass=2)) != reg.path(key({}, threads=2))
    assert reg.path(key({})) != reg.path(key({}, repeats=3))
    assert (
        ev.policy_of("speculative", 4, 0.1, 2.0, 3)
        == ev.policy_of("speculative", 4, 0.9, 7.0, 5)
        == {"k": 4}
    )
    assert ev.policy_of("greedy", 2, 0.1, 2.0, 3) == {}
    k = key({})
    # library versions are provenance, in the record
    assert not {"bildlab", "torch", "transformers"} & set(k)
    for field in (
        "pair",
        "task",
        "split",
        "limit",
        "method",
        "policy",
        "seed",
        "data",
        "models",
        "draft",
        "baseline",
        "secondary",
        "max_new_tokens",
        "device",
        "threads",
        "repeats",
        "timing_pass",
    ):
        assert field in k


def test_corrupt_records_are_reported_and_recomputed(fake_zoo, tmp_path):
    reg = tmp_path / "results"
    first = ev.evaluate("toy-mt", method="bild", registry=reg, **FAST)
    (path,) = ev.Registry(reg).files()
    path.write_text(path.read_text()[:100])  # truncated
    with pytest.warns(UserWarning, match="corrupt results record"):
        again = ev.evaluate("toy-mt", method="bild", registry=reg, **FAST)
    assert again["summary"]["score"] == first["summary"]["score"]
    assert json.loads(path.read_text())["summary"]  # rewritten whole


def test_force_recomputes(fake_zoo, tmp_path, monkeypatch):
    reg = tmp_path / "results"
    first = ev.evaluate("toy-mt", method="greedy", registry=reg, **FAST)
    (path,) = ev.Registry(reg).files()
    # a mark only a rewrite removes
    path.write_text(json.dumps({**json.loads(path.read_text()), "planted": True}))
    calls = _count_decodes(monkeypatch)
    # without force: read back
    assert ev.evaluate("toy-mt", method="greedy", registry=reg, **FAST)["planted"]
    assert calls == {"vanilla": 0, "hf": 0, "policy": 0}
    second = ev.evaluate("toy-mt", method="greedy", registry=reg, force=True, **FAST)
    # decoded again: one warm-up and 6 examples, each by the vanilla loop, the policy (greedy: the
    # vanilla loop too) and transformers' generate
    assert calls == {"vanilla": 14, "hf": 7, "policy": 0}, calls
    # the record was rewritten
    assert "planted" not in second and "planted" not in json.loads(path.read_text())
    # the new outputs are transformers' greedy outputs (not only equal to the first run's)
    assert second["summary"]["hf_identical"] == 1.0
    assert [r["output"] for r in second["examples"]] == [r["output"] for r in first["examples"]]


def test_an_interrupted_sweep_leaves_no_record_and_resumes_from_its_checkpoint(
    fake_zoo, tmp_path, monkeypatch
):
    reg = tmp_path / "results"
    grid = [{"fallback": 0.2}, {"fallback": 0.5}, {"fallback": 0.8}]
    monkeypatch.setattr(ev, "CHECKPOINT_SECONDS", 0)
    real = shard.generate
    calls = {"n": 0}

    def flaky(*a, **kw):
        if (kw["policy"].fallback if "policy" in kw else kw.get("fallback")) == 0.8:
            calls["n"] += 1
            if calls["n"] == 5:  # the 0.8 policy on the 4th example (after one warm-up decode)
                raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(shard, "generate", flaky)
    with pytest.raises(KeyboardInterrupt):
        ev.sweep("toy-mt", grid, registry=reg, **FAST)
    assert not ev.Registry(reg).files() and not list(reg.rglob("*.tmp-*"))
    (partial,) = reg.rglob(".partial/*.json")
    assert sorted(json.loads(partial.read_text())["rows"]) == ["0", "1", "2"]

    counted = _count_decodes(monkeypatch)
    monkeypatch.setattr(shard, "generate", real)
    runs = ev.sweep("toy-mt", grid, registry=reg, **{**FAST, "warmup": 0})
    assert [r["key"]["policy"]["fallback"] for r in runs] == [0.2, 0.5, 0.8]
    assert counted["hf"] == 3  # examples 3, 4, 5 only
    assert all(len(r["examples"]) == 6 for r in runs)
    assert len(ev.Registry(reg).files()) == 3 and not (reg / ".partial").exists()
    fresh = ev.sweep("toy-mt", grid, registry=tmp_path / "fresh", **FAST)
    assert [[e["output"] for e in r["examples"]] for r in fresh] == [
        [e["output"] for e in r["examples"]] for r in runs
    ]


def test_outputs_that_hit_the_length_limit_are_counted(fake_zoo, tmp_path):
    assert truncated([5, 6], 2, frozenset({2})) and not truncated([5, 2], 2, frozenset({2}))
    assert not truncated([5], 2, frozenset({2}))
    run = ev.evaluate("toy-mt", method="bild", registry=tmp_path, **{**FAST, "max_new_tokens": 2})
    s, rows = run["summary"], run["examples"]
    assert s["baseline_truncated"] == sum(e["baseline_truncated"] for e in rows) > 0
    assert all(e["baseline_tokens"] == 2 for e in rows if e["baseline_truncated"])
    assert s["examples_without_truncated"] == sum(
        not (e["truncated"] or e["baseline_truncated"]) for e in rows
    )


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(pair="toy-xx"), ["pair", "toy-mt"]),
        (dict(pair="toy-mt", task="toy-zz"), ["task", "toy-sum"]),
        (dict(pair="toy-mt", method="beam"), ["method", "'bild'"]),
        (dict(pair="toy-mt", method="sample"), ["sampling baseline", "do_sample=True"]),
        (dict(pair="toy-mt", fallback=1.2), ["fallback", "[0, 1]"]),
        (dict(pair="toy-mt", rollback=-2.0), ["rollback", ">= 0"]),
        (dict(pair="toy-mt", split="dev"), ["split", "validation"]),
        (dict(pair="toy-mt", limit=0), ["limit"]),
        (dict(pair="toy-mt", limit={"toy-mt": 0}), ["limit", "per pair"]),
        (
            dict(pair="toy-mt", limit={"toy-sum": 3}),
            ["limit", "no value for pair 'toy-mt'", "toy-sum"],
        ),
        (dict(pair="toy-mt", draft="tiny"), ["draft", "early-exit"]),
        (dict(pair="toy-mt", threads=0), ["threads", ">= 1"]),
        (dict(pair="toy-mt", repeats=0), ["repeats", ">= 1"]),
        (dict(pair="toy-mt", timing_pass=0), ["timing_pass", ">= 1"]),
        (dict(pair="toy-mt", method="bild", do_sample=True), ["do_sample", "speculative"]),
    ],
)
def test_bad_arguments_fail_before_any_model_loads(monkeypatch, tmp_path, kwargs, words):
    monkeypatch.setattr(shard, "load", lambda *a: pytest.fail("a model was loaded"))
    with pytest.raises(ValueError) as info:
        ev.evaluate(registry=tmp_path, **kwargs)
    for w in words:
        assert w in str(info.value)


def test_a_bad_sweep_entry_fails_before_anything_runs(monkeypatch, tmp_path):
    monkeypatch.setattr(shard, "load", lambda *a: pytest.fail("a model was loaded"))
    with pytest.raises(ValueError, match="fallback"):
        ev.sweep(
            "toy-mt", [{"fallback": 0.5}, {"fallback": 7.0}], registry=tmp_path, progress=False
        )
    with pytest.raises(ValueError, match="unknown policy argument.*fallbak"):
        ev.sweep("toy-mt", [{"fallbak": 0.5}], registry=tmp_path, progress=False)


def test_transformers_assisted_generation_is_a_policy_of_the_sweep(fake_zoo, tmp_path):
    runs = ev.sweep(
        "toy-mt",
        [{"method": "hf_assisted", "k": 3}, {"method": "speculative", "k": 3}],
        registry=tmp_path,
        **FAST,
    )
    assert runs[0]["key"]["policy"] == {"k": 3} and runs[0]["key"]["method"] == "hf_assisted"
    # both lossless against the same vanilla run
    assert all(r["summary"]["identical_count"] == 6 for r in runs)
    assert runs[0]["protocol"]["sweep"] == runs[1]["protocol"]["sweep"]


def test_plan_counts_the_decodes_still_to_run_and_runs_nothing(fake_zoo, tmp_path, monkeypatch):
    from bildlab.study import plan

    grid = [{"fallback": 0.3}, {"fallback": 0.6}, {"method": "small"}]
    real_pair = shard.load
    monkeypatch.setattr(shard, "load", lambda *a: pytest.fail("planning loaded a model"))
    planner = plan.Planner()
    records = planner.sweep("toy-mt", grid, registry=tmp_path / "reg", **FAST)
    assert planner.sweeps == [
        {
            "pair": "toy-mt",
            "task": "toy-mt",
            "split": "test",
            "examples": 6,
            "policies": 3,
            "to_run": 3,
            "decodes": 6 * (3 + 2),
            "timed": 6,
            "outputs": 0,
            "output_units": 0.0,
            "prices": {
                "seconds": plan.SECONDS_PER_DECODE["toy-mt"],
                "c": plan.COST_RATIO["toy-mt"],
                "gain": plan.BATCH_GAIN["toy-mt"],
                # the policies,
                "source": None,
            },
            "compile_seconds": 0.0,
        }
    ]
    # the vanilla loop and HF generate, on every example
    assert all(r.get("placeholder") for r in records) and not (tmp_path / "reg").exists()
    monkeypatch.setattr(shard, "load", real_pair)
    ev.sweep("toy-mt", grid[:2], registry=tmp_path / "reg", **FAST)
    monkeypatch.setattr(shard, "load", lambda *a: pytest.fail("planning loaded a model"))
    planner = plan.Planner()
    planner.sweep("toy-mt", grid, registry=tmp_path / "reg", **FAST)
    # only the small model is left
    assert planner.sweeps[0]["to_run"] == 1 and planner.sweeps[0]["decodes"] == 6 * 3


def test_the_plan_prices_compiling_a_compiled_sweep(fake_zoo, tmp_path):
    from bildlab.study import plan

    grid = [{"method": "speculative", "k": 3}]
    planner = plan.Planner()
    planner.sweep("toy-mt", grid, registry=tmp_path / "reg", **FAST)
    planner.sweep("toy-mt", grid, registry=tmp_path / "reg", compile=True, **FAST)
    planner.sweep("toy-sum", grid, registry=tmp_path / "reg", compile=True, **FAST)
    eager, compiled, other = planner.sweeps
    assert eager["compile_seconds"] == 0.0 and eager["decodes"] == compiled["decodes"]
    # no compiled record of the pair yet
    assert compiled["compile_seconds"] == plan.COMPILE_SECONDS["toy-mt"]
    assert other["compile_seconds"] == plan.COMPILE_ELSE
    # a compiled record in the registry (made up from an eager one): its compilation prices the next
    from bildlab.harness.registry import Registry

    made = ev.sweep("toy-mt", grid, registry=tmp_path / "reg", **FAST)[0]
    for seconds in (12.5, 3.0):  # the longest: a shard's first compilation
        made["key"] = {**made["key"], "compile": True, "seed": int(seconds)}
        made["protocol"] = {**made["protocol"], "compile_seconds": seconds}
        Registry(tmp_path / "reg").put(made["key"], made)
    again = plan.Planner()
    again.sweep(
        "toy-mt",
        [{"method": "speculative", "k": 2}],
        registry=tmp_path / "reg",
        compile=True,
        **FAST,
    )
    assert again.sweeps[0]["compile_seconds"] == 12.5


def test_two_plans_and_a_sweep_in_one_process_do_not_interfere(fake_zoo, tmp_path, monkeypatch):
    from bildlab.study import plan

    grid = [{"fallback": 0.3}, {"fallback": 0.6}]
    one, two = plan.Planner(), plan.Planner()
    one.sweep("toy-mt", grid, registry=tmp_path / "reg", **FAST)
    # a real sweep between the two plans
    made = ev.sweep("toy-mt", grid[:1], registry=tmp_path / "reg", **FAST)
    assert not any(r.get("placeholder") for r in made) and len(made[0]["examples"]) == 6
    two.sweep("toy-mt", grid, registry=tmp_path / "reg", **FAST)
    # counted by this plan already: nothing new
    one.sweep("toy-mt", grid, registry=tmp_path / "reg", **FAST)
    assert [s["to_run"] for s in one.sweeps] == [2, 0] and [s["to_run"] for s in two.sweeps] == [1]


def test_the_papers_rollback_rule_is_a_policy_option_keyed_only_when_chosen(fake_zoo, tmp_path):
    assert ev.policy_of("bild", 4, 0.5, 2.0, 10) == ev.policy_of(
        "bild", 4, 0.5, 2.0, 10, rollback_rule="first-differing"
    )
    assert (
        ev.policy_of("bild", 4, 0.5, 2.0, 10, rollback_rule="first-above")["rollback_rule"]
        == "first-above"
    )
    runs = ev.sweep(
        "toy-mt",
        [{"rollback": 0.0}, {"rollback": 0.0, "rollback_rule": "first-above"}],
        registry=tmp_path,
        **FAST,
    )
    assert (
        runs[0]["key"] != runs[1]["key"]
        and runs[1]["key"]["policy"]["rollback_rule"] == "first-above"
    )
    with pytest.raises(ValueError, match="rollback_rule must be one of"):
        ev.sweep("toy-mt", [{"rollback_rule": "last"}], registry=tmp_path, **FAST)


def test_timing_limit_scores_every_example_from_batched_outputs_and_times_a_sample(
    fake_zoo, tmp_path, monkeypatch
):
    grid = [
        {"fallback": 0.3, "rollback": 2.0},
        {"method": "speculative", "k": 3},
        {"method": "small"},
    ]
    # every example timed at batch 1
    whole = ev.sweep("toy-mt", grid, registry=tmp_path / "whole", **FAST)
    calls = _count_decodes(monkeypatch)
    runs = ev.sweep(
        "toy-mt", grid, registry=tmp_path / "sample", timing_limit=3, batch_size=4, **FAST
    )
    # batch 1 on the sample only (+ one warm-up each): vanilla and the small model alone, HF
    # generate, two policies
    assert calls == {"vanilla": 2 * (3 + 1), "hf": 3 + 1, "policy": 2 * (3 + 1)}
    timed = ev.timed_indices(6, 3, 0)
    # seeded
    assert len(timed) == 3 and timed == sorted(timed) and timed == ev.timed_indices(6, 3, 0)
    for run, full in zip(runs, whole):
        # other keys stay as they were
        assert run["key"]["timing_limit"] == 3 and "timing_limit" not in full["key"]
        # batch-1 outputs equal the batched ones
        assert run["timed"] == timed and run["timed_identical"] == 3
        # exact, all 6
        assert [e["output"] for e in run["examples"]] == [e["output"] for e in full["examples"]]
        s = run["summary"]
        assert (
            s["examples"] == 6
            and s["timed_examples"] == 3
            and s["score"] == full["summary"]["score"]
        )
        assert [i for i, e in enumerate(run["examples"]) if e["seconds"] is not None] == timed
        assert s["speedup"] == pytest.approx(
            sum(run["examples"][i]["baseline_seconds"] for i in timed)
            / sum(run["examples"][i]["seconds"] for i in timed),
            rel=1e-3,
        )
    c = sm.compare(runs[0], runs[1])
    assert c["n"] == 3 and c["delta"] == pytest.approx(
        runs[0]["summary"]["score"] - runs[1]["summary"]["score"], abs=1e-2
    )
    with pytest.raises(ValueError, match="compare needs two records timed on the same examples"):
        sm.compare(runs[1], whole[1])


def test_a_notebooks_batched_outputs_are_computed_once_and_planned_once(
    fake_zoo, tmp_path, monkeypatch
):
    """The vanilla model's outputs are the same in every sweep of a split, a policy's in every
    timing pass: one process computes them once (`shard.outputs`), and the plan counts them once per
    notebook, at their stated cost."""
    from bildlab.engine import batch
    from bildlab.study import plan

    grid = [{"fallback": 0.3, "rollback": 2.0}, {"method": "small"}]
    made = []
    real = batch.generate_batch
    monkeypatch.setattr(
        batch,
        "generate_batch",
        lambda *a, **kw: (
            made.append(kw["policy"].method if "policy" in kw else "greedy") or real(*a, **kw)
        ),
    )
    one = ev.sweep("toy-mt", grid, registry=tmp_path, timing_limit=3, batch_size=4, **FAST)
    # vanilla, the policy, the small model alone
    assert sorted(made) == ["bild", "greedy", "greedy"]
    two = ev.sweep(
        "toy-mt", grid, registry=tmp_path, timing_limit=3, batch_size=4, timing_pass=2, **FAST
    )
    three = ev.sweep(
        "toy-mt",
        [{"fallback": 0.5, "rollback": 2.0}],
        registry=tmp_path,
        timing_limit=3,
        batch_size=4,
        **FAST,
    )
    # only the new policy was computed again
    assert sorted(made) == ["bild", "bild", "greedy", "greedy"]
    assert [e["output"] for e in two[0]["examples"]] == [e["output"] for e in one[0]["examples"]]
    # its batch-1 runs still checked
    assert two[0]["timed_identical"] == 3 and three[0]["timed_identical"] == 3
    planner = plan.Planner()
    for pass_, g in ((1, grid), (2, grid), (1, [{"fallback": 0.5, "rollback": 2.0}])):
        planner.sweep(
            "toy-mt",
            g,
            registry=tmp_path / "empty",
            timing_limit=3,
            batch_size=4,
            timing_pass=pass_,
            **FAST,
        )
    c = plan.COST_RATIO["toy-mt"]
    assert [s["outputs"] for s in planner.sweeps] == [6 * 3, 0, 6]
    assert [s["output_units"] for s in planner.sweeps] == pytest.approx(
        [6 * (1 + (1 + c) + c), 0, 6 * (1 + c)]
    )
    # batch 1: the timed examples only
    assert [s["decodes"] for s in planner.sweeps] == [3 * 4, 3 * 4, 3 * 3]


def test_a_batched_output_that_differs_from_batch_1_is_counted_and_reported(
    fake_zoo, tmp_path, monkeypatch
):
    from bildlab.engine import batch

    real = batch.generate_batch

    # a planted bug: the first example's batched output loses its last token
    def off_by_one(*a, **kw):
        outs = real(*a, **kw)
        outs[0].tokens = outs[0].tokens[:-1]
        return outs

    monkeypatch.setattr(batch, "generate_batch", off_by_one)
    with pytest.warns(
        UserWarning, match="1 of 6 timed examples' batch-1 outputs differ from the batched ones"
    ):
        (run,) = ev.sweep(
            "toy-mt", [{"fallback": 0.4}], registry=tmp_path, timing_limit=6, batch_size=4, **FAST
        )
    assert run["timed_identical"] == 5 and run["timed"] == list(range(6))


def test_timing_limit_refuses_what_batches_cannot_give(fake_zoo, tmp_path):
    for entry, match in (
        ({"method": "hf_assisted"}, "needs timing_limit=None"),
        ({"method": "speculative", "do_sample": True}, "needs timing_limit=None"),
    ):
        with pytest.raises(ValueError, match=match):
            ev.sweep("toy-mt", [entry], registry=tmp_path, timing_limit=2, **FAST)
    with pytest.raises(ValueError, match="timing_limit must be None or an integer >= 1; got 0"):
        ev.sweep("toy-mt", [{}], registry=tmp_path, timing_limit=0, **FAST)
    assert (
        ev.sweep(
            "toy-mt",
            [{}],
            registry=tmp_path,
            timing_limit=2,
            executor="ray",
            check_only=True,
            # outputs in batches fan out over Ray too (tests/test_distributed.py)
            **FAST,
        )
        is None
    )
    with pytest.raises(ValueError, match="memory must be None .* got 'lots'"):
        ev.sweep(
            "toy-mt",
            [{}],
            registry=tmp_path,
            timing_limit=2,
            memory="lots",
            check_only=True,
            **FAST,
        )
    with pytest.raises(ValueError, match="chunk_size must be None .* got 0"):
        ev.sweep(
            "toy-mt", [{}], registry=tmp_path, timing_limit=2, chunk_size=0, check_only=True, **FAST
        )


def test_a_notebooks_timing_limit_is_checked_before_anything_runs():
    from bildlab.study.params import ParameterError, check_params

    check_params({"timing_limit": None})
    check_params({"timing_limit": 300})
    check_params(
        {
            "pairs": ["toy-mt", "toy-sum"],
            "timing_limit": {"toy-mt": 300, "toy-sum": 500},
            "val_timing_limit": 200,
            "batch_size": 256,
        }
    )
    for name in ("timing_limit", "val_timing_limit"):
        for bad in (0, -3, 2.5, True, "300", {"toy-mt": 0}):
            with pytest.raises(
                ParameterError, match=f"{name} must be None, an integer >= 1 or a dict of them"
            ):
                check_params({name: bad})
    with pytest.raises(ParameterError, match="timing_limit gives no size for pair\\(s\\) toy-sum"):
        check_params({"pairs": ["toy-mt", "toy-sum"], "timing_limit": {"toy-mt": 300}})
    with pytest.raises(ParameterError, match="batch_size must be an integer >= 1; got 0"):
        check_params({"batch_size": 0})


def test_a_timed_sample_per_pair(fake_zoo, tmp_path):
    """timing_limit given per pair ({pair: size}, like limit) resolves to the pair's own sample."""
    run = {k: v for k, v in FAST.items() if k != "progress"}
    found = ev.lookup(
        "toy-mt", [{}], registry=tmp_path, timing_limit={"toy-mt": 2, "toy-sum": 5}, **run
    )
    assert found.keys[0]["timing_limit"] == 2 and len(found.timed()) == 2
    with pytest.raises(ValueError, match="timing_limit gives no value for pair 'toy-mt'"):
        ev.lookup("toy-mt", [{}], registry=tmp_path, timing_limit={"toy-sum": 5}, **run)


KILLED = """
import sys, time
from bildlab.harness import evaluate as ev, shard
ev.CHECKPOINT_SECONDS = 0  # every finished example on disk at once
real = shard.generate
def slow(*a, **kw):
    time.sleep(0.2)
    return real(*a, **kw)
shard.generate = slow
ev.sweep("toy-mt", [{"fallback": 0.3}], registry=sys.argv[1], limit=6, max_new_tokens=8, warmup=1, progress=False)
"""


@pytest.mark.slow
def test_a_sweep_killed_with_sigkill_resumes_from_its_last_checkpoint(
    fake_zoo, tmp_path, monkeypatch
):
    """No `finally` runs on SIGKILL: what survives is what the checkpoints had written."""
    import os
    import signal
    import subprocess
    import sys
    import time

    reg = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(reg)], env=os.environ.copy())
    deadline, rows = time.monotonic() + 120, {}
    while time.monotonic() < deadline and len(rows) < 2:
        time.sleep(0.05)
        partial = list((reg / ".partial").glob("*.json")) if (reg / ".partial").exists() else []
        try:
            rows = json.loads(partial[0].read_text())["rows"] if partial else {}
        except ValueError:  # never: checkpoints are written whole
            pytest.fail("a checkpoint was read half-written")
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL and 2 <= len(rows) < 6
    assert not ev.Registry(reg).files()  # no record, not even half of one
    (partial,) = (reg / ".partial").glob("*.json")
    # what the last checkpoint before the kill held
    kept = len(json.loads(partial.read_text())["rows"])
    assert len(rows) <= kept < 6
    calls = _count_decodes(monkeypatch)
    (run,) = ev.sweep("toy-mt", [{"fallback": 0.3}], registry=reg, **FAST)
    # only the examples the checkpoint did not hold (+ one warm-up)
    assert calls["policy"] == (6 - kept) + 1
    clean = ev.evaluate("toy-mt", method="bild", fallback=0.3, registry=tmp_path / "clean", **FAST)
    assert [e["output"] for e in run["examples"]] == [e["output"] for e in clean["examples"]]
    assert not (reg / ".partial").exists()
