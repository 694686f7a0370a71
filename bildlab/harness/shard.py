"""One shard of a sweep timed on this process's device: the vanilla runs and every policy
interleaved on its examples under the one timing protocol (`timing`). The local harness (`evaluate`)
and the Ray executor (`distributed`) both run sweeps as shards of this; neither imports the other's
internals."""

from __future__ import annotations

import os
import platform
from collections import OrderedDict
from functools import lru_cache

import torch

from ..engine import static, timing
from ..engine.decoding import generate
from ..engine.policy import Policy
from ..world import tasks
from ..world.models import load_pair
from .benchmark import hf_generate

# a sweep entry's policy arguments where the grid leaves them out (the registry key keeps those that
# matter)
POLICY_ARGS = (
    "method",
    "draft",
    "k",
    "fallback",
    "rollback",
    "max_small_steps",
    "rollback_rule",
    "do_sample",
    "temperature",
    "ngram",
)
DEFAULTS = {
    "method": "bild",
    "draft": "small",
    **{n: getattr(Policy(), n) for n in POLICY_ARGS[2:]},
}
# the harness's anchors run the engine's method they stand beside
ENGINE_METHOD = {
    "small": "greedy",
    "hf_assisted": "speculative",
    "hf_prompt_lookup": "prompt-lookup",
}
# what a shard's or a chunk's work is a function of, besides its examples: a plain dict, sent to Ray
# tasks as it is
SPEC = (
    "pair",
    "task",
    "split",
    "limit",
    "entries",
    "zoo",
    "seed",
    "max_new_tokens",
    "warmup",
    "threads",
    "repeats",
    "hf_baseline",
    "device",
    "compile",
)
# the methods a sweep times with compiled steps (compile=True)
COMPILED = ("greedy", "small", "bild", "speculative")


@lru_cache(maxsize=4)
# `root`: the zoo folder, part of the cache key
def load(name: str, draft: str, device: str, root: str):
    return load_pair(
        name, aligned=draft == "aligned", early_exit=draft == "early-exit", device=device
    )


def runner_names(entries: list[dict], hf_baseline: bool) -> list[str]:
    """The runners of a sweep, in their base order: the vanilla ones (each once), then one per
    policy."""
    names = ["greedy"]
    if hf_baseline and any(not e["do_sample"] for e in entries):
        names.append("hf_greedy")
    names += [
        f"sample@{t}" for t in sorted({float(e["temperature"]) for e in entries if e["do_sample"]})
    ]
    return names + [f"policy{n}" for n in range(len(entries))]


def time_shard(
    spec: dict, indices: list[int], *, progress: bool | str = False, on_row=None
) -> dict[int, dict]:
    """Time the examples `indices` of a sweep under the protocol, on this process's device: {index:
    {runner: {tokens, stats, seconds}}}. `spec` is a plain dict (picklable: a shard can run in
    another process or machine); every shard warms up on its own first examples. Each row also says
    where it was timed (`machine`). With `spec["compile"]` the engine's runners decode with compiled
    steps on static caches, compiled by `warm_up` before the first timed (or warm-up) decode; the
    first row of the shard holds those seconds (`compile_seconds`)."""
    entries, mnt, seed = spec["entries"], spec["max_new_tokens"], spec["seed"]
    pairs, inputs = models_and_inputs(spec, indices)
    p = next(iter(pairs.values()))
    hf_eos = p.large.generation_config.eos_token_id
    kw = dict(cache="static", compile=True) if spec.get("compile") else {}
    runners = {}
    for name in runner_names(entries, spec["hf_baseline"]):
        if name == "greedy":
            runners[name] = lambda x, i: _result(
                generate(p.large, x, method="greedy", max_new_tokens=mnt, **kw)
            )
        elif name == "hf_greedy":
            runners[name] = lambda x, i: (
                hf_generate(p.large, x, max_new_tokens=mnt, eos=hf_eos),
                {},
            )
        elif name.startswith("sample@"):
            runners[name] = (
                lambda t: (
                    lambda x, i: _result(
                        generate(
                            p.large,
                            x,
                            method="sample",
                            max_new_tokens=mnt,
                            temperature=t,
                            seed=seed + i,
                            **kw,
                        )
                    )
                )
            )(float(name[7:]))
        else:
            e = entries[int(name[6:])]
            runners[name] = policy_runner(pairs[e["draft"]], e, seed, mnt, **kw)
    done, where = {}, machine(spec["device"])
    compiling = [warm_up(spec, pairs, inputs)] if kw else []

    def keep(i, row):
        row["machine"] = where
        if compiling:
            row["compile_seconds"] = compiling.pop()
        done[i] = row
        if on_row is not None:
            on_row(i, row)

    timing.interleave(
        inputs,
        runners,
        warmup=min(spec["warmup"], len(inputs)),
        threads=spec["threads"],
        repeats=spec["repeats"],
        indices=list(indices),
        progress=progress,
        on_row=keep,
    )
    return done


