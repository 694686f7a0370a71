"""The Ray executor: a sweep fanned out in shards over Ray tasks gives the records of a local run,
survives a killed worker and resumes from its finished shards. The Ray tests share one local Ray
runtime on 2 CPUs and skip where the `ray` extra is not installed."""

import json
import os
import signal
import sys
import threading
import time

import pytest

from bildlab.engine import timing
from bildlab.harness import distributed, shard
from bildlab.harness import evaluate as ev
from bildlab.harness.registry import Registry
from bildlab.measure import costs
from bildlab.measure.summary import summarize
from bildlab.world import tasks

FAST = dict(limit=6, max_new_tokens=8, warmup=1, progress=False)
GRID = [
    {"method": "speculative", "k": 3},
    {"fallback": 0.5, "rollback": 2.0},
    {"method": "speculative", "k": 2, "do_sample": True, "temperature": 1.0},
]
# the name of the Ray task that times a shard (its worker's process title is "ray::_shard")
TASK = "_shard"


@pytest.fixture(scope="module")
def ray_runtime():
    ray = pytest.importorskip(
        "ray", reason='the Ray executor is an optional extra: pip install -e ".[ray]"'
    )
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def untimed(record: dict) -> dict:
    """A record without what depends on the clock or on where it ran."""
    r = json.loads(json.dumps(record))
    del r["machines"]
    r.pop("batching", None)  # how many batches a device's memory made of the outputs
    r["summary"] = {
        k: v for k, v in r["summary"].items() if "speedup" not in k and "per_second" not in k
    }
    for e in r["examples"]:
        for k in ("seconds", "baseline_seconds", "hf_seconds", "machine"):
            del e[k]
        if e["stats"] is not None:  # None: not timed
            e["stats"] = {k: v for k, v in e["stats"].items() if not k.endswith("seconds")}
    return r


def registry_files(root) -> dict:
    reg = Registry(root)
    return {str(p.relative_to(root)): untimed(reg._read(p)) for p in reg.files()}


def submitted(monkeypatch) -> list:
    """Record the shards the driver submits."""
    parts, real = [], distributed.shards
    monkeypatch.setattr(distributed, "shards", lambda *a: parts.extend(real(*a)) or real(*a))
    return parts


def test_a_ray_sweep_in_shards_gives_the_records_of_a_local_run(
    ray_runtime, fake_zoo, tmp_path, monkeypatch
):
    local = ev.sweep("toy-mt", GRID, registry=tmp_path / "local", **FAST)
    parts = submitted(monkeypatch)
    far = ev.sweep("toy-mt", GRID, registry=tmp_path / "ray", executor="ray", shard_size=4, **FAST)
    assert parts == [[0, 1, 2, 3], [4, 5]]
    # outputs, scores, token counts, identical...
    assert [untimed(r) for r in far] == [untimed(r) for r in local]
    assert registry_files(tmp_path / "ray") == registry_files(tmp_path / "local")
    assert not (tmp_path / "ray" / ".partial").exists()
    references = [ex["target"] for ex in tasks.load_task("toy-mt", "test", limit=6)]
    for r in far:
        assert [e["machine"] for e in r["examples"]] == [0] * 6 and r["machines"][0][
            "device"
        ] == "cpu"
        # no calibration: predicted None
        measured = {k: v for k, v in r["summary"].items() if k not in costs.FIELDS}
        # intervals over all 6 examples
        assert measured == summarize(r["examples"], references, metric="bleu")
        assert all(r["summary"][k] is None for k in costs.FIELDS) and r["calibration"] is None
        assert r["summary"]["speedup"] == pytest.approx(
            sum(e["baseline_seconds"] for e in r["examples"])
            / sum(e["seconds"] for e in r["examples"]),
            rel=1e-3,
        )
    # greedy speculative decoding: lossless in every shard
    assert far[0]["summary"]["identical_count"] == 6

    # a rerun with either executor finds the records
    monkeypatch.setattr(shard, "load", lambda *a: pytest.fail("the rerun recomputed"))
    assert ev.sweep("toy-mt", GRID, registry=tmp_path / "ray", executor="ray", **FAST) == far


