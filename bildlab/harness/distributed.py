"""Fan the examples of a sweep out over Ray tasks: many GPUs on one box, or a Ray cluster.

    sweep("toy-mt", grid, limit=300, executor="ray", shard_size=20)        # a Ray runtime on this machine
    sweep("cnn_dailymail", grid, device="cuda", executor="ray://head:10001", timing_limit=300, chunk_size=500)

A sweep has two kinds of work, and each Ray task holds one whole device (one GPU, or `threads` CPU
cores on a CPU-only cluster), so two tasks never share a GPU:

- a chunk (`run_chunks`; with `timing_limit`): a run of consecutive example indices whose outputs
  every runner still missing computes in batches (`shard.compute_outputs`, `batch.generate_batch`
  under the device's memory budget): exact tokens, whatever device or chunking computed them. The
  driver puts them together in example order. - a shard (`run_shards`): a run of consecutive indices
  of the timed examples (all of them, or the seeded sample of `timing_limit`), timed by
  `shard.time_shard`: the vanilla runners and every policy of the sweep interleaved on those
  examples under the one timing protocol, exactly as on one machine (each shard warms up on its own
  first examples), each batch-1 output later checked against its batched one. Every row says where
  it was timed.

The chunks of a sweep run first, all devices at once, then its shards (about two tasks of each kind
per device by default, so that N devices take about 1/N of one device's time). The driver hands
finished chunks and shards to callbacks that checkpoint them, so an interrupted sweep resumes
without redoing them, and `evaluate` merges them into the same records as a local run. A task whose
worker dies (killed, node lost) is rerun by Ray (`MAX_RETRIES`); an exception inside a task is a bug
and fails the sweep at once.

Executors: "local" (this process, no Ray; the default), "ray" (the Ray runtime of this process if
one is up, else a new one on this machine with all its GPUs and cores, or the cluster named by
$RAY_ADDRESS), "auto" (the Ray cluster already running on this machine, `ray start --head`) and
"ray://host:port" (a cluster by its client address). A sweep that connected to Ray disconnects when
it ends (a runtime it started stops); a connection made before it (`ray.init()`) is reused and left
open. Ray is an optional extra: pip install -e ".[ray]"."""

from __future__ import annotations

import importlib
import math
import os

EXECUTORS = ("local", "ray", "auto", "ray://host:port")
EXTRA = 'pip install -e ".[ray]"'
MAX_RETRIES = 3  # reruns of a shard whose worker died
# default shard sizes: enough examples to pay for a warm-up, few enough to checkpoint
MIN_SHARD, MAX_SHARD = 10, 100
# default chunk sizes: enough rows to fill batches, few enough to checkpoint
MIN_CHUNK, MAX_CHUNK = 50, 1000
# the driver's, seen by tasks
PASS_ENV = ("BILDLAB_ZOO", "BILDLAB_CACHE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def _ray():
    """The ray module, or an ImportError that says how to install it."""
    try:
        return importlib.import_module("ray")
    except ImportError as e:
        raise ImportError(
            f"the Ray executor needs Ray, an optional extra of bildlab: {EXTRA} "
            f"(or pip install 'ray>=2.9'); executor='local' runs without it"
        ) from e


def check(executor, shard_size=None, chunk_size=None) -> None:
    """Validate the executor arguments before anything runs (for sweep/evaluate and the study's
    parameters); a Ray executor also needs Ray importable."""
    ok = isinstance(executor, str) and (
        executor in EXECUTORS[:3]
        or (executor.startswith("ray://") and len(executor) > len("ray://"))
    )
    if not ok:
        raise ValueError(
            f"executor must be 'local', 'ray' (this machine), 'auto' (the Ray cluster running here) or "
            f"'ray://host:port' (a cluster by address); got {executor!r}"
        )
    if shard_size is not None and (
        isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1
    ):
        raise ValueError(
            f"shard_size must be None (automatic) or an integer >= 1; got {shard_size!r}"
        )
    if chunk_size is not None and (
        isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1
    ):
        raise ValueError(
            f"chunk_size must be None (automatic) or an integer >= 1; got {chunk_size!r}"
        )
    if executor != "local":
        _ray()


def connect(executor: str):
    """The ray module, connected to the runtime that `executor` names (an existing connection is
    reused)."""
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=None if executor == "ray" else executor, log_to_driver=False)
    return ray


def resources(device: str, threads: int | None) -> dict:
    """What one shard holds: one whole GPU (and its host threads), or `threads` CPU cores."""
    cpus = threads or 1
    return (
        {"num_cpus": cpus, "num_gpus": 1} if str(device).startswith("cuda") else {"num_cpus": cpus}
    )


def shards(indices: list[int], size: int) -> list[list[int]]:
    """Consecutive runs of `size` indices (the last may be shorter)."""
    return [list(indices[s : s + size]) for s in range(0, len(indices), size)]


def default_shard_size(n: int, slots: int) -> int:
    """About two shards per device slot, within [MIN_SHARD, MAX_SHARD] examples."""
    return _two_per_slot(n, slots, MIN_SHARD, MAX_SHARD)


def default_chunk_size(n: int, slots: int) -> int:
    """About two chunks per device slot, within [MIN_CHUNK, MAX_CHUNK] examples."""
    return _two_per_slot(n, slots, MIN_CHUNK, MAX_CHUNK)


