"""Evaluation harness: a sweep of decoding policies over a task split for a pair, timed under the
one protocol (`timing`) side by side with ONE vanilla run per example, scored with paired-bootstrap
intervals (`summary`), and kept as one JSON record per policy in the registry (`registry`).

    runs = sweep("toy-mt", [{"fallback": 0.5, "rollback": 3.0}, {"fallback": 0.7, "rollback": 3.0}], limit=300)
    run = evaluate("toy-mt", method="bild", fallback=0.5, rollback=3.0, limit=300)   # a sweep of one
    run["summary"]   # score, delta, speedup (each with a 95% interval), identical, truncated, small_share, ...

For every example, the vanilla large model in bildlab's own loop (the primary denominator: same
loop, so a speedup is the method's), transformers' `generate` (the secondary denominator: what a
user would otherwise run) and every policy of the sweep that has no record yet run round-robin in a
rotating order; a sweep of G new policies costs G + 2 decodes per example (G + 1 with
hf_baseline=False). Speculative sampling is compared with the large model sampling alone (same
temperature, same seed per example) instead.

The registry key holds everything that defines a run (pair, task, split, limit, method, draft,
policy, seed, max_new_tokens, the device type, the protocol's thread count and repeats, the timing
pass, the model files and the data); a second, independent timing of the same policies is
`timing_pass=2`. The library versions a record was made with are provenance in the record
(`versions`): records are replayed under other releases, and `recompute=True` recomputes those made
under versions other than this environment's."""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from ..engine import memory as mem
from ..engine import timing
from ..engine.decoding import check_budget
from ..world import tasks
from ..world.models import PAIRS, TOY_PAIRS, fingerprint, task_of, zoo_dir
from ..world.models import provenance as models_provenance
from . import calibrate, distributed, records, shard
from .benchmark import transformers_version
from .registry import DEFAULT_REGISTRY, Registry, differences, digest, versions
from .shard import DEFAULTS, POLICY_ARGS

DRAFTS = ("small", "aligned", "early-exit")
# "small": the draft model alone (greedy), an anchor; "hf_assisted" / "hf_prompt_lookup":
# transformers' assisted generation (k tokens a step, constant schedule) / prompt lookup, beside
# bildlab's speculative / "prompt-lookup"
METHODS = (
    "greedy",
    "speculative",
    "bild",
    "small",
    "hf_assisted",
    "prompt-lookup",
    "hf_prompt_lookup",
)
CHECKPOINT_SECONDS = 20  # how often a running sweep writes its finished examples to disk
LOCAL_CHUNK = 250  # examples per chunk of batched outputs in this process (each checkpointed)


def policy_of(method: str, k: int, fallback: float, rollback: float, max_small_steps: int, **rest):
    """The parameters that matter for `method`, as the registry key holds them: the `Policy.key` of
    the engine's method it runs (`rest`: do_sample, temperature, rollback_rule, ngram)."""
    entry = dict(method=method, k=k, fallback=fallback, rollback=rollback, **rest)
    return shard.policy({**entry, "max_small_steps": max_small_steps}).key()


