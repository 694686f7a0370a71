"""The calibration of a machine (bildlab.harness.calibrate): positive costs with intervals, within
its time budget, found again for the same machine only; the plan prices from it; errors name their
parameter."""

import copy
import json

import pytest

from bildlab.cli import main
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
