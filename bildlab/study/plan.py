"""What a study would compute, before anything runs: every sweep the notebooks' questions would
time, the policies without a record in the registry, the number of decodes, and an estimate of the
machine hours.

    bildlab study --profile paper --plan

A `Planner` is the harness handed to the questions (their `sweep` argument) in place of
`evaluate.sweep`: it looks each sweep up (`evaluate.lookup`), notes what would run, and returns the
records the registry has and stand-ins for the others (`_stand_in`: records shaped like computed
ones, on a speed-quality trade-off), so the questions run through them unchanged, without a model,
and a finished registry plans nothing. Where a policy is chosen from measured numbers that are
missing (RQ5's rows), the stand-ins' trade-off makes the largest number that can be chosen distinct,
so the plan counts it; the questions never ask whether they are planned. A record that several notebooks
share (RQ3, RQ4 and RQ5 sweep the same validation grid) is counted once, where the first notebook
would compute it. Nothing is global: two plans in one process do not see each other."""

from __future__ import annotations

import tempfile
import warnings
from functools import lru_cache
from pathlib import Path

import torch

from .. import study
from ..engine import memory as mem
from ..harness import distributed, shard
from ..harness import evaluate as ev
from ..harness.registry import Registry, digest
from ..world.tasks import PAPER_TASKS, task_metric
from . import runner
from .runner import notebook_defaults, notebook_names, profile_params
from .stand_in import _stand_ins