def check_entry(pair: str, entry: dict) -> None:
    """One policy of a sweep, checked before any model loads."""
    unknown = sorted(set(entry) - set(POLICY_ARGS))
    if unknown:
        raise ValueError(
            f"unknown policy argument(s) {', '.join(unknown)}; a policy takes {', '.join(POLICY_ARGS)}"
        )
    e = {**DEFAULTS, **entry}
    method, draft = e["method"], e["draft"]
    if method == "sample":
        raise ValueError(
            "method='sample' is the sampling baseline itself; evaluate method='speculative' with "
            "do_sample=True to compare speculative sampling with it"
        )
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}; got {method!r}")
    if draft not in DRAFTS:
        raise ValueError(f"draft must be one of {', '.join(DRAFTS)}; got {draft!r}")
    if draft == "aligned" and pair in TOY_PAIRS and TOY_PAIRS[pair][2] is None:
        raise ValueError(f"draft='aligned': pair {pair!r} has no aligned small model")
    if draft == "early-exit" and pair not in TOY_PAIRS:
        raise ValueError(
            f"draft='early-exit' is for the toy pairs ({', '.join(TOY_PAIRS)}); pair {pair!r} has none"
        )
    if method == "hf_prompt_lookup" and encoder_decoder(pair):
        raise ValueError(
            f"method='hf_prompt_lookup' is for decoder-only pairs; pair {pair!r} is encoder-decoder"
        )
    if method == "hf_assisted" and encoder_decoder(pair) and transformers_version() < (5, 22):
        raise ValueError(
            "method='hf_assisted': transformers' assisted generation of encoder-decoder models fails "
            f"inside transformers < 5.22; pair {pair!r} is encoder-decoder"
        )
    if not isinstance(e["do_sample"], bool):
        raise TypeError(f"do_sample must be True or False; got {e['do_sample']!r}")
    if e["do_sample"] and method != "speculative":
        raise ValueError(
            f"do_sample=True is for method='speculative' (speculative sampling); got method={method!r}"
        )
    t = e["temperature"]
    if e["do_sample"] and (isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0):
        raise ValueError(f"temperature must be a number > 0; got {t!r}")
    shard.policy(e)  # the engine's checks of the policy


def encoder_decoder(pair: str) -> bool:
    """Whether a pair's models are encoder-decoder, from its name (the toy Llama pair is the only
    decoder-only one)."""
    return not (pair in TOY_PAIRS and TOY_PAIRS[pair][0].startswith("llama"))


def per_pair(value, pair: str, name: str):
    """A run argument given per pair ({pair: value}, e.g. a test size per task) resolved for `pair`;
    any other value is returned as it is."""
    if not isinstance(value, dict):
        return value
    if pair not in value:
        raise ValueError(
            f"{name} gives no value for pair {pair!r}; it has: {', '.join(map(str, value))}"
        )
    return value[pair]


def check_run(
    pair: str, task: str, split: str, limit, max_new_tokens, seed, hf_baseline, timing_pass
) -> None:
    """The arguments shared by the policies of a sweep, checked before any model loads."""
    if pair not in PAIRS:
        raise ValueError(f"pair must be one of {', '.join(PAIRS)}; got {pair!r}")
    if task not in tasks.ALL_TASKS:
        raise ValueError(f"task must be one of {', '.join(tasks.ALL_TASKS)}; got {task!r}")
    if split not in tasks.SPLITS:
        raise ValueError(f"split must be one of {', '.join(tasks.SPLITS)}; got {split!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(
            f"limit must be None, an integer >= 1 or a dict of them per pair; got {limit!r}"
        )
    check_budget(max_new_tokens)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int; got {seed!r}")
    if not isinstance(hf_baseline, bool):
        raise TypeError(f"hf_baseline must be True or False; got {hf_baseline!r}")
    if isinstance(timing_pass, bool) or not isinstance(timing_pass, int) or timing_pass < 1:
        raise ValueError(f"timing_pass must be an integer >= 1; got {timing_pass!r}")


def run_key(
    pair: str,
    task: str,
    split: str,
    limit,
    entry: dict,
    *,
    seed: int,
    max_new_tokens: int,
    device: str,
    threads,
    repeats: int,
    hf_baseline: bool,
    timing_pass: int,
    timing_limit: int | None = None,
    compile: bool = False,
    provenance: bool = True,
) -> dict:
    """The registry key of one policy of a sweep: what defines its record (library versions are not
    part of it; `compile` only when True, so that eager records keep their keys)."""
    e = {**DEFAULTS, **entry}
    policy = shard.policy(e).key()
    draft = (
        e["draft"] if e["method"] not in ("greedy", "prompt-lookup", "hf_prompt_lookup") else None
    )
    return {
        "pair": pair,
        "task": task,
        "split": split,
        "limit": limit,
        "method": e["method"],
        "draft": draft,
        "policy": policy,
        "baseline": "sample" if e["do_sample"] else "greedy",
        "secondary": "hf_greedy" if hf_baseline and not e["do_sample"] else None,
        "seed": seed,
        "max_new_tokens": max_new_tokens,
        "device": torch.device(device).type,
        "threads": threads,
        "repeats": repeats,
        "timing_pass": timing_pass,
        **({"timing_limit": timing_limit} if timing_limit is not None else {}),
        **({"compile": True} if compile else {}),
        **(_provenance(pair, task, split, draft or "small") if provenance else {}),
    }


