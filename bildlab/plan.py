"""What a study would compute, before anything runs: every sweep the notebooks' questions would time, the policies
without a record in the registry, the number of decodes, and an estimate of the machine hours.

    bildlab study --profile paper --plan

A `Planner` is the harness handed to the questions (their `sweep` argument) in place of `evaluate.sweep`: it looks
each sweep up (`evaluate.lookup`), notes what would run, and returns the records the registry has and placeholder
records for the others (neutral numbers: speedup 1, no quality change, every output identical), so the questions run
through without a model, and a finished registry plans nothing. Where a policy is chosen from measured numbers that
are missing (RQ5's rows), the plan counts the largest number that can be chosen. A record that several notebooks
share (RQ3, RQ4 and RQ5 sweep the same validation grid) is counted once, where the first notebook would compute it.
Nothing is global: two plans in one process do not see each other.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

from . import evaluate as ev
from . import study
from .registry import Registry, digest
from .runner import NOTEBOOKS, notebook_defaults, notebook_names, profile_params
from .tasks import PAPER_TASKS, task_metric

# Seconds per decode of the vanilla large model at batch 1, the unit of the estimate (a policy's decode is counted as
# one vanilla decode: an upper bound for BiLD and speculative decoding). Paper tasks, on a T4-class GPU: CNN/DM
# 37,872 s for 13,368 validation examples in a public reproduction (2.83 s); the others scaled from it by their
# typical output length (about 55 tokens for CNN/DM, 25 for XSum, 30 for the translations). Toy tasks, on one CPU
# thread: the vanilla T5's mean timed seconds per decode in the committed toy records (two study processes on 2
# cores): 0.249 (toy-mt), 0.331 (toy-sum). The two kinds are reported apart, never added.
SECONDS_PER_DECODE = {"cnn_dailymail": 2.83, "xsum": 1.3, "iwslt2017-de-en": 1.5, "wmt14-de-en": 1.6,
                      "toy-mt": 0.25, "toy-sum": 0.33}
# Outputs computed in batches (`timing_limit`: quality on whole splits, the protocol on a sample) cost a fraction of
# a batch-1 decode each: 1 / BATCH_GAIN. Measured on 1 CPU thread at batch 64 (benchmarks/bench_batch.py, toy zoo,
# 128 examples): 5.6x the outputs per second of the engine at batch 1 for BiLD, 10.8x for greedy speculative
# decoding (whose output is the large model's greedy one). Assumed here: 5, the lower; a GPU batches further (not
# measured: no GPU was lent), so on a GPU box this overstates the output hours.
BATCH_GAIN = 5.0
UNITS = {"gpu": "GPU hours (paper tasks; T4-class, batch 1)", "cpu": "CPU hours (toy tasks; 1 thread)"}


class Planner:
    """A harness that plans instead of computing: `sweep` has `evaluate.sweep`'s signature; `sweeps` is what it was
    asked for, each with the decodes still to run."""

    def __init__(self):
        self.sweeps: list[dict] = []
        self.read: set[str] = set()  # the digests of every record key the questions asked for
        self._counted: set[str] = set()  # the keys of the records this plan already counts

    def sweep(self, pair: str, grid: list[dict], *, progress=None, check_only: bool = False, **run) -> list[dict]:
        found = ev.lookup(pair, grid, offline=True, **run)
        if check_only:
            return None
        self.read.update(digest(key) for key in found.keys)
        found.todo = [i for i in found.todo if digest(found.keys[i]) not in self._counted]
        self._counted.update(digest(found.keys[i]) for i in found.todo)
        n, runners, timed = found.examples(), len(found.runners()), len(found.timed())
        batched = n * (len(found.todo) + 1) if found.todo and found.run["timing_limit"] is not None else 0
        self.sweeps.append({"pair": pair, "task": found.task, "split": found.split, "examples": n,
                            "policies": len(found.keys), "to_run": len(found.todo), "decodes": timed * runners,
                            "timed": timed, "outputs": batched})
        metric = task_metric(found.task)
        return [rec if rec is not None else _placeholder(key, n, metric) for key, rec in zip(found.keys, found.found)]


def _placeholder(key: dict, n: int, metric: str) -> dict:
    s = {"metric": metric, "examples": n, "score": 0.0, "score_ci": [0.0, 0.0], "baseline_score": 0.0,
         "baseline_score_ci": [0.0, 0.0], "delta": 0.0, "delta_ci": [0.0, 0.0], "identical": 1.0, "identical_count": n,
         "speedup": 1.0, "speedup_ci": [1.0, 1.0], "speedup_hf": 1.0, "speedup_hf_ci": [1.0, 1.0], "truncated": 0,
         "baseline_truncated": 0, "small_share": 0.5, "mean_accepted": 1.0, "large_calls_per_token": 1.0, "tokens": n}
    row = {"stats": {"accepted": 0, "rollbacks": 0, "small_seconds": 0.0, "small_calls": 0}, "seconds": 1.0,
           "baseline_seconds": 1.0, "baseline_tokens": 1, "output": "", "baseline_output": ""}
    return {"key": key, "summary": s, "examples": [row] * n, "placeholder": True}


def plan(profile: str = "toy", notebooks: list[str] | None = None, overrides: dict | None = None,
         planner: Planner | None = None) -> list[dict]:
    """One row per notebook: sweeps, decodes still to run (policies without a record), estimated hours of each kind."""
    planner, rows = planner or Planner(), []  # one plan: a shared record counts once
    with tempfile.TemporaryDirectory() as figures:
        for name in notebooks or notebook_names():
            params = {**notebook_defaults(name), **profile_params(profile, name), **(overrides or {})}
            if profile != "toy":
                params["registry"] = (overrides or {}).get("registry", f"../results/{profile}")
            params["registry"] = str((NOTEBOOKS / params["registry"]).resolve())  # as the notebooks see it
            params.pop("figures", None)
            first = params.pop("pairs", None) or params.pop("pair")
            start = len(planner.sweeps)
            study.QUESTIONS[name](first, figures=figures, sweep=planner.sweep, **{**params, "progress": False})
            rows.append({"notebook": name, "sweeps_detail": planner.sweeps[start:]})
    for row in rows:
        sweeps = row["sweeps_detail"]
        hours = dict.fromkeys(UNITS, 0.0)
        for s in sweeps:
            decodes = s["decodes"] + s["outputs"] / BATCH_GAIN  # batch-1 timing decodes, batched outputs
            hours["gpu" if s["task"] in PAPER_TASKS else "cpu"] += decodes * SECONDS_PER_DECODE[s["task"]] / 3600
        row.update(sweeps=len(sweeps), decodes=sum(s["decodes"] for s in sweeps),
                   hours={k: round(v, 2) for k, v in hours.items()})
    return rows


def unused(registry: str | Path, read: set[str]) -> list[Path]:
    """The record files of `registry` whose key is not among `read` (a `Planner.read` after a plan of every notebook:
    what no notebook with its stored parameters reads), and the sweeps' shared columns that no other record uses."""
    reg = Registry(registry)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a corrupt file is unused too
        kept = [r for r in reg.records() if digest(r["key"]) in read]
    paths, sweeps = {reg.path(r["key"]) for r in kept}, {(r.get("protocol") or {}).get("sweep") for r in kept}
    return [p for p in reg.files() if p not in paths] + [p for p in reg.sweep_files() if p.stem not in sweeps]