# Seconds per decode of the vanilla large model at batch 1, the unit of the estimate. Paper tasks,
# on a T4-class GPU: CNN/DM 37,872 s for 13,368 validation examples in a public reproduction (2.83
# s); the others scaled from it by their typical output length (about 55 tokens for CNN/DM, 25 for
# XSum, 30 for the translations). Toy tasks, on one CPU thread: the vanilla T5's mean timed seconds
# per decode in the committed toy records (zoo v4; two study processes on 2-core Intel Xeon and AMD
# EPYC VMs; the median over the records of a task): 0.22 (toy-mt), 0.45 (toy-sum).
# The two kinds are reported apart, never added.
TYPICAL_TOKENS = {
    "cnn_dailymail": 55,
    "xsum": 25,
    "iwslt2017-de-en": 30,
    "wmt14-de-en": 30,
    "toy-mt": 25,
    # output tokens per example (a random-weight calibration's decodes run the budget)
    "toy-sum": 25,
}
SECONDS_PER_DECODE = {
    "cnn_dailymail": 2.83,
    "xsum": 1.3,
    "iwslt2017-de-en": 1.5,
    "wmt14-de-en": 1.6,
    "toy-mt": 0.22,
    "toy-sum": 0.45,
}
# Timing hours (the protocol at batch 1): every runner's decode of a timed example counts as one
# vanilla decode (an upper bound for BiLD and speculative decoding, which the protocol finds faster
# than vanilla).
#
# Output hours (`timing_limit`: quality on every example, outputs in batches): a batched output of
# the large model costs 1 / BATCH_GAIN of a vanilla decode; the small model's alone c / BATCH_GAIN;
# a draft-and-verify policy's (1 + c) / BATCH_GAIN, the lockstep engine's price (both models at
# every position: BiLD's batches of 32 rows or more, `batch.BILD_LOCKSTEP_ROWS`). At 64 rows the
# ragged engine measured (results/batch-sizes, zoo v4, 1 CPU thread) 1.0-1.14 vanilla outputs for
# speculative decoding (within 1 + c) and 1.6-1.8 for prompt lookup, which is priced 1 here: an
# underestimate of prompt lookup's output hours. BATCH_GAIN, a vanilla output at batch 64 against
# one at batch 1, per task:
# - toy-mt 9.4: the vanilla toy-mt T5 of zoo v3, 9.36x [8.96, 9.79] on 1,000 toy-mt validation
#   examples, 128 new tokens, 1 CPU thread (`python benchmarks/bench_batch.py --n 1000 --split
#   validation --max-new-tokens 128 --batch-sizes 64 --setups vanilla`, a 2-core Intel Xeon VM,
#   2026-12-07; its calibrations there, 64 inputs: 9.6x and 10.4x; zoo v4's toy-mt T5, the
#   calibrations in results/toy on 64 inputs: 9.7x on that VM, 8.7-10.5x on an AMD EPYC VM);
# - toy-sum 6.8: zoo v4's calibrations of toy-sum (`bildlab calibrate --pair toy-sum`, 2026-12-07,
#   64 inputs: 6.8x on both VMs; longer sources and outputs, a smaller gain);
# - the paper tasks 18.0, assumed, not measured on a GPU (none was lent): a GPU's batch-1 decode is
#   bound by kernel launches and weight reads, which batching shares, so its gain is taken as no
#   smaller than that of zoo v2's toy-mt T5 on one CPU thread (18.0x by the command above, 2-core
#   x86-64 VM, 2026-12-02; another such VM gave 11.5x; docs/paper-profile.md: the plan stays within
#   60 h down to 17.6x). c, the small model's decoder step over the large one's (`make bench-paper`,
#   benchmarks/paper_size.py, 1 CPU thread): T5-small / T5-large 0.175 (XSum, CNN/DM), mT5-small /
#   mT5-large 0.34 (the translations); toy pairs 0.09 (zoo v4, benchmarks/compile/: toy-mt 0.090
#   eager on an Intel Xeon VM, 0.083 on an AMD EPYC VM; toy-mt-llama 0.064 there).
# An output the same notebook already computed (the vanilla model's in every sweep of a split, a
# policy's in a second timing pass) is not computed again (`shard.outputs` keeps them in memory),
# and not counted again here.
BATCH_GAIN = {
    "cnn_dailymail": 18.0,
    "xsum": 18.0,
    "iwslt2017-de-en": 18.0,
    "wmt14-de-en": 18.0,
    "toy-mt": 9.4,
    "toy-sum": 6.8,
}
COST_RATIO = {
    "cnn_dailymail": 0.175,
    "xsum": 0.175,
    "iwslt2017-de-en": 0.34,
    "wmt14-de-en": 0.34,
    "toy-mt": 0.09,
    "toy-sum": 0.09,
}
# Compiling (a sweep with compile=True): every shard compiles its steps once before it times
# anything. Priced by the longest `protocol.compile_seconds` among the pair's compiled records in
# the registry (the first compilation in a process), else COMPILE_SECONDS: the toy pairs' first
# compilations on one CPU thread in the committed records (zoo v4's toy-mt T5, 262.9 s on an AMD
# EPYC VM; the Llama pair, the same in zoo v3 and v4, 131.0 s on an Intel Xeon VM); 150 s for any
# other pair, not measured (a toy Llama step took 146 s on a CPU once).
COMPILE_SECONDS = {"toy-mt": 262.9, "toy-mt-llama": 131.0}
COMPILE_ELSE = 150.0
UNITS = {"gpu": "GPU hours (paper tasks; T4-class)", "cpu": "CPU hours (toy tasks; 1 thread)"}
PARTS = ("timing", "outputs")  # batch-1 decodes of the timed examples; every output in batches
# Memory: each sweep's peak bytes at its batch size (`memory.peak_bytes`, from the pair's geometry
# and its longest source: 1,024 tokens for the paper tasks, their truncation) and the rows a batch
# of outputs takes on a GPU of each size (its memory less `memory.MARGIN`, less both models' float32
# weights).
DEVICE_GB = (16, 24, 80)  # our users' GPUs: a T4 (the paper's), a 24 GB card, an 80 GB A100/H100
# Devices: a sweep's output chunks run on all devices at once, then its timing shards
# (`distributed`); a sweep takes max(its hours / devices, its largest task) for each of the two, and
# the sweeps of a notebook run one after another.
DEVICES = (1, 4, 8)