def _kill_a_shard(killed: list, stop: threading.Event):
    """Kill the first worker seen timing a shard (SIGKILL, by its process id)."""
    while not stop.is_set() and not killed:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    title = f.read().split(b"\0")[0].decode()
                if title == f"ray::{TASK}":
                    os.kill(int(pid), signal.SIGKILL)
                    killed.append(int(pid))
                    return
            except (OSError, UnicodeDecodeError):
                pass
        time.sleep(0.01)


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="finds the worker's process through /proc"
)
def test_a_killed_worker_is_retried_and_the_registry_equals_an_uninterrupted_runs(
    ray_runtime, fake_zoo, tmp_path
):
    killed, stop = [], threading.Event()
    killer = threading.Thread(target=_kill_a_shard, args=(killed, stop))
    killer.start()
    try:
        far = ev.sweep(
            "toy-mt", GRID, registry=tmp_path / "ray", executor="ray", shard_size=2, **FAST
        )
    finally:
        stop.set()
        killer.join()
    assert len(killed) == 1  # a worker died in the middle of a shard ...
    with pytest.raises(ProcessLookupError):
        os.kill(killed[0], 0)
    for r in far:  # ... and the sweep still has every example once
        assert r["summary"]["examples"] == len(r["examples"]) == 6
    local = ev.sweep("toy-mt", GRID, registry=tmp_path / "local", **FAST)
    assert [untimed(r) for r in far] == [untimed(r) for r in local]
    files = registry_files(tmp_path / "ray")
    assert len(files) == len(GRID) and files == registry_files(tmp_path / "local")


class StopAfterFirstShard(ev.Registry):
    """A registry whose sweep is interrupted (Ctrl-C) right after its first checkpoint."""

    calls = 0

    def save_partial(self, sweep_key, rows):
        super().save_partial(sweep_key, rows)
        type(self).calls += 1
        if type(self).calls == 1:
            raise KeyboardInterrupt


def test_an_interrupted_ray_sweep_resumes_without_redoing_finished_shards(
    ray_runtime, fake_zoo, tmp_path, monkeypatch
):
    reg = tmp_path / "ray"
    with pytest.raises(KeyboardInterrupt):
        ev.sweep(
            "toy-mt", GRID, registry=StopAfterFirstShard(reg), executor="ray", shard_size=3, **FAST
        )
    assert not Registry(reg).files()  # no record, not even half of one
    (partial,) = reg.rglob(".partial/*.json")
    first = {int(i): row for i, row in json.loads(partial.read_text())["rows"].items()}
    assert sorted(first) in ([0, 1, 2], [3, 4, 5])  # one whole shard

    parts = submitted(monkeypatch)
    runs = ev.sweep("toy-mt", GRID, registry=reg, executor="ray", shard_size=3, **FAST)
    # only the shard that had not finished
    assert parts == [[i for i in range(6) if i not in first]]
    for n, r in enumerate(runs):
        assert len(r["examples"]) == 6
        for i in first:  # the finished shard's timings are kept, not redone
            # to the ns
            assert r["examples"][i]["seconds"] == timing.ns(first[i][f"policy{n}"]["seconds"])
    assert not (reg / ".partial").exists()
    local = ev.sweep("toy-mt", GRID, registry=tmp_path / "local", **FAST)
    assert [untimed(r) for r in runs] == [untimed(r) for r in local]


# outputs of all 6 examples in batches, 3 of them timed
SAMPLED = dict(FAST, timing_limit=3, batch_size=2)
BATCHED = GRID[:2] + [{"method": "small"}]


def submitted_chunks(monkeypatch) -> list:
    """Record the chunks of outputs the driver submits."""
    parts, real = [], distributed.run_chunks

    def spy(spec, indices, *a, chunk_size=None, **kw):
        parts.extend(list(indices[s : s + chunk_size]) for s in range(0, len(indices), chunk_size))
        return real(spec, indices, *a, chunk_size=chunk_size, **kw)

    monkeypatch.setattr(distributed, "run_chunks", spy)
    return parts