def check_compile(compile, entries: list[dict]) -> None:
    """`compile=True` times the engine's runners with compiled steps: greedy, small, bild and
    speculative decoding from a separate small model (an early exit shares the large model's cache,
    not compiled here)."""
    if not isinstance(compile, bool):
        raise TypeError(f"compile must be True or False; got {compile!r}")
    for e in entries if compile else []:
        if e["method"] not in COMPILED or (e["method"] != "greedy" and e["draft"] == "early-exit"):
            raise ValueError(
                f"compile=True times {', '.join(COMPILED)} with a separate small model (draft 'small' "
                f"or 'aligned'); got method={e['method']!r}, draft={e['draft']!r}"
            )


def warm_up(spec: dict, pairs: dict, inputs: list) -> float:
    """Compile every step the shard's compiled runners take (`static.warm_up`), on the protocol's
    thread count, before anything is timed: seconds spent."""
    mnt, seconds = spec["max_new_tokens"], 0.0
    with timing.fixed_threads(spec["threads"]):
        for q in pairs.values():
            seconds += static.warm_up(q.large, inputs, small=q.small, max_new_tokens=mnt)
        for draft in sorted({e["draft"] for e in spec["entries"] if e["method"] == "small"}):
            # the draft alone
            seconds += static.warm_up(pairs[draft].small, inputs, max_new_tokens=mnt)
    return seconds