class Planner:
    """A harness that plans instead of computing: `sweep` has `evaluate.sweep`'s signature; `sweeps`
    is what it was asked for, each with the decodes still to run."""

    def __init__(self):
        self.sweeps: list[dict] = []
        self.read: set[str] = set()  # the digests of every record key the questions asked for
        # the digests of the checkpoint keys of the sweeps that would compute (Lookup.checkpoint_key)
        self.resumes: set[str] = set()
        self._counted: set[str] = set()  # the keys of the records this plan already counts
        # the batched outputs the notebook being planned has computed (its kernel's)
        self.outputs: set[tuple] = set()

    def sweep(
        self, pair: str, grid: list[dict], *, progress=None, check_only: bool = False, **run
    ) -> list[dict]:
        found = ev.lookup(pair, grid, offline=True, **run)
        if check_only:
            return None
        self.read.update(digest(key) for key in found.keys)
        if found.todo:
            self.resumes.add(digest(found.checkpoint_key()))
        found.todo = [i for i in found.todo if digest(found.keys[i]) not in self._counted]
        self._counted.update(digest(found.keys[i]) for i in found.todo)
        n, runners, timed = found.examples(), len(found.runners()), len(found.timed())
        # outputs computed in batches, and their cost in vanilla batched outputs
        batched, units = 0, 0.0
        prices = _prices(pair, found)
        if found.todo and found.run["timing_limit"] is not None:
            spec = {
                "pair": pair,
                "task": found.task,
                "split": found.split,
                "limit": found.limit,
                "zoo": "",
                "device": found.run["device"],
                "max_new_tokens": found.run["max_new_tokens"],
            }
            c = prices["c"]
            for e in [{"method": "greedy", "draft": "small"}] + [
                found.entries[i] for i in found.todo
            ]:
                key = shard.output_key(spec, e, None, found.run["batch_size"])
                if key not in self.outputs:
                    self.outputs.add(key)
                    batched += n
                    units += n * {"greedy": 1.0, "prompt-lookup": 1.0, "small": c}.get(
                        e["method"], 1 + c
                    )
        compiling = (
            _compile_seconds(pair, found) if found.todo and found.run.get("compile") else 0.0
        )
        self.sweeps.append(
            {
                "pair": pair,
                "task": found.task,
                "split": found.split,
                "examples": n,
                "policies": len(found.keys),
                "to_run": len(found.todo),
                "decodes": timed * runners,
                "timed": timed,
                "outputs": batched,
                "output_units": units,
                "prices": prices,
                "compile_seconds": compiling,
                **(_memory(pair, found) if found.run["timing_limit"] is not None else {}),
            }
        )
        return _stand_ins(found, task_metric(found.task))


class _Checker(Planner):
    """A plan that reads no registry (fast): every sweep is checked by `evaluate.lookup` as the
    notebook would make it, with stand-ins where the questions read measured numbers."""

    def sweep(self, pair: str, grid: list[dict], **run) -> list[dict]:
        return super().sweep(pair, grid, **{**run, "registry": None})


def check(
    profile: str = "toy", notebooks: list[str] | None = None, overrides: dict | None = None
) -> None:
    """Every sweep the chosen notebooks would make with these parameters, checked before anything
    runs: a combination that cannot run (e.g. timing_limit with sampled rows) is a ParameterError
    naming the notebook."""
    from .params import ParameterError, check_params

    for name in notebooks or notebook_names():
        defaults = notebook_defaults(name)
        check_params(
            {**defaults, **profile_params(profile, name), **(overrides or {})}, set(defaults)
        )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                plan(profile, [name], overrides, planner=_Checker())
        except (ValueError, TypeError) as e:
            raise ParameterError(f"{name}: {e}") from None


