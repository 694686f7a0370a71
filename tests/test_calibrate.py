"""The calibration of a machine (bildlab.harness.calibrate): positive costs with intervals, within
its time budget, found again for the same machine only; the plan prices from it; errors name their
parameter."""

import copy
import json

import numpy as np
import pytest
import torch

from bildlab.cli import _drift, main
from bildlab.harness import calibrate, shard
from bildlab.harness.registry import Registry
from bildlab.study import plan


def _positive_with_intervals(cal: dict) -> None:
    c = cal["costs"]
    for row, cis in zip(c["large_pass"]["seconds"], c["large_pass"]["ci"]):
        assert all(0 < lo <= v <= hi for v, (lo, hi) in zip(row, cis))
    for s in [c["small_step"], *c["drafts"].values(), *c["greedy_step"].values()]:
        assert all(0 < lo <= v <= hi for v, (lo, hi) in zip(s["seconds"], s["ci"]))
    for model in ("large", "small"):
        assert all(x > 0 for x in c["encoder"][model]["seconds"]) and c["encoder"][model]["lengths"]
    v = c["vanilla_decode"]
    assert 0 < v["ci"][0] <= v["seconds"] <= v["ci"][1] and v["tokens"] > 0
    g = c["batch_gain"]
    assert all(0 < lo <= x <= hi for x, (lo, hi) in zip(g["gain"], g["ci"]))


def test_a_small_toy_calibration_is_positive_found_for_this_machine_only(tmp_path):
    cal = calibrate.calibrate(
        "toy-mt", n=3, batch_n=4, batch_sizes=[4], ms=(1, 2, 3), prefixes=(0, 8), registry=tmp_path
    )
    _positive_with_intervals(cal)
    # every draft of the toy T5 pair
    assert set(cal["costs"]["drafts"]) == {"aligned", "early-exit"}
    # batched outputs equal batch-1 ones here
    assert cal["batched_identical"] == {"n": 4, "identical": 4}
    assert cal["key"]["processor"] == shard.processor() and cal["key"]["threads"] == 1
    assert calibrate.for_machine(tmp_path, "toy-mt") == json.loads(json.dumps(cal))
    assert calibrate.for_machine(tmp_path, "toy-sum") is None
    assert calibrate.for_machine(tmp_path, "toy-mt", threads=2) is None
    other = copy.deepcopy(cal)
    other["key"]["processor"], other["made"] = "another CPU", "2099-01-01T00:00:00Z"
    Registry(tmp_path).put_calibration(other)  # newer, but of another machine
    assert calibrate.for_machine(tmp_path, "toy-mt")["key"]["processor"] == shard.processor()
    assert len(Registry(tmp_path).calibrations()) == 2 and Registry(tmp_path).records() == []


@pytest.mark.slow
def test_a_toy_calibration_with_the_defaults_finishes_within_its_budget(tmp_path):
    cal = calibrate.calibrate("toy-mt-llama", registry=tmp_path)
    _positive_with_intervals(cal)
    assert cal["seconds"] < 180, cal["seconds"]  # toy pairs on a CPU: under 3 minutes each
    assert cal["encoder_decoder"] is False and cal["costs"]["drafts"] == {}
    assert cal["batched_identical"]["identical"] == cal["batched_identical"]["n"] > 0