def test_a_ray_sweep_with_a_timed_sample_gives_the_records_of_a_local_run(
    ray_runtime, fake_zoo, tmp_path, monkeypatch
):
    shard._OUTPUTS.clear()  # nothing computed before, in this process
    local = ev.sweep("toy-mt", BATCHED, registry=tmp_path / "local", **SAMPLED)
    shard._OUTPUTS.clear()
    chunks, parts = submitted_chunks(monkeypatch), submitted(monkeypatch)
    far = ev.sweep(
        "toy-mt",
        BATCHED,
        registry=tmp_path / "ray",
        executor="ray",
        chunk_size=4,
        shard_size=2,
        **SAMPLED,
    )
    assert chunks == [[0, 1, 2, 3], [4, 5]]  # every example's outputs, in chunks of 4
    timed = ev.timed_indices(6, 3, 0)
    # the outputs first, then the timed sample in shards of 2
    assert parts == chunks + [timed[:2], timed[2:]]
    for r, q in zip(far, local):
        assert r["timed"] == q["timed"] == timed and r["timed_identical"] == 3
        assert [e["output"] for e in r["examples"]] == [e["output"] for e in q["examples"]]
        assert [e["seconds"] is None for e in r["examples"]] == [i not in timed for i in range(6)]
        # 2 rows each
        assert r["batching"]["policy"]["batches"] == 3 and q["batching"]["policy"]["batches"] == 3
    # outputs, scores, token counts, identical...
    assert [untimed(r) for r in far] == [untimed(r) for r in local]
    assert registry_files(tmp_path / "ray") == registry_files(tmp_path / "local")
    assert not (tmp_path / "ray" / ".partial").exists()


class StopAfterFirstChunk(StopAfterFirstShard):
    """A registry whose sweep is interrupted (Ctrl-C) right after it checkpointed its first chunk of
    outputs."""

    calls = 0

    def save_partial(self, sweep_key, rows):
        if "outputs" in sweep_key:
            super().save_partial(sweep_key, rows)
        else:
            ev.Registry.save_partial(self, sweep_key, rows)


def test_an_interrupted_ray_sweep_resumes_without_redoing_finished_chunks(
    ray_runtime, fake_zoo, tmp_path, monkeypatch
):
    reg = tmp_path / "ray"
    shard._OUTPUTS.clear()
    with pytest.raises(KeyboardInterrupt):
        ev.sweep(
            "toy-mt",
            BATCHED,
            registry=StopAfterFirstChunk(reg),
            executor="ray",
            chunk_size=3,
            **SAMPLED,
        )
    assert not Registry(reg).files()  # no record, not even half of one
    (partial,) = reg.rglob(".partial/*.json")
    (first,) = json.loads(partial.read_text())["rows"].values()
    assert first["indices"] in ([0, 1, 2], [3, 4, 5])  # one whole chunk

    shard._OUTPUTS.clear()  # a new process
    chunks = submitted_chunks(monkeypatch)
    runs = ev.sweep("toy-mt", BATCHED, registry=reg, executor="ray", chunk_size=3, **SAMPLED)
    # only the chunk that had not finished
    assert chunks == [[i for i in range(6) if i not in first["indices"]]]
    assert not (reg / ".partial").exists()
    shard._OUTPUTS.clear()
    local = ev.sweep("toy-mt", BATCHED, registry=tmp_path / "local", **SAMPLED)
    assert [untimed(r) for r in runs] == [untimed(r) for r in local]


