"""The results registry: keys that define experiments (library versions are provenance), replay
under other versions, migration of old keys, malformed files reported and recomputed, a plan that
reads what exists, and the lock."""

import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from bildlab.harness import columns, registry, shard
from bildlab.harness import evaluate as ev
from bildlab.study import plan, runner

FAST = dict(limit=6, max_new_tokens=8, warmup=1, progress=False)
ROOT = Path(__file__).resolve().parent.parent


def _no_decode(monkeypatch):
    monkeypatch.setattr(shard, "load", lambda *a: pytest.fail("a record was recomputed"))


def _other_transformers(monkeypatch):
    """This environment, as if another transformers release were installed."""
    real = registry.versions()
    fake = lambda: {**real, "transformers": "5.0.1"}  # noqa: E731
    monkeypatch.setattr(registry, "versions", fake)
    monkeypatch.setattr(ev, "versions", fake)
    monkeypatch.setattr(ev.records, "versions", fake)  # where records are built
    return real


def test_the_key_defines_the_experiment_and_the_record_states_its_versions(fake_zoo, tmp_path):
    tmp_path = tmp_path / "results"  # beside the fake zoo
    run = ev.evaluate("toy-mt", method="bild", registry=tmp_path, **FAST)
    key = run["key"]
    assert not {"bildlab", "torch", "transformers", "tokenizers", "python"} & set(key)
    assert key["device"] == "cpu" and key["data"] == {
        "task": "toy-mt",
        "version": ev.tasks.toy.VERSION,
    }
    assert run["versions"] == registry.versions()
    assert run["versions"]["transformers"] == metadata.version("transformers")
    k = dict(seed=0, max_new_tokens=8, threads=1, repeats=1, hf_baseline=True, timing_pass=1)
    # the type
    assert ev.run_key("toy-mt", "toy-mt", "test", 6, {}, device="cuda:1", **k)["device"] == "cuda"


def test_records_replay_under_other_library_versions_and_recompute_on_request(
    fake_zoo, tmp_path, monkeypatch
):
    tmp_path = tmp_path / "results"  # beside the fake zoo
    grid = [{"fallback": 0.3}, {"fallback": 0.6}]
    first = ev.sweep("toy-mt", grid, registry=tmp_path, **FAST)
    real, real_pair = _other_transformers(monkeypatch), shard.load
    _no_decode(monkeypatch)
    assert ev.sweep("toy-mt", grid, registry=tmp_path, **FAST) == first  # replayed as they are
    note = runner.replay_note({tmp_path})
    assert "\n" not in note and "2 records" in note
    assert f"transformers {real['transformers']} (here 5.0.1)" in note and "--recompute" in note
    monkeypatch.setattr(shard, "load", real_pair)
    again = ev.sweep("toy-mt", grid, registry=tmp_path, recompute=True, **FAST)
    assert [r["versions"]["transformers"] for r in again] == ["5.0.1", "5.0.1"]
    # the same experiments, new records
    assert [r["key"] for r in again] == [r["key"] for r in first]
    assert len(registry.Registry(tmp_path).files()) == 2
    assert "made with this environment's library versions" in runner.replay_note({tmp_path})
    with pytest.raises(TypeError, match="recompute must be True or False"):
        ev.sweep("toy-mt", grid, registry=tmp_path, recompute="yes", **FAST)


def test_records_keyed_by_versions_are_migrated_not_recomputed(fake_zoo, tmp_path, monkeypatch):
    tmp_path = tmp_path / "results"  # beside the fake zoo
    run = ev.evaluate("toy-mt", method="bild", registry=tmp_path, **FAST)
    (path,) = registry.Registry(tmp_path).files()
    old_key = {k: v for k, v in run["key"].items() if k != "data"}
    old_key.update(bildlab="0.2.0", torch="2.13.0+cpu", transformers="5.24.0")
    old = {k: v for k, v in run.items() if k != "versions"} | {"key": old_key}
    path.unlink()
    reg = registry.Registry(tmp_path)
    reg.put(old_key, old)
    with pytest.raises(
        ValueError, match=r"1 records keyed by library versions.*bildlab registry --migrate"
    ):
        runner.replay_note({tmp_path})
    assert ev.migrate(tmp_path) == 1 and ev.migrate(tmp_path) == 0
    (moved,) = registry.Registry(tmp_path).files()
    record = registry.Registry(tmp_path)._read(moved)
    assert record["key"] == run["key"] and moved == reg.path(run["key"])
    assert record["versions"] == {
        "bildlab": "0.2.0",
        "torch": "2.13.0+cpu",
        "transformers": "5.24.0",
    }
    assert record["examples"] == run["examples"] and record["summary"] == run["summary"]
    _no_decode(monkeypatch)
    assert (
        ev.evaluate("toy-mt", method="bild", registry=tmp_path, **FAST)["examples"]
        == run["examples"]
    )