def rekey(key: dict) -> dict:
    """The key of a record made by bildlab <= 0.2, whose key held the library versions
    (`Registry.migrate` takes those out): the device type instead of the device, and the toy data's
    version (then the package's)."""
    return {
        **key,
        "device": torch.device(key["device"]).type,
        "data": key.get("data") or _data_provenance(key["task"], key["split"]),
    }


def migrate(registry: str | Path | Registry = DEFAULT_REGISTRY) -> int:
    """Move a registry's records to keys without library versions; returns how many moved (none
    recomputed)."""
    reg = Registry.of(registry)
    return reg.migrate(rekey)


def _provenance(pair: str, task: str, split: str, draft: str) -> dict:
    """What the outputs are a function of besides the policy: a toy pair's model files (content
    hash) and its task's generator version, or a paper pair's repos and commits and its data's
    source, commit, file hashes and preprocessing version."""
    models = fingerprint(pair, draft) if pair in TOY_PAIRS else models_provenance(pair, draft)
    return {"models": models, "data": _data_provenance(task, split)}


@lru_cache(maxsize=16)
def _data_provenance(task: str, split: str) -> dict:
    return tasks.provenance(task, split)


def evaluate(
    pair: str, task: str | None = None, method: str = "bild", *, check_only: bool = False, **kwargs
) -> dict | None:
    """One policy: a sweep of one. `kwargs` are the policy's parameters (`shard.POLICY_ARGS`, their
    defaults `shard.DEFAULTS`) and `sweep`'s run arguments. check_only=True validates and returns
    None."""
    entry = {"method": method, **{n: kwargs.pop(n) for n in POLICY_ARGS[1:] if n in kwargs}}
    run = kwargs
    records = sweep(pair, [entry], task=task, check_only=check_only, **run)
    return None if check_only else records[0]


def sweep(
    pair: str, grid: list[dict], *, progress: bool = True, check_only: bool = False, **run
) -> list[dict] | None:
    """Evaluate every policy of `grid` (dicts of POLICY_ARGS over the common ones in `run`) on the
    same examples; one record each. `run`: the arguments of `lookup` (task, split, limit,
    max_new_tokens, seed, warmup, threads, repeats, hf_baseline, timing_pass, registry, force,
    device, executor, shard_size, recompute, timing_limit, batch_size, memory, chunk_size, compile,
    common policy args).

    Every entry is checked before anything runs (`check_only=True` stops there). Policies with a
    record in the registry are not rerun (whatever library versions made it; `recompute=True` reruns
    those made under other versions, `force=True` all); the others are timed together, interleaved
    with one vanilla run per example (module docstring). Finished examples are checkpointed, so an
    interrupted sweep resumes where it stopped; records appear whole or not at all. `executor`
    "local" times the examples in this process; "ray", "auto" or "ray://host:port" fan them out in
    shards of `shard_size` examples over Ray tasks, one device each (`distributed`), into the same
    records. `timing_limit=N`: quality from every example's outputs, computed in batches (exact;
    batches of at most `batch_size` rows under the `memory` budget; on Ray in chunks of `chunk_size`
    examples), speed from the protocol at batch 1 on a seeded sample of N of them. `compile=True`:
    the timed decodes use compiled steps on static caches (`static.py`), compiled before the first
    one (`protocol.compile_seconds` in each record); outputs in batches stay eager (identical token
    for token: the record's `timed_identical` checks it)."""
    found = lookup(pair, grid, **run)
    if check_only:
        return None
    made = _run(found, progress) if found.todo else []
    return found.records(made)