def machine(device: str) -> dict:
    """Where a shard was timed (speedups are compared only within one device): the host, its CPU
    model as the OS reports it, its cores and the device."""
    cuda = str(device).startswith("cuda")
    return {
        "host": platform.node(),
        "platform": platform.platform(),
        "processor": processor(),
        "cpus": os.cpu_count(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
        "device_uuid": str(getattr(torch.cuda.get_device_properties(device), "uuid", "")) or None
        if cuda
        else None,
    }


@lru_cache(maxsize=1)
def processor() -> str:
    """The CPU model as the OS reports it (Linux: /proc/cpuinfo's 'model name'; else
    platform.processor())."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _result(out) -> tuple[list[int], dict]:
    return out.tokens, out.stats


def models_and_inputs(spec: dict, indices: list[int]) -> tuple[dict, list]:
    """A sweep's pair loaded once per draft it uses ({draft: Pair}) and the model inputs of the
    examples `indices`."""
    drafts = sorted({e["draft"] for e in spec["entries"]})
    pairs = {d: load(spec["pair"], d, spec["device"], spec["zoo"]) for d in drafts}
    examples = tasks.load_task(spec["task"], spec["split"], limit=spec["limit"])
    p = next(iter(pairs.values()))
    return pairs, [p.encode(examples[i]["source"]) for i in indices]


def policy(e: dict) -> Policy:
    """The engine's policy of a sweep entry (`DEFAULTS` filled in); a ValueError names a bad
    parameter."""
    e = {**DEFAULTS, **e}
    method = ENGINE_METHOD.get(e["method"], e["method"])
    sampling = method == "speculative" and e["do_sample"]
    fields = {n: e[n] for n in POLICY_ARGS[2:] if n != "do_sample"}
    return Policy(method, **fields, do_sample=sampling)


def policy_runner(p, e: dict, seed: int, max_new_tokens: int, **kw):
    """A policy's runner; `kw` (cache="static", compile=True) for the engine's methods only
    (`check_compile`)."""
    if e["method"] == "hf_assisted":
        eos = p.large.generation_config.eos_token_id
        return lambda x, i: (
            hf_generate(
                p.large, x, max_new_tokens=max_new_tokens, eos=eos, assistant=p.small, k=e["k"]
            ),
            {},
        )
    if e["method"] == "hf_prompt_lookup":  # transformers' prompt lookup: no draft model
        eos = p.large.generation_config.eos_token_id
        return lambda x, i: (
            hf_generate(
                p.large,
                x,
                max_new_tokens=max_new_tokens,
                eos=eos,
                lookup=True,
                k=e["k"],
                ngram=e["ngram"],
            ),
            {},
        )
    if e["method"] == "prompt-lookup":
        return lambda x, i: _result(
            generate(p.large, x, policy=policy(e), max_new_tokens=max_new_tokens)
        )
    if e["method"] == "small":  # the draft model alone: an anchor of the study
        return lambda x, i: _result(
            generate(p.small, x, method="greedy", max_new_tokens=max_new_tokens, **kw)
        )
    if e["method"] == "greedy":  # the large model against itself: an A/A check of the protocol
        return lambda x, i: _result(
            generate(p.large, x, method="greedy", max_new_tokens=max_new_tokens, **kw)
        )
    return lambda x, i: _result(
        generate(
            p.large,
            x,
            small=p.small,
            policy=policy(e),
            max_new_tokens=max_new_tokens,
            seed=seed + i if e["do_sample"] else None,
            **kw,
        )
    )


def outputs(
    spec: dict,
    indices: list[int],
    batch_size: int = 64,
    progress: bool | str = False,
    memory=None,
    compute=None,
) -> tuple[dict[str, list[list[int]]], dict[str, dict], dict[str, list[dict] | None]]:
    """Every runner's greedy output tokens for the examples `indices`, computed in batches
    (`batch.generate_batch`, token for token the engine's): ({runner name: [tokens per index]},
    {runner name: its batches' layout}, {runner name: [the engine's exact counts per index]
    (`counts`), or None where a checkpoint made before they were kept has none}) for the vanilla
    large model ("greedy") and each policy. Not timed: outputs for quality, on whole splits; the
    protocol times a sample at batch 1 (`time_shard`). An output this process already computed (the
    vanilla model's in every sweep of a split, a policy's in a second timing pass) is taken from
    memory (`_OUTPUTS`). The others are computed by `compute(spec, indices, names, batch_size,
    memory, progress)` (default `compute_outputs`, here; the Ray executor passes one that computes
    them in chunks of examples on its devices)."""
    names = ["greedy"] + [f"policy{n}" for n in range(len(spec["entries"]))]
    keys = {name: output_key(spec, _entry(spec, name), indices, batch_size) for name in names}
    missing = [name for name in names if keys[name] not in _OUTPUTS]
    if missing:
        made = (compute or compute_outputs)(spec, indices, missing, batch_size, memory, progress)
        for name in missing:
            _OUTPUTS[keys[name]] = made[name]
            while len(_OUTPUTS) > OUTPUTS_KEPT:
                _OUTPUTS.popitem(last=False)
    return (
        {name: _OUTPUTS[keys[name]][0] for name in names},
        {name: _OUTPUTS[keys[name]][1] for name in names},
        {name: _OUTPUTS[keys[name]][2] for name in names},
    )


def compute_outputs(
    spec: dict,
    indices: list[int],
    names: list[str],
    batch_size: int,
    memory=None,
    progress: bool | str = False,
) -> dict[str, tuple[list[list[int]], dict]]:
    """The runners `names`' batched outputs for the examples `indices` on this process's device, on
    the protocol's thread count: {name: ([tokens per index], layout, [counts per index])}, layout =
    {"memory": budget bytes, "batches": batches decoded, "largest": rows of the largest, "splits":
    out-of-memory splits}, counts the engine's exact counts of each output (`counts`). Also a Ray
    task's work (one chunk)."""
    from ..engine.batch import generate_batch

    pairs, xs = models_and_inputs(spec, indices)
    p = next(iter(pairs.values()))
    mnt = spec["max_new_tokens"]
    if progress:
        names = timing.progress_bar(names, desc=f"{progress} (outputs in batches of {batch_size})")
    out = {}
    with timing.fixed_threads(spec["threads"]):
        for name in names:
            e, report = _entry(spec, name), {}
            q = pairs.get(e["draft"], p)
            if e["method"] in ("greedy", "small"):
                outs = generate_batch(
                    q.small if e["method"] == "small" else q.large,
                    xs,
                    max_new_tokens=mnt,
                    batch_size=batch_size,
                    memory=memory,
                    report=report,
                )
            else:  # bild, speculative, prompt lookup
                outs = generate_batch(
                    q.large,
                    xs,
                    small=q.small,
                    max_new_tokens=mnt,
                    batch_size=batch_size,
                    memory=memory,
                    report=report,
                    policy=policy(e),
                )
            out[name] = ([o.tokens for o in outs], layout(report), [counts(o.stats) for o in outs])
    return out