@pytest.mark.parametrize(
    "content", ["[]", "null", "42", '"text"', '{"key": 1}', "{truncated", "other key"]
)
def test_a_malformed_record_is_reported_and_recomputed(fake_zoo, tmp_path, content):
    tmp_path = tmp_path / "results"  # beside the fake zoo
    first = ev.evaluate("toy-mt", method="greedy", registry=tmp_path, **FAST)
    (path,) = registry.Registry(tmp_path).files()
    # a well-formed record, but of another experiment than its file name says
    if content == "other key":
        content = json.dumps({**first, "key": {**first["key"], "seed": 7}})
    path.write_text(content)
    with pytest.warns(UserWarning, match="corrupt results record"):
        again = ev.evaluate("toy-mt", method="greedy", registry=tmp_path, **FAST)
    assert [r["output"] for r in again["examples"]] == [r["output"] for r in first["examples"]]
    assert json.loads(path.read_text())["key"] == first["key"]  # rewritten whole
    path.write_text(content)
    with pytest.warns(UserWarning, match="corrupt results record"):
        assert registry.Registry(tmp_path).records() == []  # reported and skipped, never a crash


@pytest.mark.parametrize(
    "content", ["[]", "null", "42", '{"key": null, "rows": []}', '{"rows": {"0": 5}}']
)
def test_a_malformed_checkpoint_is_reported_and_the_sweep_starts_over(fake_zoo, tmp_path, content):
    tmp_path = tmp_path / "results"  # beside the fake zoo
    reg = registry.Registry(tmp_path)
    sweep_key = {"keys": [{"a": 1}], "runners": ["greedy"]}
    path = reg._partial(sweep_key)
    path.parent.mkdir(parents=True)
    path.write_text(
        content.replace("null", json.dumps(sweep_key)) if content.startswith('{"key"') else content
    )
    with pytest.warns(UserWarning, match="unusable checkpoint"):
        assert reg.load_partial(sweep_key) == {}


def test_a_plan_reads_the_records_that_exist(fake_zoo, tmp_path, monkeypatch):
    tmp_path = tmp_path / "results"  # beside the fake zoo
    grid = [{"fallback": 0.3}, {"fallback": 0.6}]
    made = ev.sweep("toy-mt", grid, registry=tmp_path, **FAST)
    _no_decode(monkeypatch)
    planner = plan.Planner()
    records = planner.sweep("toy-mt", grid + [{"fallback": 0.9}], registry=tmp_path, **FAST)
    # choices from real numbers where they exist
    assert records[:2] == made and records[2].get("placeholder")
    assert planner.sweeps[0]["to_run"] == 1
    _other_transformers(monkeypatch)
    planner = plan.Planner()
    planner.sweep("toy-mt", grid, registry=tmp_path, recompute=True, **FAST)
    # --recompute --plan: what other versions made is to run
    assert planner.sweeps[0]["to_run"] == 2


@pytest.mark.slow
def test_the_committed_study_plans_nothing_to_run_and_holds_nothing_else(monkeypatch):
    """The committed registry holds every record the six notebooks read (a replay computes nothing),
    and only them."""
    monkeypatch.setattr(shard, "load", lambda *a: pytest.fail("planning loaded a model"))
    planner = plan.Planner()
    rows = plan.plan("toy", planner=planner)
    assert {r["notebook"]: r["decodes"] for r in rows} == dict.fromkeys(runner.notebook_names(), 0)
    assert plan.unused(ROOT / "results" / "toy", planner.read) == []  # and it holds nothing else


