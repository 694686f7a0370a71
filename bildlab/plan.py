"""What a study would compute, before anything runs: every sweep the notebooks' study functions would time, the
policies without a record in the registry, the number of decodes, and an estimate of the machine hours.

    bildlab study --profile paper --plan

While `planning()` is active, `evaluate.sweep` records each sweep here and returns the records the registry has and
placeholder records for the others (neutral numbers: speedup 1, no quality change, every output identical), so the
study functions run through without a model, and a finished registry plans nothing.
Where a policy is chosen from measured numbers (RQ5's rows), the plan counts the largest number that can be chosen.
A record that several notebooks share (RQ3, RQ4 and RQ5 sweep the same validation grid) is counted once, where the
first notebook would compute it.
"""

from __future__ import annotations

import contextlib
import tempfile

# Seconds per decode of the vanilla large model at batch 1, the unit of the estimate (a policy's decode is counted as
# one vanilla decode: an upper bound for BiLD and speculative decoding). CNN/DM: 37,872 s for 13,368 validation
# examples on a T4 in a public reproduction (2.83 s); the others scaled from it by their typical output length (about
# 55 tokens for CNN/DM, 25 for XSum, 30 for the translations). Toy tasks: the vanilla T5's mean timed seconds per
# decode in the committed toy records (1 thread, two study processes on 2 cores): 0.249 (toy-mt), 0.331 (toy-sum).
SECONDS_PER_DECODE = {"cnn_dailymail": 2.83, "xsum": 1.3, "iwslt2017-de-en": 1.5, "wmt14-de-en": 1.6,
                      "toy-mt": 0.25, "toy-sum": 0.33}
FUNCTIONS = {"rq1_small_writes_most": "rq1", "rq2_policies": "rq2", "rq3_alignment": "rq3",
             "rq4_early_exit": "rq4", "rq5_main_table": "rq5", "speculative_pipeline": "speculative"}

_SWEEPS: list[dict] | None = None
_PLANNED: set[str] | None = None  # the keys of the records this plan already counts


def active() -> bool:
    return _SWEEPS is not None


@contextlib.contextmanager
def planning():
    """Collect the sweeps that `evaluate.sweep` is asked for (yielded list) instead of running them."""
    global _SWEEPS, _PLANNED
    before, (_SWEEPS, _PLANNED) = (_SWEEPS, _PLANNED), ([], set())
    try:
        yield _SWEEPS
    finally:
        _SWEEPS, _PLANNED = before


def unplanned(keys: list[dict], todo: list[int]) -> list[int]:
    """The policies of `todo` whose record no earlier sweep of this plan makes (notebooks share sweeps: RQ3, RQ4 and
    RQ5 sweep the same validation grid); they are counted from now on."""
    from .registry import digest

    fresh = [i for i in todo if digest(keys[i]) not in _PLANNED]
    _PLANNED.update(digest(keys[i]) for i in fresh)
    return fresh


def record(pair: str, task: str, split: str, n: int, todo: list[dict], runners: int, keys: list[dict],
           found: list[dict | None]) -> list[dict]:
    """Note a sweep (its `runners` decodes per example for `n` examples) and return its records: those the registry
    has (`found`), so that choices made from them come out as in a real run, and placeholders for the others."""
    _SWEEPS.append({"pair": pair, "task": task, "split": split, "examples": n, "policies": len(keys),
                    "to_run": len(todo), "decodes": n * runners if todo else 0})
    from .tasks import task_metric

    return [rec if rec is not None else _placeholder(key, n, task_metric(task)) for key, rec in zip(keys, found)]


def _placeholder(key: dict, n: int, metric: str) -> dict:
    s = {"metric": metric, "examples": n, "score": 0.0, "score_ci": [0.0, 0.0], "baseline_score": 0.0,
         "baseline_score_ci": [0.0, 0.0], "delta": 0.0, "delta_ci": [0.0, 0.0], "identical": 1.0, "identical_count": n,
         "speedup": 1.0, "speedup_ci": [1.0, 1.0], "speedup_hf": 1.0, "speedup_hf_ci": [1.0, 1.0], "truncated": 0,
         "baseline_truncated": 0, "small_share": 0.5, "mean_accepted": 1.0, "large_calls_per_token": 1.0, "tokens": n}
    row = {"stats": {"accepted": 0, "rollbacks": 0, "small_seconds": 0.0, "small_calls": 0}, "baseline_seconds": 1.0,
           "baseline_tokens": 1, "output": "", "baseline_output": ""}
    return {"key": key, "summary": s, "examples": [row] * n, "placeholder": True}


def plan(profile: str = "toy", notebooks: list[str] | None = None, overrides: dict | None = None) -> list[dict]:
    """One row per notebook: sweeps, decodes still to run (policies without a record), estimated hours."""
    from . import study
    from .runner import NOTEBOOKS, notebook_defaults, notebook_names, profile_params

    rows = []
    with planning() as every, tempfile.TemporaryDirectory() as figures:  # one plan: a shared record counts once
        for name in notebooks or notebook_names():
            params = {**notebook_defaults(name), **profile_params(profile, name), **(overrides or {})}
            if profile != "toy":
                params["registry"] = (overrides or {}).get("registry", f"../results/{profile}")
            params["registry"] = str((NOTEBOOKS / params["registry"]).resolve())  # as the notebooks see it
            params.pop("figures", None)
            first = params.pop("pairs", None) or params.pop("pair")
            start = len(every)
            getattr(study, FUNCTIONS[name])(first, figures=figures, **{**params, "progress": False})
            rows.append({"notebook": name, "sweeps_detail": every[start:]})
    for row in rows:
        sweeps = row["sweeps_detail"]
        decodes = sum(s["decodes"] for s in sweeps)
        seconds = sum(s["decodes"] * SECONDS_PER_DECODE.get(s["task"], 1.0) for s in sweeps)
        row.update(sweeps=len(sweeps), decodes=decodes, hours=round(seconds / 3600, 2))
    return rows


def format_plan(rows: list[dict], profile: str) -> str:
    unit = "GPU hours (T4-class, batch 1)" if profile == "paper" else "CPU hours (1 thread)"
    lines = [f"{'notebook':<24} {'sweeps':>6} {'decodes to run':>15} {unit:>30}"]
    for r in rows:
        lines.append(f"{r['notebook']:<24} {r['sweeps']:>6} {r['decodes']:>15,} {r['hours']:>30.2f}")
        for s in r["sweeps_detail"]:
            lines.append(f"    {s['pair']} {s['split']}: {s['examples']} examples x {s['policies']} policies "
                         f"({s['to_run']} to compute: no record, none planned above) -> {s['decodes']:,} decodes")
    lines.append(f"{'total':<24} {sum(r['sweeps'] for r in rows):>6} {sum(r['decodes'] for r in rows):>15,} "
                 f"{sum(r['hours'] for r in rows):>30.2f}")
    return "\n".join(lines)