@dataclass
class Lookup:
    """What a sweep would compute: its policies (`entries`) and their `keys`, the records the
    registry has (`found`, None where missing) and the policies to compute (`todo`, indices; a
    policy given twice counted once)."""

    pair: str
    task: str
    split: str
    limit: int | None
    entries: list[dict]
    keys: list[dict]
    found: list[dict | None]
    todo: list[int]
    registry: Registry | None
    # the protocol and machine arguments: seed, max_new_tokens, warmup, threads, repeats,
    # hf_baseline, ...
    run: dict

    def examples(self) -> int:
        """The number of examples the sweep covers, without loading a paper task's data (its
        published row count)."""
        return _size(self.task, self.split, self.limit)

    def timed(self) -> list[int]:
        """The examples the protocol times at batch 1 (all of them unless `timing_limit`)."""
        return timed_indices(self.examples(), self.run["timing_limit"], self.run["seed"])

    def runners(self) -> list[str]:
        """The runners a computation of `todo` would time per example."""
        return (
            shard.runner_names([self.entries[i] for i in self.todo], self.run["hf_baseline"])
            if self.todo
            else []
        )

    def checkpoint_key(self) -> dict:
        """The key of the checkpoints (`.partial/`) a computation of `todo` resumes from: its
        policies' keys and runners (its outputs' chunks are keyed by this key, the runners' names
        and the batch size). A checkpoint of another set of policies is not read."""
        return {"keys": [self.keys[i] for i in self.todo], "runners": self.runners()}

    def records(self, made: list[dict]) -> list[dict]:
        """One record per policy: the found ones, and `made` (the records of `todo`, in order) for
        the others."""
        out = list(self.found)
        for i, rec in zip(self.todo, made):
            out[i] = rec
        return [
            out[i] if out[i] is not None else out[self.keys.index(self.keys[i])]
            for i in range(len(self.keys))
        ]


def lookup(
    pair: str,
    grid: list[dict],
    *,
    task: str | None = None,
    split: str = "test",
    limit: int | None = 50,
    max_new_tokens: int = 128,
    seed: int = 0,
    warmup: int = 2,
    threads: int | None = 1,
    repeats: int = 1,
    hf_baseline: bool = True,
    timing_pass: int = 1,
    registry: str | Path | Registry | None = DEFAULT_REGISTRY,
    force: bool = False,
    device: str = "cpu",
    executor: str = "local",
    shard_size: int | None = None,
    recompute: bool = False,
    timing_limit: int | dict | None = None,
    batch_size: int = 64,
    memory: int | str | None = None,
    chunk_size: int | None = None,
    compile: bool = False,
    offline: bool = False,
    **common,
) -> Lookup:
    """Check a sweep's arguments and find what it would compute, loading no model. `offline=True` (a
    plan on a machine without the paper's models or data): where their provenance cannot be had,
    nothing is looked up and every policy is to run. `timing_limit`: outputs and quality on every
    example (computed in batches of `batch_size`, `batch.generate_batch`), the timing protocol at
    batch 1 on a seeded sample of this many of them (`timed_indices`); None times every example.
    `limit` and `timing_limit` may be dicts per pair. `memory`: what a batch may take on a device
    (bytes or "12GiB"; None: the device's free memory less a margin, `memory.CPU_MEMORY` on a CPU);
    `chunk_size`: examples per chunk of batched outputs, each checkpointed as it finishes (a Ray
    task's; None: about two per device on Ray, `LOCAL_CHUNK` in this process).
    `compile=True`: every runner of bildlab's engine (the vanilla greedy one and the policies) times
    compiled steps on static caches (`shard.check_compile`), against compiled greedy; transformers'
    `generate` stays as it is."""
    task = task or (task_of(pair) if pair in PAIRS else None)
    limit, timing_limit = (
        per_pair(limit, pair, "limit"),
        per_pair(timing_limit, pair, "timing_limit"),
    )
    if (
        not isinstance(grid, (list, tuple))
        or not grid
        or not all(isinstance(e, dict) for e in grid)
    ):
        raise ValueError(f"grid must be a non-empty list of policy dicts; got {grid!r}")
    check_run(pair, task, split, limit, max_new_tokens, seed, hf_baseline, timing_pass)
    timing.check(threads, repeats, warmup)
    distributed.check(executor, shard_size, chunk_size)
    mem.parse(memory)
    if not isinstance(recompute, bool):
        raise TypeError(f"recompute must be True or False; got {recompute!r}")
    entries = [{**DEFAULTS, **common, **e} for e in grid]
    for e in entries:
        check_entry(pair, e)
    check_timing_limit(timing_limit, batch_size, entries)
    shard.check_compile(compile, entries)
    reg = None if registry is None else Registry.of(registry)
    common_key = dict(
        seed=seed,
        max_new_tokens=max_new_tokens,
        device=device,
        threads=threads,
        repeats=repeats,
        hf_baseline=hf_baseline,
        timing_pass=timing_pass,
        timing_limit=timing_limit,
        compile=compile,
    )
    try:
        keys = [run_key(pair, task, split, limit, e, **common_key) for e in entries]
    except (OSError, RuntimeError):
        if not offline:
            raise
        keys, reg = (
            [run_key(pair, task, split, limit, e, **common_key, provenance=False) for e in entries],
            None,
        )
    found = [None if reg is None or force else reg.get(key) for key in keys]
    if recompute:
        here = versions()
        found = [
            None if rec is not None and differences(rec.get("versions"), here) else rec
            for rec in found
        ]
    todo = [i for i, rec in enumerate(found) if rec is None]
    # a policy given twice
    todo = [i for n, i in enumerate(todo) if keys[i] not in [keys[j] for j in todo[:n]]]
    run = dict(
        seed=seed,
        max_new_tokens=max_new_tokens,
        warmup=warmup,
        threads=threads,
        repeats=repeats,
        hf_baseline=hf_baseline,
        device=device,
        executor=executor,
        shard_size=shard_size,
        timing_limit=timing_limit,
        batch_size=batch_size,
        memory=memory,
        chunk_size=chunk_size,
        compile=compile,
    )
    return Lookup(pair, task, split, limit, entries, keys, found, todo, reg, run)