def test_an_interrupted_local_sweep_resumes_without_redoing_finished_chunks(
    fake_zoo, tmp_path, monkeypatch
):
    """In this process too, the batched outputs are checkpointed chunk by chunk: a sweep cut off
    after its first chunk computes only the others when run again, into the same records."""
    reg = tmp_path / "cut"
    shard._OUTPUTS.clear()
    StopAfterFirstChunk.calls = 0
    with pytest.raises(KeyboardInterrupt):
        ev.sweep("toy-mt", BATCHED, registry=StopAfterFirstChunk(reg), chunk_size=4, **SAMPLED)
    assert not Registry(reg).files()
    (partial,) = reg.rglob(".partial/*.json")
    (first,) = json.loads(partial.read_text())["rows"].values()
    assert first["indices"] == [0, 1, 2, 3]

    shard._OUTPUTS.clear()  # a new process
    computed, real = [], shard.compute_outputs

    def spy(spec, indices, *a, **kw):
        computed.append(list(indices))
        return real(spec, indices, *a, **kw)

    monkeypatch.setattr(shard, "compute_outputs", spy)
    runs = ev.sweep("toy-mt", BATCHED, registry=reg, chunk_size=4, **SAMPLED)
    assert computed == [[4, 5]]
    assert not (reg / ".partial").exists()
    shard._OUTPUTS.clear()
    whole = ev.sweep("toy-mt", BATCHED, registry=tmp_path / "whole", chunk_size=6, **SAMPLED)
    assert [untimed(r) for r in runs] == [untimed(r) for r in whole]


KERNEL = """
import sys
from jupyter_client.manager import start_new_kernel

km, kc = start_new_kernel(kernel_name="python3")
reply = kc.execute_interactive(sys.argv[1], timeout=240)
kc.stop_channels()
km.shutdown_kernel()
sys.exit(reply["content"]["status"] != "ok")
"""


@pytest.mark.slow
def test_a_ray_sweep_in_a_notebook_kernel_stops_the_runtime_it_started(fake_zoo, tmp_path):
    # a study notebook's kernel, stopped while still connected to Ray, got SIGTERM and Ray printed a
    # stack dump
    pytest.importorskip(
        "ray", reason='the Ray executor is an optional extra: pip install -e ".[ray]"'
    )
    import subprocess

    code = (
        "import ray; from bildlab.harness import evaluate as ev; "
        f"ev.sweep('toy-mt', [{{'method': 'speculative', 'k': 2}}], "
        f"registry={str(tmp_path / 'reg')!r}, executor='ray', limit=2, max_new_tokens=4, warmup=0, "
        f"progress=False); assert not ray.is_initialized()"
    )
    # a runtime of its own, started by the sweep
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    run = subprocess.run(
        [sys.executable, "-c", KERNEL, code], capture_output=True, text=True, timeout=300, env=env
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(Registry(tmp_path / "reg").files()) == 1  # the sweep ran
    assert "SIGTERM received" not in run.stderr, run.stderr[-3000:]


# -- without Ray (these run everywhere)


def test_without_ray_the_local_executor_works_and_the_ray_one_names_the_extra(
    fake_zoo, tmp_path, monkeypatch
):
    # `import ray` now fails as if it were not installed
    monkeypatch.setitem(sys.modules, "ray", None)
    run = ev.evaluate("toy-mt", method="greedy", registry=tmp_path, **FAST)
    assert run["summary"]["examples"] == 6 and run["machines"][0]["device"] == "cpu"
    monkeypatch.setattr(shard, "load", lambda *a: pytest.fail("a model was loaded"))
    for executor in ("ray", "auto", "ray://head:10001"):
        with pytest.raises(
            ImportError, match=r'optional extra of bildlab: pip install -e "\.\[ray\]"'
        ):
            ev.evaluate("toy-mt", method="bild", registry=tmp_path, executor=executor, **FAST)
        with pytest.raises(ImportError, match=r"\[ray\]"):
            distributed.check(executor)
    distributed.check("local")


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(executor="dask"), ["executor", "'local'", "'ray'", "ray://host:port"]),
        (dict(executor="ray://"), ["executor"]),
        (dict(executor=None), ["executor"]),
        (dict(shard_size=0), ["shard_size", ">= 1"]),
        (dict(shard_size=2.5), ["shard_size"]),
    ],
)
def test_bad_executor_arguments_fail_before_any_model_loads(monkeypatch, tmp_path, kwargs, words):
    monkeypatch.setattr(shard, "load", lambda *a: pytest.fail("a model was loaded"))
    with pytest.raises(ValueError) as info:
        ev.evaluate("toy-mt", registry=tmp_path, progress=False, **kwargs)
    for w in words:
        assert w in str(info.value)