def plan(
    profile: str = "toy",
    notebooks: list[str] | None = None,
    overrides: dict | None = None,
    planner: Planner | None = None,
) -> list[dict]:
    """One row per notebook: sweeps, decodes still to run (policies without a record), estimated
    hours of each kind."""
    planner, rows = planner or Planner(), []  # one plan: a shared record counts once
    with tempfile.TemporaryDirectory() as figures:
        for name in notebooks or notebook_names():
            params = {
                **notebook_defaults(name),
                **profile_params(profile, name),
                **(overrides or {}),
            }
            if profile != "toy":
                params["registry"] = (overrides or {}).get("registry", f"../results/{profile}")
            # as the notebooks see it
            params["registry"] = str((runner.NOTEBOOKS / params["registry"]).resolve())
            params.pop("figures", None)
            # read by a notebook cell of its own, not by the question
            for cell_param in ("other_calibration", "batch_results"):
                params.pop(cell_param, None)
            first = params.pop("pairs", None) or params.pop("pair")
            # each notebook runs in a kernel of its own
            start, planner.outputs = len(planner.sweeps), set()
            study.QUESTIONS[name](
                first, figures=figures, sweep=planner.sweep, **{**params, "progress": False}
            )
            rows.append({"notebook": name, "sweeps_detail": planner.sweeps[start:]})
    for row in rows:
        sweeps = row["sweeps_detail"]
        parts = {u: dict.fromkeys(PARTS, 0.0) for u in UNITS}
        spread = {u: dict.fromkeys(DEVICES, 0.0) for u in UNITS}
        for s in sweeps:
            unit, seconds = "gpu" if s["task"] in PAPER_TASKS else "cpu", s["prices"]["seconds"]
            # batch-1 decodes of the timed examples
            timing = (s["decodes"] * seconds + s["compile_seconds"]) / 3600
            outputs = s["output_units"] / s["prices"]["gain"] * seconds / 3600  # outputs in batches
            parts[unit]["timing"] += timing
            parts[unit]["outputs"] += outputs
            for d in DEVICES:
                spread[unit][d] += _on_devices(
                    outputs, s["examples"], distributed.default_chunk_size, d
                ) + _on_devices(timing, s["timed"], distributed.default_shard_size, d)
        row.update(
            sweeps=len(sweeps),
            decodes=sum(s["decodes"] for s in sweeps),
            outputs=sum(s["outputs"] for s in sweeps),
            parts={u: {k: round(v, 2) for k, v in p.items()} for u, p in parts.items()},
            hours={u: round(sum(p.values()), 2) for u, p in parts.items()},
            devices={u: {d: round(h, 2) for d, h in p.items()} for u, p in spread.items()},
        )
    return rows


def _prices(pair: str, found: ev.Lookup) -> dict:
    """What a sweep's decodes cost: from the calibration of this device for the pair in the sweep's
    registry (`bildlab calibrate`: a vanilla decode's seconds, c, the batch gain at the sweep's
    batch size) where there is one, else the stated constants above; `source` says which."""
    from ..harness import calibrate
    from ..measure import costs

    run, cal = found.run, None
    if found.registry is not None and (
        torch.device(run["device"]).type == "cpu" or torch.cuda.is_available()
    ):
        cal = calibrate.for_machine(found.registry, pair, run["device"], run["threads"])
    if cal is None:
        return {
            "seconds": SECONDS_PER_DECODE[found.task],
            "c": COST_RATIO[found.task],
            "gain": BATCH_GAIN[found.task],
            "source": None,
        }
    g, v = cal["costs"]["batch_gain"], cal["costs"]["vanilla_decode"]
    at = max([j for j, b in enumerate(g["batch_sizes"]) if b <= run["batch_size"]] or [0])
    seconds = v["seconds"]
    # random outputs run the whole budget: priced at the task's typical length
    if cal.get("weights") == "random":
        encode = sum(cal["costs"]["encoder"]["large"]["seconds"]) / len(
            cal["costs"]["encoder"]["large"]["seconds"]
        )
        seconds = encode + (seconds - encode) / v["tokens"] * TYPICAL_TOKENS[found.task]
    return {
        "seconds": seconds,
        "c": costs.cost_ratio(cal),
        "gain": g["gain"][at],
        "source": f"calibration {cal['key']['device_name']} ({cal['key']['processor']}), {cal['made']}",
    }


def _compile_seconds(pair: str, found: ev.Lookup) -> float:
    """What compiling a compiled sweep's steps costs, once per shard (the constants above)."""
    made = [
        r["protocol"].get("compile_seconds") or 0.0
        for r in (found.registry.records() if found.registry else [])
        if r["key"]["pair"] == pair and r["key"].get("compile")
    ]
    return max(made, default=0.0) or COMPILE_SECONDS.get(pair, COMPILE_ELSE)


def costs_line(rows: list[dict]) -> str:
    """The plan's first line: where its costs come from."""
    sources = sorted({s["prices"]["source"] or "" for r in rows for s in r["sweeps_detail"]})
    calibrated = [x for x in sources if x]
    if not calibrated:
        return "costs: stated constants; no calibration of this device (bildlab calibrate)"
    line = "costs: " + "; ".join(calibrated)
    return line + (
        "; stated constants for the pairs without one (bildlab calibrate)" if "" in sources else ""
    )