@pytest.mark.slow
def test_the_paper_calibration_runs_at_the_paper_sizes_on_a_cpu(tmp_path, capsys):
    """T5-large and T5-small with random weights (no checkpoint here), the CPU's small sample of the
    same calls."""
    argv = [
        "calibrate",
        "--profile",
        "paper",
        "--pair",
        "xsum",
        "--registry",
        str(tmp_path),
        "--quiet",
        "-p",
        "device",
        "cpu",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("calibration of xsum on cpu") and "random weights" in out
    (cal,) = Registry(tmp_path).calibrations()
    assert cal["weights"] == "random" and cal["encoder_decoder"] is True
    # every pass size the study's policies make
    assert cal["costs"]["large_pass"]["m"] == list(range(1, 12))
    _positive_with_intervals(cal)


def test_calibrate_checks_its_arguments():
    with pytest.raises(ValueError, match="pair must be one of toy-mt, "):
        calibrate.calibrate("toy-xx")
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda"):
        calibrate.calibrate("toy-mt", device="tpu")
    with pytest.raises(ValueError, match=r"ms must include 1 .* and a larger m"):
        calibrate.calibrate("toy-mt", ms=(2, 3))
    with pytest.raises(ValueError, match="n must be an integer >= 1; got 0"):
        calibrate.calibrate("toy-mt", n=0)
    with pytest.raises(ValueError, match="prefixes must be a non-empty list of integers >= 0"):
        calibrate.calibrate("toy-mt", prefixes=())
    assert main(["calibrate", "--pair", "toy-mt", "-p", "bogus", "1"]) == 2


def test_the_plan_prices_from_a_calibration_of_this_device(tmp_path):
    """With a calibration of toy-mt on this machine in the registry, the plan's toy-mt sweeps cost
    its vanilla decode and batch gain, and its first line says so; the other pairs keep the stated
    constants."""
    before = plan.plan("toy", ["rq1_small_writes_most"], {"registry": str(tmp_path)})
    assert (
        plan.costs_line(before)
        == "costs: stated constants; no calibration of this device (bildlab calibrate)"
    )
    machine = shard.machine("cpu")
    cal = {
        "key": {
            "kind": "calibration",
            "pair": "toy-mt",
            "device": "cpu",
            "device_name": machine["device_name"],
            "processor": machine["processor"],
            "threads": 1,
        },
        "made": "2026-12-03T00:00:00Z",
        "costs": {
            "vanilla_decode": {"seconds": 0.5},
            "batch_gain": {"batch_sizes": [64, 256], "gain": [4.0, 8.0]},
            "large_pass": {"m": [1, 2], "prefix": [0], "seconds": [[0.01, 0.012]]},
            "small_step": {"prefix": [0], "seconds": [0.002]},
        },
    }
    Registry(tmp_path).put_calibration(cal)
    after = plan.plan("toy", ["rq1_small_writes_most"], {"registry": str(tmp_path)})
    assert plan.costs_line(after).startswith(
        "costs: calibration cpu ("
    ) and "stated constants for the pairs" in plan.costs_line(after)
    for b, a in zip(before[0]["sweeps_detail"], after[0]["sweeps_detail"]):
        if a["pair"] == "toy-mt":
            assert a["prices"] == {
                "seconds": 0.5,
                "c": 0.2,
                "gain": 8.0,
                "source": a["prices"]["source"],
            }
            assert a["decodes"] == b["decodes"] > 0
        else:
            assert a["prices"] == b["prices"] and a["prices"]["source"] is None
    assert plan.format_plan(after, "toy").splitlines()[0] == plan.costs_line(after)


# a cheap calibration of the fake zoo's toy-mt (tests/conftest.py `fake_zoo`), and a cheap sweep
SMALL = dict(
    n=3, batch_n=2, batch_sizes=[2], ms=(1, 2, 3), prefixes=(0, 8), max_new_tokens=8, warmup=0
)
FAST = dict(split="test", limit=4, max_new_tokens=8, warmup=0, progress=False)


def test_a_sweep_into_a_new_registry_is_priced_by_this_machines_calibration(
    fake_zoo, tmp_path, monkeypatch
):
    """`bildlab calibrate` writes to its registry and to this machine's store; a sweep into another,
    new registry finds it there (its records carry predicted speedups), while a registry's own
    calibration comes first."""
    from bildlab.harness import evaluate as ev

    store = tmp_path / "store"
    monkeypatch.setenv(calibrate.STORE_ENV, str(store))
    argv = ["calibrate", "--pair", "toy-mt", "--registry", str(tmp_path / "default"), "--quiet"]
    for name, value in SMALL.items():
        argv += ["-p", name, json.dumps(list(value) if isinstance(value, tuple) else value)]
    assert main(argv) == 0
    (cal,) = Registry(tmp_path / "default").calibrations()
    assert calibrate.machine_store().calibrations() == [cal]
    assert calibrate.for_machine(tmp_path / "new", "toy-mt") == cal
    # only the registry's own when asked
    assert calibrate.for_machine(tmp_path / "new", "toy-mt", from_store=False) is None
    grid = [{"fallback": 0.3, "rollback": 2.0}, {"method": "speculative", "k": 3}]
    made = ev.sweep("toy-mt", grid, registry=tmp_path / "new", **FAST)
    for record in made:
        assert record["summary"]["predicted_speedup"] > 0
        assert record["calibration"]["made"] == cal["made"]
        assert record["calibration"]["timed_here"] is True
    # the registry's own first, even older than the store's
    own = copy.deepcopy(cal)
    own["made"] = "2000-01-01T00:00:00Z"
    Registry(tmp_path / "new").put_calibration(own)
    assert calibrate.for_machine(tmp_path / "new", "toy-mt")["made"] == own["made"]
    # without $BILDLAB_CALIBRATIONS: calibrations/ under bildlab's cache folder
    monkeypatch.delenv(calibrate.STORE_ENV)
    monkeypatch.setenv("BILDLAB_CACHE", str(tmp_path / "cache"))
    assert calibrate.machine_store().root == tmp_path / "cache" / "calibrations"


def test_a_calibration_interleaves_every_component_and_states_its_uncertainty(
    fake_zoo, tmp_path, monkeypatch
):
    """Every component a prediction reads (the overhead's whole decodes too) is timed in one
    interleave whose order rotates from input to input; the calibration states how sure it is, and
    `bildlab calibrate` prints it."""
    from bildlab.cli import describe
    from bildlab.engine import timing

    calls, real = [], timing.interleave

    def spy(inputs, runners, **kw):
        order = []
        calls.append((list(runners), order))

        def logged(name, fn):
            def run(x, i):
                order.append((i, name))
                return fn(x, i)

            return run

        return real(inputs, {k: logged(k, f) for k, f in runners.items()}, **kw)

    monkeypatch.setattr(calibrate.timing, "interleave", spy)
    cal = calibrate.calibrate("toy-mt", **SMALL)
    # the calibration's one interleave, then the batch gain's
    assert len(calls) == 2 and calls[1][0] == ["decode"]
    names, order = calls[0]
    assert {"encoder large", "decode", "greedy large 0", "draft small 8", "whole greedy small"} <= (
        set(names)
    )
    assert {f"whole {p}" for p in calibrate.OVERHEAD_POLICIES} <= set(names)
    per_input = [[name for j, name in order if j == i] for i in range(SMALL["n"])]
    for i, ran in enumerate(per_input):  # every component once, in the names' order rotated by i
        shift = i % len(names)
        assert ran == names[shift:] + names[:shift]
    assert len({ran[0] for ran in per_input}) == SMALL["n"]  # no component always first
    u = cal["uncertainty"]
    assert u["ci"][0] <= u["vanilla_seconds"] <= u["ci"][1] and u["n"] == SMALL["n"]
    assert u["relative"] == round((u["ci"][1] - u["ci"][0]) / 2 / u["vanilla_seconds"], 4)
    assert u["relative"] > 0  # below 1 on a quiet machine; a busy one may give more
    # the first calibration of its key here: the spread between runs is not known yet
    assert u["inputs"] == u["relative"] and u["between_runs"] is None and u["runs"] == 1
    line = next(x for x in describe(cal).splitlines() if "uncertainty" in x)
    assert f"+-{100 * u['relative']:.1f}%" in line and "between runs not known yet (1 " in line
    # the loop's host work of its one run, kept as its own and printed beside it
    o = cal["costs"]["overhead"]
    assert o["runs"] == 1 and o["own"]["large_call"] == o["large_call"]
    assert set(o["draft_step"]) == {"bild", "speculative", "speculative sampling"}
    host = next(x for x in describe(cal).splitlines() if "host work" in x)
    assert (
        "median over 1 run(s)" in host
        and f"bild per draft step {1e3 * o['draft_step']['bild']:.3f}" in host
    )


LENGTHS = (4, 6, 8, 6)


def _rows(scales, prefixes=(0, 8), steps=calibrate.GREEDY_STEPS):
    """Calibration rows whose every input's greedy step of the large model costs 1 ms times its
    scale (the first step of a run 2 ms), its encoder 1 ms per source token."""
    return [
        {
            "encoder large": {"stats": {"seconds": 0.001 * n, "length": n}},
            **{
                f"greedy large {p}": {
                    "stats": {"steps": [s * (0.002 if j == 0 else 0.001) for j in range(steps)]}
                }
                for p in prefixes
            },
        }
        for s, n in zip(scales, LENGTHS)
    ]


def test_the_uncertainty_is_the_spread_of_each_inputs_price():
    """A vanilla decode priced from each input's components: the calibration's own price when every
    input reads the same, and a wider interval the more the inputs disagree."""
    from bildlab.measure import costs as pricing

    xs = [torch.zeros(1, n, dtype=torch.long) for n in LENGTHS]

    def stated(scales):
        rows = _rows(scales)
        costs = {
            "encoder": {
                "large": {"lengths": list(LENGTHS), "seconds": [0.001 * n for n in LENGTHS]}
            },
            "greedy_step": {
                "large": calibrate._steps(rows, "greedy large", (0, 8), 4, list(range(8)))
            },
            "vanilla_decode": {"tokens": 20.0},
            "overhead": {"large_call": 1e-4},
        }
        return costs, calibrate._uncertainty(costs, rows, xs, (0, 8), False)

    costs, same = stated([1.0] * 4)
    assert same["relative"] == 0.0 and same["ci"][0] == pytest.approx(same["ci"][1])
    price = pricing.decode_seconds({"costs": costs}, "greedy", "small", None, 20.0, 6.0, False)
    assert same["vanilla_seconds"] == pytest.approx(price) and same["source"] == 6.0
    _, some = stated([0.9, 1.0, 1.0, 1.1])
    _, more = stated([0.6, 1.0, 1.0, 1.4])
    assert 0 < some["relative"] < more["relative"] < 1


def test_the_spread_between_runs_is_a_95_percent_prediction_interval():
    """`between_runs` covers a further run of a machine whose price drifts (log-normal, known
    spread) 95% of the time; below 3 runs it is not stated, and `relative` combines it with the
    spread over the inputs."""
    u = {"vanilla_seconds": 0.2, "relative": 0.03}
    for earlier in ([], [0.19]):
        stated = calibrate._with_drift(u, earlier)
        assert stated["between_runs"] is None and stated["runs"] == len(earlier) + 1
        assert stated["relative"] == stated["inputs"] == 0.03
    same = calibrate._with_drift(u, [0.2, 0.2])
    assert same["between_runs"] == 0.0 and same["relative"] == 0.03
    drifting = calibrate._with_drift(u, [0.2 * 1.07, 0.2 * 0.95])
    assert drifting["relative"] == round((0.03**2 + drifting["between_runs"] ** 2) ** 0.5, 4)
    words = (
        f"+-3.0% over the inputs and +-{100 * drifting['between_runs']:.1f}% between 3 runs here"
    )
    assert _drift(drifting).startswith(words)
    rng = np.random.default_rng(0)
    covered = []
    for _ in range(4000):
        logs = np.log(0.2) + 0.05 * rng.standard_normal(6)
        runs = np.exp(logs[:5])
        between = calibrate._with_drift(
            {"vanilla_seconds": float(runs[-1]), "relative": 0.0}, [float(x) for x in runs[:-1]]
        )["between_runs"]
        covered.append(abs(logs[5] - np.log(runs).mean()) <= between)
    assert 0.935 <= np.mean(covered) <= 0.965


def test_the_spread_between_runs_reads_earlier_calibrations_of_the_same_key_and_sample(tmp_path):
    """Only calibrations of the same key (pair, models, machine, protocol) and the same sample
    count, each once (the registry's and the store's copies), the newest DRIFT_HISTORY of them."""
    key = {"kind": "calibration", "pair": "toy-mt", "threads": 1, "protocol": {"warmup": [2]}}
    sample = {"n": 16, "source": 16.6, "tokens": 14.6}

    def cal(made, seconds, **changes):
        return {
            "key": {**key, **changes.pop("key", {})},
            "made": f"2026-12-07T10:{made:02d}:00Z",
            "costs": {"large_pass": {}},
            "uncertainty": {**sample, **changes, "vanilla_seconds": seconds},
        }

    reg, store = Registry(tmp_path / "reg"), Registry(tmp_path / "store")
    for i in range(12):
        reg.put_calibration(cal(i, 0.2 + i / 1000))
    store.put_calibration(cal(11, 0.2 + 11 / 1000))  # the same calibration in both
    store.put_calibration(cal(20, 0.3, key={"threads": 2}))
    store.put_calibration(cal(21, 0.3, tokens=20.0))
    # made before calibrations stated their uncertainty
    store.put_calibration({"key": key, "made": "2026-12-07T10:22:00Z", "costs": {"large_pass": {}}})
    known = [*reg.calibrations(), *store.calibrations()]
    found = calibrate._earlier_prices(key, sample, known)
    assert found == [0.2 + i / 1000 for i in range(12 - calibrate.DRIFT_HISTORY, 12)]
    assert calibrate._earlier_prices({**key, "pair": "toy-sum"}, sample, known) == []


def test_host_work_is_the_median_over_the_runs_of_one_key_each_its_own_run(tmp_path):
    """`pooled`: each value of the loop's host work is the median over this run and the earlier
    calibrations of its key (their own runs' values, never their pooled ones); `repool` pools a
    registry's calibrations over those made before each, once."""
    key = {"kind": "calibration", "pair": "toy-mt", "threads": 1, "processor": "cpu X"}

    def own(large_call, bild, lookup=None):
        o = {"large_call": large_call, "draft_step": {"bild": bild}, "call": {}, "n": 16}
        if lookup is not None:
            o["call"]["prompt-lookup"] = lookup
        return o

    def cal(minute, overhead, **key_changes):
        return {
            "key": {**key, **key_changes},
            "made": f"2026-12-07T10:{minute:02d}:00Z",
            "costs": {"large_pass": {}, "overhead": overhead},
        }

    alone = calibrate.pooled(own(1e-4, -3e-4, 2e-3), [])
    assert alone["runs"] == 1 and alone["draft_step"] == {"bild": -3e-4}
    assert alone["own"] == own(1e-4, -3e-4, 2e-3)
    # an earlier calibration without prompt lookup's value: the median over those that have it
    earlier = [cal(0, own(3e-4, 1e-4)), cal(1, calibrate.pooled(own(2e-4, 2e-4, 1e-3), []))]
    p = calibrate.pooled(own(1e-4, -3e-4, 2e-3), earlier)
    assert p["runs"] == 3 and p["large_call"] == pytest.approx(2e-4)
    assert p["draft_step"] == {"bild": pytest.approx(1e-4)}
    assert p["call"] == {"prompt-lookup": pytest.approx(1.5e-3)}
    assert p["own"]["draft_step"] == {"bild": -3e-4}

    reg = Registry(tmp_path)
    for i, (lc, bild) in enumerate([(3e-4, 1e-4), (2e-4, 2e-4), (1e-4, -3e-4)]):
        reg.put_calibration(cal(i, own(lc, bild)))
    reg.put_calibration(cal(9, own(9e-4, 9e-4), processor="cpu Y"))  # another machine
    assert calibrate.repool(reg) == 4
    got = {
        (c["key"]["processor"], c["made"][-6:-4]): c["costs"]["overhead"]
        for c in reg.calibrations()
    }
    # each over the calibrations of its key made before it, not after
    assert got["cpu X", "00"]["runs"] == 1 and got["cpu X", "00"]["large_call"] == 3e-4
    assert got["cpu X", "01"]["runs"] == 2 and got["cpu X", "01"]["large_call"] == pytest.approx(
        2.5e-4
    )
    assert got["cpu X", "02"]["runs"] == 3 and got["cpu X", "02"]["draft_step"]["bild"] == 1e-4
    assert got["cpu Y", "09"]["runs"] == 1 and got["cpu Y", "09"]["large_call"] == 9e-4
    # pooled from the runs' own values: pooling again changes nothing
    assert calibrate.repool(reg) == 0
