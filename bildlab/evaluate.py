"""Evaluation harness: one method with one policy over a task split for a pair, timed side by side with the vanilla
large model, scored, and kept as one JSON record per run in a registry.

    run = evaluate("toy-mt", method="bild", fallback=0.5, rollback=3.0, limit=50)
    run["summary"]   # score, baseline_score, speedup, small_share, large_calls_per_token, mean_accepted, ...

Timing: batch size 1, a warm-up excluded, the vanilla baseline (Hugging Face greedy `generate`) and the method
interleaved example by example (their order alternating) so that machine drift hits both alike, a CUDA sync before
every clock read on GPU. The registry key holds everything that determines a run (pair, task, split, limit, method,
policy, seed, versions, model files); a record is written atomically and reused, so a rerun is instant and an
interrupted sweep resumes; a corrupt record is reported and recomputed.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import warnings
from functools import lru_cache
from pathlib import Path

import torch

from . import __version__, metrics, tasks
from .atomic import atomic_path
from .benchmark import hf_generate
from .decoding import _clock, check_policy, generate
from .models import PAIRS, TOY_PAIRS, load_pair, task_of, zoo_dir

DRAFTS = ("small", "aligned", "early-exit")
BASELINES = ("hf_greedy", "greedy")  # the vanilla large model: transformers' generate, or bildlab's loop
DEFAULT_REGISTRY = "results"


def policy_of(method: str, k: int, fallback: float, rollback: float, max_small_steps: int, do_sample: bool = False,
              temperature: float = 1.0) -> dict:
    """The parameters that matter for `method` (the rest do not enter the registry key)."""
    if method == "speculative":
        return {"k": k, "do_sample": True, "temperature": float(temperature)} if do_sample else {"k": k}
    if method == "bild":
        return {"fallback": float(fallback), "rollback": float(rollback), "max_small_steps": max_small_steps}
    return {}


def check_run(pair: str, task: str, method: str, split: str, limit, draft: str, baseline: str, **policy) -> None:
    """Every argument of a run, checked before any model loads."""
    if pair not in PAIRS:
        raise ValueError(f"pair must be one of {', '.join(PAIRS)}; got {pair!r}")
    if task not in tasks.ALL_TASKS:
        raise ValueError(f"task must be one of {', '.join(tasks.ALL_TASKS)}; got {task!r}")
    if split not in tasks.SPLITS:
        raise ValueError(f"split must be one of {', '.join(tasks.SPLITS)}; got {split!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be None or an integer >= 1; got {limit!r}")
    if draft not in DRAFTS:
        raise ValueError(f"draft must be one of {', '.join(DRAFTS)}; got {draft!r}")
    if draft == "aligned" and pair in TOY_PAIRS and TOY_PAIRS[pair][2] is None:
        raise ValueError(f"draft='aligned': pair {pair!r} has no aligned small model")
    if draft == "early-exit" and not (pair in TOY_PAIRS and TOY_PAIRS[pair][0].startswith("t5")):
        raise ValueError(f"draft='early-exit' is for the toy T5 pairs; pair {pair!r} has no early exit")
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {', '.join(BASELINES)}; got {baseline!r}")
    if method == "sample":
        raise ValueError("method='sample' is the sampling baseline itself; evaluate method='speculative' with "
                         "do_sample=True to compare speculative sampling with it")
    check_policy(method, **policy)


@lru_cache(maxsize=4)
def _pair(name: str, draft: str, device: str, root: str):  # `root`: the zoo folder, part of the cache key
    return load_pair(name, aligned=draft == "aligned", early_exit=draft == "early-exit", device=device)


@lru_cache(maxsize=8)
def _fingerprint(name: str, draft: str, root: str) -> str:
    """Content hash of a toy pair's model files (paper pairs: their hub ids)."""
    if name not in TOY_PAIRS:
        return name
    large, small, aligned = TOY_PAIRS[name][:3]
    files = [Path(root) / m / "model.safetensors" for m in (large, aligned if draft == "aligned" else small) if m]
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes() if f.is_file() else b"missing")
    return h.hexdigest()[:16]