def test_the_lock_pins_every_package_the_study_and_the_tests_import():
    lock = (ROOT / "requirements.lock").read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9._-]+)==(\S+)$", lock, re.M))
    norm = {re.sub(r"[-_.]+", "-", k).lower(): v for k, v in pins.items()}
    # the public version: the CUDA build matches it on a GPU box
    assert "torch" in norm and "+" not in norm["torch"]

    def closure(name, extras=(), seen=None):  # every distribution `name` (with `extras`) needs here
        seen = set() if seen is None else seen
        for line in metadata.requires(name) or []:
            req = Requirement(line)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in (*extras, "")):
                continue
            dep = re.sub(r"[-_.]+", "-", req.name).lower()
            if dep not in seen:
                seen.add(dep)
                closure(dep, tuple(req.extras), seen)
        return seen

    needed = closure("bildlab", ("notebooks", "test", "ray"))
    assert needed and not sorted(needed - set(norm))
    for name in ("torch", "transformers", "tokenizers", "papermill", "nbval", "scipy"):
        # this environment is the lock's
        assert metadata.version(name).split("+")[0] == norm[name], name
    env = (ROOT / "environment.yml").read_text()
    assert "-c requirements.lock" in env and f"torch=={norm['torch']}" in env
    make = subprocess.run(
        ["make", "-n", "setup"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert make.count("-c requirements.lock") == 2


def test_records_no_notebook_reads_are_listed_and_pruned(fake_zoo, tmp_path):
    reg = tmp_path / "results"
    ev.sweep("toy-mt", [{"fallback": 0.3}, {"fallback": 0.6}], registry=reg, **FAST)
    planner = plan.Planner()
    planner.sweep("toy-mt", [{"fallback": 0.6}], registry=reg, **FAST)  # what a notebook would read
    (stale,) = plan.unused(reg, planner.read)
    assert json.loads(stale.read_text())["key"]["policy"]["fallback"] == 0.3
    (reg / "toy-mt" / "x.json").write_text("[]")  # not a record: unused too
    assert len(plan.unused(reg, planner.read)) == 2


def test_a_checkpoint_that_no_sweep_still_to_compute_resumes_from_is_unused(
    fake_zoo, tmp_path, monkeypatch
):
    """An interrupted sweep's checkpoint is kept while its sweep still has all of its policies to
    compute; once another process has finished one of them, the sweep computes the rest under a new
    checkpoint and the first is stale: listed (and pruned) as unused."""
    reg = tmp_path / "results"
    grid = [{"fallback": 0.2}, {"fallback": 0.8}]
    monkeypatch.setattr(ev, "CHECKPOINT_SECONDS", 0)
    real, calls = shard.generate, {"n": 0}

    def interrupted(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 8:  # a few examples in
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(shard, "generate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ev.sweep("toy-mt", grid, registry=reg, **FAST)
    monkeypatch.setattr(shard, "generate", real)
    (checkpoint,) = registry.Registry(reg).checkpoints()

    def stale():
        planner = plan.Planner()
        planner.sweep("toy-mt", grid, registry=reg, **FAST)
        return plan.unused(reg, planner.read, planner.resumes)

    assert stale() == []  # the sweep resumes from it
    ev.sweep("toy-mt", grid[1:], registry=reg, **FAST)  # another process: fallback 0.8 first
    assert stale() == [checkpoint[0]]
    assert plan.unused(reg, set(), set())[-1] == checkpoint[0]
    # the rest, fallback 0.2, under a checkpoint of its own
    ev.sweep("toy-mt", grid, registry=reg, **FAST)
    assert [p for p, _ in registry.Registry(reg).checkpoints()] == [checkpoint[0]]
    assert stale() == [checkpoint[0]]


def test_the_cli_migrates_a_registry(tmp_path):
    """`bildlab registry --migrate` on a registry holding one record keyed as bildlab 0.2 keyed it
    (library versions and the device index in the key, no data version): the record is found under
    the key written out here by hand, its versions are provenance, its rows are unchanged, and the
    old file is gone."""
    rows = [
        {"output": "w1 w2", "seconds": 0.5, "tokens": 2},
        {"output": "w3", "seconds": 0.25, "tokens": 1},
    ]
    base = {
        "pair": "toy-mt",
        "task": "toy-mt",
        "split": "test",
        "limit": 2,
        "method": "greedy",
        "seed": 0,
    }
    old_key = {
        **base,
        "device": "cuda:1",
        "bildlab": "0.2.0",
        "torch": "2.3.0",
        "transformers": "5.1.0",
    }
    old_path = registry.Registry(tmp_path).put(
        old_key, {"key": old_key, "summary": {"examples": 2}, "examples": rows}
    )
    other = registry.Registry(tmp_path).put(
        base | {"device": "cpu"}, {"key": base | {"device": "cpu"}, "summary": {}, "examples": []}
    )
    out = subprocess.run(
        [sys.executable, "-m", "bildlab.cli", "registry", "--migrate", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert (
        f"{tmp_path}: 1 records moved to keys without library versions (none recomputed)"
        in out.stdout
    )
    new_key = {
        **base,
        "device": "cuda",
        "data": {"task": "toy-mt", "version": ev.tasks.toy.VERSION},
    }
    reg = registry.Registry(tmp_path)
    assert not old_path.exists() and sorted(reg.files()) == sorted([reg.path(new_key), other])
    record = reg.get(new_key)
    assert (
        record["key"] == new_key
        and record["examples"] == rows
        and record["summary"] == {"examples": 2}
    )
    assert record["versions"] == {"bildlab": "0.2.0", "torch": "2.3.0", "transformers": "5.1.0"}
    assert ev.migrate(tmp_path) == 0  # nothing left to move


def test_records_are_stored_as_columns_with_each_sweeps_vanilla_runs_once(fake_zoo, tmp_path):
    tmp_path = tmp_path / "results"  # beside the fake zoo
    # the second: lossless
    grid = [{"fallback": 0.3}, {"fallback": 0.6, "rollback": 0.0}, {"method": "small"}]
    made = ev.sweep("toy-mt", grid, registry=tmp_path, **FAST)
    reg = registry.Registry(tmp_path)
    assert all(e["identical"] for e in made[1]["examples"])
    assert [reg.get(r["key"]) for r in made] == made  # read back exactly, rows and all
    # the vanilla runs (and transformers' generate) once for the three records
    (sweep,) = reg.sweep_files()
    assert sweep.stem == made[0]["protocol"]["sweep"]
    for r in made:
        stored = json.loads(reg.path(r["key"]).read_text())["examples"]
        assert stored["sweep_columns"] == sweep.stem and "baseline_output" not in stored["columns"]
        # stats as columns too
        assert set(stored["columns"]["stats"]["columns"]) == set(r["examples"][0]["stats"])
        same = [e["identical"] for e in r["examples"]]
        outputs = reg._load(stored["columns"])["output"]
        assert all((o is None) == i for o, i in zip(outputs, same))  # not twice
    rows = made[0]
    old = tmp_path / "old"
    # rows as bildlab <= 0.2 wrote them are read as they are, and compacted on request
    path = registry.Registry(old).path(rows["key"])
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(rows))
    assert registry.Registry(old).get(rows["key"]) == made[0]
    assert registry.Registry(old).compact() == 1 and registry.Registry(old).compact() == 0
    assert (
        registry.Registry(old).get(rows["key"]) == made[0]
        and len(registry.Registry(old).sweep_files()) == 1
    )
    sweep.unlink()  # a record whose sweep's columns are gone is reported and recomputed
    with pytest.warns(UserWarning, match="corrupt results record"):
        again = ev.sweep("toy-mt", grid[:1], registry=tmp_path, **FAST)
    assert [e["output"] for e in again[0]["examples"]] == [e["output"] for e in made[0]["examples"]]


def test_a_timed_samples_record_is_stored_compactly_and_an_earlier_packing_still_reads(
    fake_zoo, tmp_path
):
    """Stats of a timed sample (None on the untimed examples) as columns, booleans and machine
    indices as strings; a record written in the earlier packing (plain lists) reads the same and
    `compact` rewrites it."""
    reg = registry.Registry(tmp_path / "results")
    made = ev.sweep(
        "toy-mt",
        [{"fallback": 0.3}, {"method": "small"}],
        registry=reg,
        timing_limit=3,
        batch_size=4,
        **FAST,
    )
    for r in made:
        stored = json.loads(reg.path(r["key"]).read_text())["examples"]["columns"]
        assert stored["stats"]["has"] == "".join("1" if i in r["timed"] else "0" for i in range(6))
        stats = columns.unpack(stored["stats"]["columns"])
        assert all(len(c) == 3 for c in stats.values())  # the timed examples' stats only
        # nanoseconds
        assert all(isinstance(v, int) for v in stored["stats"]["columns"]["large_seconds"]["ns"])
        assert set(stored["identical"]) == {"bools"} and len(stored["identical"]["bools"]) == 6
        assert stored["machine"] == {
            "digits": "".join("0" if i in r["timed"] else "-" for i in range(6))
        }
        assert reg.get(r["key"]) == r
    (sweep,) = reg.sweep_files()
    assert set(json.loads(sweep.read_text())["columns"]["baseline_truncated"]) == {"bools"}
    # the packing before this one: plain lists everywhere, the sweep's file too
    for path in reg.files() + [sweep]:
        data = json.loads(path.read_text())
        cols = data["examples"]["columns"] if "examples" in data else data["columns"]
        cols.update(columns.unpack(cols))
        path.write_text(json.dumps(data))
    assert [reg.get(r["key"]) for r in made] == made
    assert reg.compact() == 2 and reg.compact() == 0
    assert [reg.get(r["key"]) for r in made] == made
    assert "bools" in json.loads(sweep.read_text())["columns"]["baseline_truncated"]


def test_a_sweeps_columns_and_outputs_that_no_record_uses_are_unused(fake_zoo, tmp_path):
    reg = tmp_path / "results"
    made = ev.sweep("toy-mt", [{"fallback": 0.3}], registry=reg, **FAST)
    planner = plan.Planner()
    planner.sweep("toy-mt", [{"fallback": 0.3}], registry=reg, **FAST)
    assert plan.unused(reg, planner.read) == []
    stored = registry.Registry(reg)
    # the policy's outputs all equal vanilla's: only vanilla's column is stored
    (vanilla,) = stored.output_files()
    assert [p.name for p in plan.unused(reg, set())] == [
        stored.path(made[0]["key"]).name,
        f"{made[0]['protocol']['sweep']}.json",
        vanilla.name,
    ]


def test_a_column_of_outputs_is_stored_once_by_its_content(fake_zoo, tmp_path):
    """Two sweeps over the same examples (another timed sample) share vanilla's outputs' file; a
    file of outputs that is not the text its name stands for makes its records corrupt (reported,
    recomputed)."""
    reg = registry.Registry(tmp_path / "results")
    one = ev.sweep(
        "toy-mt", [{"fallback": 0.9}], registry=reg, timing_limit=2, batch_size=4, **FAST
    )
    two = ev.sweep(
        "toy-mt", [{"fallback": 0.9}], registry=reg, timing_limit=3, batch_size=4, **FAST
    )
    assert (
        len(reg.sweep_files()) == 2 and one[0]["protocol"]["sweep"] != two[0]["protocol"]["sweep"]
    )
    assert [e["output"] for e in one[0]["examples"]] == [e["output"] for e in two[0]["examples"]]
    assert len(reg.output_files()) == 1 + any(not e["identical"] for e in one[0]["examples"])
    # both sweeps' files read the one file of vanilla's outputs
    (vanilla,) = reg.outputs_read(reg.sweep_files())
    assert vanilla in {p.stem for p in reg.output_files()}
    assert [reg.get(r["key"]) for r in one + two] == one + two
    for path in reg.output_files():  # well-formed JSON, other outputs
        path.write_text(
            json.dumps([None if o is None else o + "!" for o in json.loads(path.read_text())])
        )
    with pytest.warns(UserWarning, match="holds other outputs"):
        assert reg.get(one[0]["key"]) is None


def test_the_committed_registry_is_small():
    size = sum(p.stat().st_size for p in (ROOT / "results" / "toy").rglob("*") if p.is_file())
    # 16.0 MB: timed rows count acceptance by position
    assert size <= 17e6, f"results/toy holds {size / 1e6:.1f} MB"