def counts(stats: dict) -> dict:
    """An output's exact counts: its stats without timings, layout notes and the names of what is
    inexact."""
    return {
        k: v
        for k, v in stats.items()
        if k not in ("inexact", "layout") and not k.endswith("seconds")
    }


def layout(report: dict) -> dict:
    """What a record says of how its outputs were batched: `generate_batch`'s report in four
    numbers."""
    return {
        "memory": report["memory"],
        "batches": len(report["batches"]),
        "largest": max(report["batches"], default=0),
        "splits": report["splits"],
    }


def merge_layouts(parts: list[dict]) -> dict:
    """The layouts of one runner's chunks as one (the smallest budget: devices may differ in free
    memory)."""
    return {
        "memory": min(p["memory"] for p in parts),
        "batches": sum(p["batches"] for p in parts),
        "largest": max(p["largest"] for p in parts),
        "splits": sum(p["splits"] for p in parts),
    }


def _entry(spec: dict, name: str) -> dict:
    """The policy a runner of `outputs` decodes with ("greedy": the large model alone)."""
    return (
        spec["entries"][int(name[6:])]
        if name != "greedy"
        else {"method": "greedy", "draft": "small"}
    )


OUTPUTS_KEPT = 256  # runners' batched outputs kept in memory (a toy one: 1,000 short token lists)
# key -> (tokens, layout,
_OUTPUTS: OrderedDict[tuple, tuple[list[list[int]], dict, list | None]] = OrderedDict()
# counts)


def output_key(spec: dict, e: dict, indices: list[int] | None, batch_size: int) -> tuple:
    """What a runner's batched outputs are a function of: the examples, the model(s), the policy and
    the batch size (the large model alone is the same in every draft's pair; the timing pass and
    protocol do not enter)."""
    if e["method"] == "greedy":
        model = ("large",)
    elif e["method"] == "small":
        model = ("small", e["draft"])
    elif e["method"] == "prompt-lookup":
        model = ("large", "prompt-lookup", e["k"], e["ngram"])
    else:
        rules = ("method", "k", "fallback", "rollback", "max_small_steps", "rollback_rule")
        model = (e["draft"],) + tuple(sorted((n, e[n]) for n in rules))
    return (
        spec["pair"],
        spec["task"],
        spec["split"],
        spec["limit"],
        spec["zoo"],
        str(spec["device"]),
        spec["max_new_tokens"],
        batch_size,
        None if indices is None else tuple(indices),
    ) + model