def run_key(pair, task, method, split, limit, draft, baseline, seed, max_new_tokens, policy, device) -> dict:
    import transformers

    return {"pair": pair, "task": task, "split": split, "limit": limit, "method": method, "draft": draft,
            "policy": policy, "baseline": baseline, "seed": seed, "max_new_tokens": max_new_tokens,
            "device": device, "bildlab": __version__, "torch": torch.__version__,
            "transformers": transformers.__version__, "models": _fingerprint(pair, draft, str(zoo_dir()))}


class Registry:
    """One JSON file per run under `root`, named by a hash of its key."""

    def __init__(self, root: str | os.PathLike = DEFAULT_REGISTRY):
        self.root = Path(root)

    def path(self, key: dict) -> Path:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        return self.root / key["pair"] / key["task"] / f"{key['method']}-{digest}.json"

    def get(self, key: dict) -> dict | None:
        path = self.path(key)
        if not path.exists():
            return None
        try:
            record = json.loads(path.read_text())
            if record.get("key") != key or "summary" not in record or "examples" not in record:
                raise ValueError("key or fields do not match")
            return record
        except (OSError, ValueError) as e:
            warnings.warn(f"corrupt results record {path} ({e}); recomputing it", stacklevel=3)
            return None

    def put(self, key: dict, record: dict) -> Path:
        path = self.path(key)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(record, indent=1))
        return path

    def records(self) -> list[dict]:
        out = []
        for path in sorted(self.root.rglob("*.json")):
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                warnings.warn(f"corrupt results record {path}; skipped", stacklevel=2)
        return out


def evaluate(pair: str, task: str | None = None, method: str = "bild", *, split: str = "test", limit: int | None = 50,
             draft: str = "small", k: int = 4, fallback: float = 0.6, rollback: float = 5.0,
             max_small_steps: int = 10, max_new_tokens: int = 128, seed: int = 0, baseline: str = "hf_greedy",
             do_sample: bool = False, temperature: float = 1.0, warmup: int = 2,
             registry: str | os.PathLike | Registry | None = DEFAULT_REGISTRY, force: bool = False,
             device: str = "cpu", progress: bool = True, check_only: bool = False) -> dict | None:
    """Run (or reuse from the registry) one evaluation; returns its record (see the module docstring).

    With do_sample=True (method "speculative" only) the baseline is the large model sampling alone (bildlab's
    "sample", same temperature, seed per example), and the comparison is of speed and of sample quality.
    With check_only=True every argument is validated and nothing runs (returns None)."""
    task = task or task_of(pair)
    policy = policy_of(method, k, fallback, rollback, max_small_steps, do_sample, temperature)
    check_run(pair, task, method, split, limit, draft, baseline, max_new_tokens=max_new_tokens, k=k,
              fallback=fallback, rollback=rollback, max_small_steps=max_small_steps)
    if do_sample and method != "speculative":
        raise ValueError(f"do_sample=True is for method='speculative' (speculative sampling); got method={method!r}")
    if do_sample and not (isinstance(temperature, (int, float)) and temperature > 0):
        raise ValueError(f"temperature must be a number > 0; got {temperature!r}")
    if do_sample:
        baseline = "sample"
    if check_only:
        return None
    key = run_key(pair, task, method, split, limit, draft, baseline, seed, max_new_tokens, policy, device)
    reg = registry if isinstance(registry, Registry) else Registry(registry) if registry is not None else None
    if reg is not None and not force:
        record = reg.get(key)
        if record is not None:
            return record

    p = _pair(pair, draft, device, str(zoo_dir()))
    examples = tasks.load_task(task, split, limit=limit)
    inputs = [p.encode(ex["source"]) for ex in examples]
    eos = p.large.generation_config.eos_token_id
    torch.manual_seed(seed)

    def base(x, i):
        if baseline == "hf_greedy":
            return hf_generate(p.large, x, max_new_tokens=max_new_tokens, eos=eos), {}
        out = generate(p.large, x, method="sample" if do_sample else "greedy", max_new_tokens=max_new_tokens,
                       temperature=temperature, seed=seed + i)
        return out.tokens, out.stats

    def meth(x, i):
        out = generate(p.large, x, small=p.small, method=method, max_new_tokens=max_new_tokens, k=k,
                       fallback=fallback, rollback=rollback, max_small_steps=max_small_steps, do_sample=do_sample,
                       temperature=temperature, seed=seed + i if do_sample else None)
        return out.tokens, out.stats

    with torch.inference_mode():
        for x in inputs[:warmup]:
            base(x, 0)
            meth(x, 0)
        rows = []
        items = range(len(inputs))
        if progress:
            from tqdm.auto import tqdm

            items = tqdm(items, desc=f"{pair} {method} {policy or ''}".strip(), leave=False)
        for i in items:
            timed = {}
            for name, fn in ((("base", base), ("meth", meth)) if i % 2 == 0 else (("meth", meth), ("base", base))):
                t0 = _clock(inputs[i].device)
                tokens, stats = fn(inputs[i], i)
                timed[name] = (tokens, stats, _clock(inputs[i].device) - t0)
            tokens, stats, seconds = timed["meth"]
            base_tokens, _, base_seconds = timed["base"]
            rows.append({"output": p.decode(tokens), "tokens": len(tokens), "seconds": seconds,
                         "baseline_output": p.decode(base_tokens), "baseline_tokens": len(base_tokens),
                         "baseline_seconds": base_seconds, "identical": tokens == base_tokens,
                         "stats": stats})
    record = {"key": key, "summary": summarize(task, rows, [ex["target"] for ex in examples]), "examples": rows,
              "host": platform.node(), "threads": torch.get_num_threads()}
    if reg is not None:
        reg.put(key, record)
    return record