def test_shards_and_their_resources():
    assert distributed.shards([3, 4, 5, 7, 9], 2) == [[3, 4], [5, 7], [9]]
    assert distributed.default_shard_size(300, 8) == 19
    assert distributed.default_shard_size(6, 2) == distributed.MIN_SHARD
    assert distributed.default_shard_size(10**5, 8) == distributed.MAX_SHARD
    assert distributed.resources("cuda", 1) == {"num_cpus": 1, "num_gpus": 1}
    assert distributed.resources("cpu", 2) == {"num_cpus": 2} and distributed.resources(
        "cpu", None
    ) == {"num_cpus": 1}


class FakeRay:
    """Enough of Ray for the driver loop: shards finish in the order submitted, `cancel` is
    recorded."""

    def __init__(self):
        self.refs, self.cancelled = [], []

    def cluster_resources(self):
        return {"CPU": 2}

    def remote(self, fn):
        ray = self

        class Task:
            def options(self, **_):
                return self

            def remote(self, spec, part, *rest):
                ray.refs.append((len(ray.refs), tuple(part)))
                return ray.refs[-1]

        return Task()

    def wait(self, refs, num_returns):
        return sorted(refs)[:num_returns], sorted(refs)[num_returns:]

    def get(self, ref):
        return {i: {} for i in ref[1]}

    def cancel(self, ref, force=False):
        self.cancelled.append((ref[0], force))

    def is_initialized(self):
        return True  # connected before the sweep: the driver neither starts nor stops a runtime


def test_an_interrupted_driver_kills_the_shards_still_running_and_no_others():
    # an interrupted worker (ray.cancel without force) is reused by Ray; interrupted inside `import
    # torch` it failed every later shard with "partially initialized module 'torch'"
    ray, seen = FakeRay(), []

    def on_rows(rows):
        seen.append(sorted(rows))
        if len(seen) == 2:
            raise KeyboardInterrupt

    spec = {"device": "cpu", "threads": 1}
    distributed_ray = distributed._ray
    try:
        distributed._ray = lambda: ray
        with pytest.raises(KeyboardInterrupt):
            distributed.run_shards(spec, list(range(10)), on_rows, executor="ray", shard_size=2)
    finally:
        distributed._ray = distributed_ray
    assert seen == [[0, 1], [2, 3]]
    # the three shards not finished, each killed
    assert ray.cancelled == [(2, True), (3, True), (4, True)]


def test_rows_timed_on_different_device_models_make_no_record(fake_zoo, monkeypatch):
    from bildlab.harness import records
    from bildlab.world.models import zoo_dir

    found = ev.lookup(
        "toy-mt",
        [{"method": "bild", "fallback": 0.5}],
        registry=None,
        limit=4,
        max_new_tokens=4,
        warmup=0,
        hf_baseline=False,
    )
    spec = dict(
        pair="toy-mt",
        task=found.task,
        split=found.split,
        limit=4,
        entries=found.entries,
        zoo=str(zoo_dir()),
        **{k: v for k, v in found.run.items() if k in shard.SPEC},
    )
    done = shard.time_shard(spec, [0, 1])
    (one,) = records.build_records(
        spec, found.keys, {**done, **shard.time_shard(spec, [2, 3])}, sweep="s"
    )
    # one device: a record
    assert [e["machine"] for e in one["examples"]] == [0] * 4 and len(one["machines"]) == 1
    real = shard.machine
    monkeypatch.setattr(
        shard, "machine", lambda device: {**real(device), "device_name": "NVIDIA A10G"}
    )
    done.update(shard.time_shard(spec, [2, 3]))  # a resumed sweep, timed elsewhere
    with pytest.raises(
        ValueError,
        match="were timed on NVIDIA A10G, cpu: a speedup is a ratio of times taken on "
        "one kind of device",
    ):
        records.build_records(spec, found.keys, done, sweep="s")