def _memory(pair: str, found: ev.Lookup) -> dict:
    """A sweep's batches of outputs: the rows of one, the longest source, its peak, the rows that
    fit each GPU (none of these where the models' configs or the tokenizer cannot be read: a zoo
    that is not there)."""
    rows = min(found.run["batch_size"], found.examples())
    try:
        geometries, weights = _geometry(pair)
        source, new = (
            _longest_source(pair, found.task, found.split, found.limit),
            found.run["max_new_tokens"],
        )
    except OSError:
        return {}
    fits = {
        gb: mem.rows_that_fit(
            geometries, source, new, int(gb * 1e9 * (1 - mem.MARGIN)) - weights, rows
        )
        for gb in DEVICE_GB
    }
    given = found.run["memory"]  # the study's own budget, when it names one
    if given is not None:
        fits[f"memory={given}"] = mem.rows_that_fit(geometries, source, new, mem.parse(given), rows)
    return {
        "batch_size": rows,
        "source": source,
        "peak": mem.peak_bytes(geometries, rows, source, new),
        "fits": fits,
    }


def _on_devices(hours: float, n: int, size, devices: int) -> float:
    """The hours of one kind of a sweep's work spread over `devices` in tasks of `size(n, devices)`
    examples: the larger of an even share and the largest task."""
    if not hours or not n:
        return 0.0
    return max(hours / devices, hours * min(size(n, devices), n) / n)  # one task: all the hours


@lru_cache(maxsize=16)
def _geometry(pair: str) -> tuple[list[mem.Geometry], int]:
    """A pair's large and small models' geometry and their float32 weights' bytes, from their
    configs alone (the paper checkpoints' public configs, the zoo's config.json files): no weights
    are read."""
    import torch
    import transformers as tf

    from ..world.models import (
        PAPER_CONFIG_COMMON,
        PAPER_CONFIGS,
        PAPER_GEOMETRY,
        TOY_PAIRS,
        zoo_dir,
    )

    if pair in PAPER_GEOMETRY:
        large, small, rows = PAPER_GEOMETRY[pair]
        configs = [
            (tf.MT5Config if n.startswith("mt5") else tf.T5Config)(
                **PAPER_CONFIGS[n], **PAPER_CONFIG_COMMON
            )
            for n in (large, small)
        ]
    else:
        configs, rows = (
            [tf.AutoConfig.from_pretrained(zoo_dir() / n) for n in TOY_PAIRS[pair][:2]],
            None,
        )
    weights = 0
    for config in configs:
        auto = tf.AutoModelForSeq2SeqLM if config.is_encoder_decoder else tf.AutoModelForCausalLM
        with torch.device("meta"):
            weights += 4 * sum(p.numel() for p in auto.from_config(config).parameters())
    return [mem.geometry(c, vocab=rows) for c in configs], weights


@lru_cache(maxsize=64)
def _longest_source(pair: str, task: str, split: str, limit) -> int:
    """The longest model input of a sweep: a paper task's truncation, a toy split's longest encoded
    source."""
    from ..world.models import MAX_SOURCE_TOKENS, TOY_PAIRS, zoo_dir

    if pair not in TOY_PAIRS:
        return MAX_SOURCE_TOKENS
    from ..world import tasks
    from ..world.models import load_tokenizer, source_ids

    tok, prefix = load_tokenizer(zoo_dir() / "tokenizer"), TOY_PAIRS[pair][3]
    return max(
        len(source_ids(tok, prefix, ex["source"], None, tok.eos_token_id))
        for ex in tasks.load_task(task, split, limit=limit)
    )


def unused(registry: str | Path, read: set[str], resumes: set[str] = frozenset()) -> list[Path]:
    """The record files of `registry` whose key is not among `read` (a `Planner.read` after a plan
    of every notebook: what no notebook with its stored parameters reads), the sweeps' shared
    columns and the outputs' files that no other record uses, and the checkpoints (`.partial/`)
    that no sweep still to compute resumes from (`resumes`: a `Planner.resumes`), such as those a
    sweep leaves when another process finishes some of its policies first."""
    reg = Registry(registry)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a corrupt file is unused too
        kept = [r for r in reg.records() if digest(r["key"]) in read]
    paths, sweeps = (
        {reg.path(r["key"]) for r in kept},
        {(r.get("protocol") or {}).get("sweep") for r in kept},
    )
    kept_sweeps = [p for p in reg.sweep_files() if p.stem in sweeps]
    outputs = reg.outputs_read(sorted(paths) + kept_sweeps)
    return (
        [p for p in reg.files() if p not in paths]
        + [p for p in reg.sweep_files() if p.stem not in sweeps]
        + [p for p in reg.output_files() if p.stem not in outputs]
        + [p for p, key in reg.checkpoints() if digest(key.get("outputs", key)) not in resumes]
    )