def summarize(task: str, rows: list[dict], references: list[str]) -> dict:
    metric = tasks.task_metric(task)
    tokens = sum(r["tokens"] for r in rows)
    small = sum(r["stats"].get("small_tokens", 0) for r in rows)
    large_calls = sum(r["stats"].get("large_calls", 0) for r in rows)
    drafted = sum(r["stats"].get("drafted", 0) for r in rows)
    accepted = sum(r["stats"].get("accepted", 0) for r in rows)
    seconds = sum(r["seconds"] for r in rows)
    base_seconds = sum(r["baseline_seconds"] for r in rows)
    return {
        "metric": metric,
        "score": round(metrics.score(metric, [r["output"] for r in rows], references), 3),
        "baseline_score": round(metrics.score(metric, [r["baseline_output"] for r in rows], references), 3),
        "speedup": round(base_seconds / seconds, 4),
        "tokens_per_second": round(tokens / seconds, 2),
        "baseline_tokens_per_second": round(sum(r["baseline_tokens"] for r in rows) / base_seconds, 2),
        "small_share": round(small / max(tokens, 1), 4),
        "large_calls_per_token": round(large_calls / max(tokens, 1), 4),
        "mean_accepted": round(tokens / max(large_calls, 1), 4),  # tokens per large call (Spec-Bench's measure)
        "acceptance": round(accepted / drafted, 4) if drafted else None,
        "identical": round(sum(r["identical"] for r in rows) / len(rows), 4),
        "examples": len(rows),
        "tokens": tokens,
    }


def sweep(pair: str, grid: list[dict], *, progress: bool = True, **common) -> list[dict]:
    """Evaluate every policy in `grid` (dicts of evaluate() arguments over `common`); all are checked first, so a bad
    entry fails before anything runs; finished runs come from the registry, so an interrupted sweep resumes."""
    for entry in grid:
        evaluate(pair, **{**common, **entry}, check_only=True)
    items = grid
    if progress:
        from tqdm.auto import tqdm

        items = tqdm(grid, desc=f"sweep {pair}")
    return [evaluate(pair, **{**common, **entry}, progress=False) for entry in items]


def pareto(records: list[dict]) -> list[dict]:
    """The records on the speed-quality Pareto front (no other record is both faster and better)."""
    def key(r):
        return r["summary"]["speedup"], r["summary"]["score"]

    front = [r for r in records
             if not any(key(o)[0] >= key(r)[0] and key(o)[1] >= key(r)[1] and key(o) != key(r) for o in records)]
    return sorted(front, key=lambda r: r["summary"]["speedup"])