def check_timing_limit(timing_limit, batch_size, entries: list[dict]) -> None:
    """Outputs in batches are exact for the greedy methods only."""
    if timing_limit is None:
        return
    if isinstance(timing_limit, bool) or not isinstance(timing_limit, int) or timing_limit < 1:
        raise ValueError(f"timing_limit must be None or an integer >= 1; got {timing_limit!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1; got {batch_size!r}")
    for e in entries:
        if (
            e["method"] not in ("greedy", "small", "bild", "speculative", "prompt-lookup")
            or e["do_sample"]
        ):
            raise ValueError(
                f"timing_limit: outputs in batches are exact for greedy, small, bild, greedy "
                f"speculative decoding and prompt lookup; {_label(e)!r} needs timing_limit=None"
            )


def timed_indices(n: int, timing_limit: int | None, seed: int) -> list[int]:
    """The examples timed at batch 1: every one, or a seeded random sample of `timing_limit` of the
    `n`, in order."""
    import random

    if timing_limit is None or timing_limit >= n:
        return list(range(n))
    return sorted(random.Random(seed).sample(range(n), timing_limit))


def _size(task: str, split: str, limit) -> int:
    """The number of examples a sweep covers, without loading a paper task's data (its published row
    count)."""
    if task in tasks.PAPER_TASKS:
        rows = tasks.paper.SOURCES[task].rows[split]
        return rows if limit is None else min(limit, rows)
    return len(tasks.load_task(task, split, limit=limit))