def format_plan(rows: list[dict], profile: str) -> str:
    """The plan as a table: per notebook its sweeps, decodes and hours, GPU and CPU hours in columns of their own."""
    units = [u for u in UNITS if any(r["hours"][u] for r in rows)] or (["gpu"] if profile == "paper" else ["cpu"])
    w = max(len(UNITS[u]) for u in units) + 2
    lines = [f"{'notebook':<24} {'sweeps':>6} {'decodes to run':>15}" + "".join(f"{UNITS[u]:>{w}}" for u in units)]
    for r in rows:
        lines.append(f"{r['notebook']:<24} {r['sweeps']:>6} {r['decodes']:>15,}"
                     + "".join(f"{r['hours'][u]:>{w}.2f}" for u in units))
        for s in r["sweeps_detail"]:
            batched = f" + {s['outputs']:,} outputs in batches" if s["outputs"] else ""
            lines.append(f"    {s['pair']} {s['split']}: {s['examples']} examples x {s['policies']} policies "
                         f"({s['to_run']} to compute: no record, none planned above) -> {s['decodes']:,} decodes"
                         f" at batch 1 on {s['timed']} examples{batched}")
    lines.append(f"{'total':<24} {sum(r['sweeps'] for r in rows):>6} {sum(r['decodes'] for r in rows):>15,}"
                 + "".join(f"{sum(r['hours'][u] for r in rows):>{w}.2f}" for u in units))
    return "\n".join(lines)