def _two_per_slot(n: int, slots: int, low: int, high: int) -> int:
    return max(low, min(high, math.ceil(n / (2 * max(slots, 1)))))


def _here(spec: dict, env: dict) -> dict:
    """In a task: the driver's settings (a reused worker may hold an earlier task's), and the task's
    device."""
    for k in PASS_ENV:
        if k in env:
            os.environ[k] = env[k]
        else:
            os.environ.pop(k, None)
    if str(spec["device"]).startswith("cuda"):
        spec = {**spec, "device": "cuda"}  # Ray makes the task's GPU the only visible one
    return spec


def _shard(spec: dict, indices: list[int], env: dict) -> dict[int, dict]:
    """One Ray task: time examples `indices` of the sweep `spec` on the device this task holds."""
    from .shard import time_shard

    return time_shard(_here(spec, env), indices)


def _chunk(
    spec: dict, indices: list[int], names: list[str], batch_size: int, memory, env: dict
) -> dict:
    """One Ray task: the runners `names`' batched outputs for examples `indices`, on the device this
    task holds."""
    from .shard import compute_outputs

    return compute_outputs(_here(spec, env), indices, names, batch_size, memory)


def run_shards(
    spec: dict,
    indices: list[int],
    on_rows,
    *,
    executor: str = "ray",
    shard_size: int | None = None,
    progress: bool | str = False,
) -> None:
    """Time the examples `indices` of a sweep in Ray tasks of `shard_size` examples;
    `on_rows({index: row})` is called in the driver as each shard finishes. On any error or
    interrupt the shards still running are cancelled and their workers killed (what finished has
    been handed to on_rows)."""

    def submit(ray, res, slots, env):
        task = ray.remote(_shard).options(max_retries=MAX_RETRIES, retry_exceptions=False, **res)
        parts = shards(indices, shard_size or default_shard_size(len(indices), slots))
        return {task.remote(spec, part, env): part for part in parts}

    def done(part, rows):
        if sorted(rows) != sorted(part):
            raise RuntimeError(f"a shard returned examples {sorted(rows)} for {part}")
        on_rows(rows)

    _run_tasks(spec, executor, submit, done, progress, "shards")


def run_chunks(
    spec: dict,
    indices: list[int],
    names: list[str],
    batch_size: int,
    memory,
    on_chunk,
    *,
    executor: str = "ray",
    chunk_size: int | None = None,
    progress: bool | str = False,
) -> None:
    """The runners `names`' batched outputs for the examples `indices`, in Ray tasks of `chunk_size`
    examples; `on_chunk(part, {name: ([tokens per index of part], layout)})` is called in the driver
    as each chunk finishes (errors and interrupts as in `run_shards`)."""

    def submit(ray, res, slots, env):
        task = ray.remote(_chunk).options(max_retries=MAX_RETRIES, retry_exceptions=False, **res)
        parts = shards(indices, chunk_size or default_chunk_size(len(indices), slots))
        return {task.remote(spec, part, names, batch_size, memory, env): part for part in parts}

    def done(part, made):
        if sorted(made) != sorted(names) or any(len(made[n][0]) != len(part) for n in names):
            raise RuntimeError(
                f"a chunk returned runners {sorted(made)} for {names} on {len(part)} examples"
            )
        on_chunk(part, made)

    _run_tasks(spec, executor, submit, done, progress, "chunks")


def _run_tasks(spec, executor, submit, done, progress, what) -> None:
    """Connect, submit the tasks (`submit(ray, resources, slots, env)` -> {ref: part}), hand each
    result to `done(part, result)` as it arrives, and on any error or interrupt kill the tasks still
    running."""
    check(executor)
    ray = _ray()
    # this sweep connects (starting a runtime for "ray"), and disconnects at its end
    own = not ray.is_initialized()
    connect(executor)
    try:
        res = resources(spec["device"], spec["threads"])
        total = ray.cluster_resources()
        if res.get("num_gpus") and total.get("GPU", 0) < 1:
            raise ValueError(
                f"device={spec['device']!r}: the Ray cluster has no GPU (resources {total}); "
                f"use device='cpu' or a cluster with GPUs"
            )
        slots = (
            int(total.get("GPU", 0))
            if res.get("num_gpus")
            else int(total.get("CPU", 1) // res["num_cpus"])
        )
        if slots < 1:
            raise ValueError(
                f"threads={spec['threads']}: a task needs {res['num_cpus']} CPUs, the Ray cluster has "
                f"{total.get('CPU', 0):g}"
            )
        env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
        pending = submit(ray, res, slots, env)
        _gather(ray, pending, done, progress, what)
    finally:
        # a Jupyter kernel stopped while still connected gets SIGTERM, and Ray prints a 30-line
        # stack dump
        if own:
            ray.shutdown()


def _gather(ray, pending: dict, done, progress, what: str) -> None:
    bar = None
    if progress:
        from ..engine.timing import progress_bar

        label = progress if isinstance(progress, str) else "sweep"
        bar = progress_bar(None, total=len(pending), desc=f"{label} ({what})")
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                part = pending.pop(ref)
                done(part, ray.get(ref))
                if bar is not None:
                    bar.update()
    finally:
        for ref in pending:
            # killed, not interrupted: a KeyboardInterrupt raised inside `import torch` leaves the
            # worker, which Ray reuses for later tasks, with a half-imported torch that every later
            # import fails on
            ray.cancel(ref, force=True)
        if bar is not None:
            bar.close()
