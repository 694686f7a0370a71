"""bildlab.harness.retime: a registry's sweeps timed again on this machine, priced by a calibration
of the same run; the outputs, scores and mechanism unchanged, other outputs refused, an interrupted
retime resumed."""

import json
import time
from datetime import datetime, timezone

import pytest

from bildlab.harness import calibrate, shard
from bildlab.harness import evaluate as ev
from bildlab.harness.registry import Registry
from bildlab.harness.retime import pick, retime

FAST = dict(split="test", limit=6, max_new_tokens=12, warmup=0, progress=False)
SMALL = dict(
    n=2, batch_n=2, batch_sizes=[2], ms=(1, 2, 3, 4), prefixes=(0, 8), max_new_tokens=8, warmup=0
)


def _sweep(reg):
    grid = [{"fallback": 0.3, "rollback": 2.0}, {"method": "speculative", "k": 3}]
    made = ev.sweep("toy-mt", grid, registry=reg, timing_limit=4, batch_size=4, **FAST)
    made += ev.sweep(
        "toy-mt", [{"method": "speculative", "k": 3, "do_sample": True}], registry=reg, **FAST
    )
    return made


def test_retime_keeps_outputs_and_mechanism_and_prices_with_its_own_calibration(fake_zoo, tmp_path):
    reg = Registry(tmp_path / "reg")
    made = _sweep(reg)
    cal = calibrate.calibrate("toy-mt", registry=reg, **SMALL)
    out = retime(reg, progress=False, calibration={"toy-mt": cal})
    assert out["retimed"] == 3 and out["differ"] == [] and out["skipped"] == 0
    for before in made:
        after = reg.get(before["key"])
        rows, old = after["examples"], before["examples"]
        # the outputs are the record's
        assert [r["output"] for r in rows] == [r["output"] for r in old]
        # the same examples timed
        assert [r["seconds"] is None for r in rows] == [r["seconds"] is None for r in old]
        assert [r["seconds"] for r in rows] != [r["seconds"] for r in old]  # timed again
        assert after["mechanism"] == before["mechanism"]
        assert after["summary"]["score"] == before["summary"]["score"]
        assert after["machines"] == [shard.machine("cpu")] and after["retimed"]["made"]
        assert after["calibration"]["same_run"] and after["calibration"]["made"] == cal["made"]
        assert after["calibration"]["timed_here"] is True
        assert after["summary"]["predicted_speedup"] > 0
        # the sweep's vanilla columns, timed again, stored once in the sweep's file (not copied into
        # every record)
        assert json.loads(reg.path(before["key"]).read_text())["examples"]["sweep_columns"]
    # priced again by the calibration each names, as stored in the registry (here with dearer host
    # work): every prediction moves, how it was timed stays; once done, nothing to do
    from bildlab.harness.pricing import reprice

    def name(record):
        return json.dumps(record["key"], sort_keys=True)

    priced = {name(b): reg.get(b["key"])["summary"]["predicted_speedup"] for b in made}
    dearer = json.loads(json.dumps(cal))
    dearer["costs"]["overhead"]["large_call"] += 1e-3
    reg.put_calibration(dearer)
    assert reprice(reg) == 3 and reprice(reg) == 0
    for before in made:
        after = reg.get(before["key"])
        assert after["calibration"]["same_run"] and after["calibration"]["made"] == cal["made"]
        assert after["summary"]["predicted_speedup"] != priced[name(before)]
    # resumed: nothing left
    assert retime(reg, progress=False, calibration={"toy-mt": cal})["skipped"] == 3
    # timed once more when retimed before a given time (a second after the first retime); that run
    # resumes as well: what it retimed is not before the time
    time.sleep(1.1)
    later = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    kw = dict(retimed_before=later, progress=False, calibration={"toy-mt": cal})
    again = retime(reg, **kw)
    assert again["retimed"] == 3 and again["skipped"] == 0
    assert all(reg.get(r["key"])["retimed"]["made"] >= later for r in made)
    rerun = retime(reg, **kw)
    assert rerun["retimed"] == 0 and rerun["skipped"] == 3
    with pytest.raises(ValueError, match="retimed_before must be a UTC time like"):
        retime(reg, retimed_before="yesterday", progress=False)


def test_retime_refuses_other_outputs_and_resumes_from_its_checkpoint(fake_zoo, tmp_path):
    reg = Registry(tmp_path / "reg")
    made = _sweep(reg)
    bild, spec = made[0], made[1]
    tampered = reg.get(spec["key"])
    i = next(j for j, r in enumerate(tampered["examples"]) if r["seconds"] is not None)
    tampered["examples"][i].update(output=tampered["examples"][i]["output"] + " x", identical=False)
    reg.put(spec["key"], tampered)
    cal = calibrate.calibrate("toy-mt", registry=reg, **SMALL)
    # an interrupted retime of the first sweep: its checkpoint holds example i, timed (made up) at 7
    # s each
    records = [reg.get(bild["key"]), reg.get(spec["key"])]
    point = {
        "retime": bild["protocol"]["sweep"],
        "keys": [r["key"] for r in records],
        "calibration": cal["made"],
    }
    real = shard.time_shard({**_spec_of(records), "warmup": 0}, [i])[i]
    reg.save_partial(
        point, {i: {**real, **{k: {**real[k], "seconds": 7.0} for k in ("greedy", "policy0")}}}
    )
    out = retime(reg, progress=False, calibration={"toy-mt": cal})
    assert out["retimed"] == 2 and out["differ"] == ["toy-mt test: speculative k=3"]
    assert reg.get(spec["key"]) == tampered  # left as it was
    resumed = reg.get(bild["key"])["examples"][i]
    # the checkpoint's row, not timed again
    assert resumed["seconds"] == 7.0 and resumed["baseline_seconds"] == 7.0
    assert not (tmp_path / "reg" / ".partial").exists()


def _spec_of(records):
    from bildlab.harness.retime import _spec

    return _spec(records)[0]


def test_pick_chooses_records_by_pair_split_and_machine():
    def record(pair, split, *processors):
        machines = [{"processor": p, "device_name": "cpu"} for p in processors]
        return {"key": {"pair": pair, "split": split}, "machines": machines}

    amd, intel = "AMD EPYC 7B13", "Intel(R) Xeon(R) Processor"
    records = [
        record("toy-mt", "test", amd),
        record("toy-mt", "validation", intel),
        record("toy-sum", "test", intel, amd),
        record("toy-sum", "validation", intel),
    ]
    chosen = [
        [i for i, r in enumerate(records) if pick(*args)(r)]
        for args in [
            (),
            (["toy-mt"],),
            ((), ["validation"]),
            ((), (), ["AMD EPYC"]),
            (["toy-sum"], ["test"], ["Xeon"]),
            ((), (), ["amd epyc"]),  # case-sensitive
            ((), (), ["cpu"]),  # the device name
        ]
    ]
    assert chosen == [[0, 1, 2, 3], [0, 1], [1, 3], [0, 2], [2], [], [0, 1, 2, 3]]