def _run(s: Lookup, progress) -> list[dict]:
    """Time the policies `s.todo` together with one vanilla run per example; build, store and return
    records."""
    pair, task, split, limit, reg = s.pair, s.task, s.split, s.limit, s.registry
    entries, keys = [s.entries[i] for i in s.todo], [s.keys[i] for i in s.todo]
    executor, shard_size = s.run["executor"], s.run["shard_size"]
    spec = dict(
        pair=pair,
        task=task,
        split=split,
        limit=limit,
        entries=entries,
        zoo=str(zoo_dir()),
        **{k: v for k, v in s.run.items() if k in shard.SPEC},
    )
    sweep_key = s.checkpoint_key()
    n, timed = len(tasks.load_task(task, split, limit=limit)), s.timed()
    label = f"{pair} {split}: " + (
        _label(entries[0]) if len(entries) == 1 else f"{len(entries)} policies"
    )
    batched, layouts, counts, partials = None, None, None, [sweep_key]
    # outputs for quality on every example, in batches (not timed)
    if s.run["timing_limit"] is not None:
        # in chunks of examples, each on disk as it finishes (on Ray: as Ray tasks)
        def in_chunks(spec, indices, names, batch_size, memory, progress):
            key = {"outputs": sweep_key, "names": names, "batch_size": batch_size}
            partials.append(key)
            # {first index: a finished chunk}
            got = reg.load_partial(key) if reg is not None else {}
            covered = {i for chunk in got.values() for i in chunk["indices"]}

            def on_chunk(part, made):
                got[part[0]] = {
                    "indices": part,
                    "outputs": {n: made[n][0] for n in names},
                    "layouts": {n: made[n][1] for n in names},
                    "counts": {n: made[n][2] for n in names},
                }
                if reg is not None:
                    reg.save_partial(key, got)

            rest = [i for i in indices if i not in covered]
            if rest and executor == "local":  # in this process, on disk chunk by chunk
                parts = distributed.shards(rest, s.run["chunk_size"] or LOCAL_CHUNK)
                for k, part in enumerate(parts):
                    label = progress and f"{progress} (chunk {k + 1} of {len(parts)})"
                    on_chunk(
                        part,
                        shard.compute_outputs(spec, part, names, batch_size, memory, label),
                    )
            elif rest:
                distributed.run_chunks(
                    spec,
                    rest,
                    names,
                    batch_size,
                    memory,
                    on_chunk,
                    executor=executor,
                    chunk_size=s.run["chunk_size"],
                    progress=progress,
                )
            at = {i: (chunk, j) for chunk in got.values() for j, i in enumerate(chunk["indices"])}
            # checkpointed before counts were kept
            old = any("counts" not in chunk for chunk in got.values())
            return {
                n: (
                    [at[i][0]["outputs"][n][at[i][1]] for i in indices],
                    shard.merge_layouts([chunk["layouts"][n] for chunk in got.values()]),
                    None if old else [at[i][0]["counts"][n][at[i][1]] for i in indices],
                )
                for n in names
            }

        batched, layouts, counts = shard.outputs(
            spec,
            list(range(n)),
            s.run["batch_size"],
            label if progress else False,
            s.run["memory"],
            in_chunks,
        )
    done = reg.load_partial(sweep_key) if reg is not None else {}
    rest = [i for i in timed if i not in done]
    saved = [time.monotonic()]

    def checkpoint(i, row):  # the finished examples, on disk every CHECKPOINT_SECONDS
        done[i] = row
        if reg is not None and time.monotonic() - saved[0] > CHECKPOINT_SECONDS:
            reg.save_partial(sweep_key, done)
            saved[0] = time.monotonic()

    def checkpoint_shard(rows):  # a finished Ray shard, on disk at once
        done.update(rows)
        if reg is not None and len(done) < len(timed):
            reg.save_partial(sweep_key, done)

    try:
        if rest and executor == "local":
            shard.time_shard(spec, rest, progress=label if progress else False, on_row=checkpoint)
        elif rest:
            distributed.run_shards(
                spec,
                rest,
                checkpoint_shard,
                executor=executor,
                shard_size=shard_size,
                progress=label if progress else False,
            )
    finally:
        if reg is not None and len(done) < len(timed) and done:
            reg.save_partial(sweep_key, done)  # interrupted: keep what finished
    # merged in this process: on a Ray driver the models load on the CPU (only their tokenizer and
    # EOS are used); priced by the calibration of the machine the examples were timed on, where the
    # registry has one (of eager steps: none for compiled ones)
    where = next(iter(done.values())).get("machine") if done else None
    cal = (
        calibrate.for_machine(reg, pair, spec["device"], spec["threads"], where)
        if reg is not None and not s.run["compile"]
        else None
    )
    made = records.build_records(
        spec if executor == "local" else {**spec, "device": "cpu"},
        keys,
        done,
        sweep=digest(sweep_key),
        batched=batched,
        layouts=layouts,
        counts=counts,
        calibration=cal,
    )
    if reg is not None:
        for key, record in zip(keys, made):
            reg.put(key, record)
        for key in partials:
            reg.drop_partial(key)
    return made


_label = records.label