def format_plan(rows: list[dict], profile: str) -> str:
    """The plan as a table: per notebook its sweeps, batch-1 decodes, batched outputs and hours, the
    timing (batch 1) and output (batched) hours apart, GPU and CPU hours in columns of their own;
    each sweep below its notebook."""
    units = [u for u in UNITS if any(r["hours"][u] for r in rows)] or (
        ["gpu"] if profile == "paper" else ["cpu"]
    )
    cols = [(u, part) for u in units for part in (*PARTS, "all")]
    head = {"gpu": "GPU h", "cpu": "CPU h"}

    def hours(parts: dict, hrs: dict) -> str:
        return "".join(f"{hrs[u] if part == 'all' else parts[u][part]:>16.2f}" for u, part in cols)

    lines = [
        costs_line(rows),
        f"{'notebook':<24} {'sweeps':>6} {'decodes (batch 1)':>18} {'outputs (batched)':>18}"
        + "".join(f"{head[u] + ' ' + part.replace('outputs', 'output'):>16}" for u, part in cols),
    ]
    for r in rows:
        lines.append(
            f"{r['notebook']:<24} {r['sweeps']:>6} {r['decodes']:>18,} {r['outputs']:>18,}"
            + hours(r["parts"], r["hours"])
        )
        for s in r["sweeps_detail"]:
            batched = f" + {s['outputs']:,} outputs in batches" if s["outputs"] else ""
            if s["compile_seconds"]:
                batched += f" + compiling its steps (about {s['compile_seconds']:.0f} s a shard)"
            if "peak" in s:
                fits = ", ".join(f"{gb} GB {s['fits'][gb]}" for gb in DEVICE_GB)
                given = [
                    f"; with {name}: {n} rows"
                    for name, n in s["fits"].items()
                    if name not in DEVICE_GB
                ]
                batched += (
                    f"; a batch of {s['batch_size']} rows (sources up to {s['source']} tokens) peaks at "
                    f"{mem.fmt(s['peak'])}; rows that fit a GPU of {fits}{''.join(given)}"
                )
            lines.append(
                f"    {s['pair']} {s['split']}: {s['examples']} examples x {s['policies']} policies "
                f"({s['to_run']} to compute: no record, none planned above) -> {s['decodes']:,} decodes"
                f" at batch 1 on {s['timed']} examples{batched}"
            )
    total = {
        u: {part: round(sum(r["parts"][u][part] for r in rows), 2) for part in PARTS} for u in UNITS
    }
    lines.append(
        f"{'total':<24} {sum(r['sweeps'] for r in rows):>6} {sum(r['decodes'] for r in rows):>18,} "
        f"{sum(r['outputs'] for r in rows):>18,}"
        + hours(total, {u: round(sum(r["hours"][u] for r in rows), 2) for u in UNITS})
    )
    for u in units:
        lines.append(
            f"{head[u]} on {', '.join(map(str, DEVICES))} devices (Ray: a sweep's output chunks, then its "
            f"timing shards, spread over the devices; {'one GPU' if u == 'gpu' else 'threads cores'} a task):"
        )
        for r in rows:
            lines.append(
                f"    {r['notebook']:<24}"
                + "".join(f"{r['devices'][u][d]:>10.2f}" for d in DEVICES)
            )
        lines.append(
            f"    {'total':<24}"
            + "".join(f"{sum(r['devices'][u][d] for r in rows):>10.2f}" for d in DEVICES)
        )
    lines.append(
        " · ".join(f"{head[u]}: {UNITS[u]}" for u in units)
        + "; timing: the protocol at batch 1 on the "
        "timed examples; output: every example's output, computed in batches. Per-decode costs and their "
        "sources: bildlab/study/plan.py (SECONDS_PER_DECODE, BATCH_GAIN, COST_RATIO)."
    )
    return "\n".join(lines)
