"""Does speculation survive batching? `generate_batch`'s outputs per second for each method at each
batch size, against `generate_batch` greedy at the same batch size, under the one timing protocol
(`timing.interleave`: warm-up, fixed threads, the methods of a batch run one after another in a
rotating order, CUDA synced).

    rows = batch_sizes.measure(
        pair.large, pair.small, inputs, {"speculative k 4": dict(method="speculative", k=4)},
        [1, 8, 64], max_new_tokens=64,
    )

The unit is a batch: at batch size B the inputs, in their order, make len(inputs) // B batches of B
rows (the rest is left out, so that every batch is full), and every batch is decoded by greedy and by
each method. One row per batch size and method (greedy included): outputs per second (rows over the
summed seconds), the per-row latency (a batch's mean seconds: every row waits for its batch), the
speedup over greedy (the ratio of the summed seconds) with its 95% paired bootstrap interval over the
batches, how many outputs equal greedy's (a lossless method: all of them), and the engine that
decoded (`generate_batch`'s report)."""

from __future__ import annotations

import torch

from ..engine import timing
from ..engine.batch import generate_batch
from ..measure.intervals import interval, ratio_of_sums

GREEDY = "greedy"


def _check(inputs, methods, batch_sizes) -> None:
    if not isinstance(methods, dict) or not methods:
        raise ValueError("methods must be a non-empty dict of {name: generate's policy keywords}")
    if GREEDY in methods:
        raise ValueError(f"methods: {GREEDY!r} is the baseline every row is measured against")
    if not inputs:
        raise ValueError("inputs must hold at least one input")
    for b in batch_sizes:
        if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= len(inputs):
            raise ValueError(
                f"batch_sizes must be integers in [1, {len(inputs)}] (the number of inputs); "
                f"got {b!r}"
            )


def measure(
    large,
    small,
    inputs: list[torch.Tensor],
    methods: dict[str, dict],
    batch_sizes: list[int],
    *,
    max_new_tokens: int,
    eos_token_id: int | list[int] | None = None,
    warmup: int = 1,
    threads: int | None = 1,
    repeats: int = 1,
    progress: bool = False,
) -> list[dict]:
    """The rows of the module docstring, batch size by batch size; `methods` maps a name to
    `generate`'s policy keywords (the small model is passed to the drafted ones)."""
    _check(inputs, methods, batch_sizes)
    policies = {GREEDY: {"method": "greedy"}, **methods}
    rows = []
    for size in batch_sizes:
        batches = [inputs[i : i + size] for i in range(0, len(inputs) - size + 1, size)]
        engines = {}

        def runner(name: str, policy: dict, size=size, batches=batches, engines=engines):
            drafted = policy.get("method") in ("speculative", "bild")
            kw = dict(policy, small=small if drafted else None)

            def run(x, i):
                report = {}
                outs = generate_batch(
                    large,
                    batches[i],
                    batch_size=size,
                    max_new_tokens=max_new_tokens,
                    eos_token_id=eos_token_id,
                    report=report,
                    **kw,
                )
                engines[name] = report["engine"]
                return [o.tokens for o in outs], {}

            return run

        runners = {name: runner(name, policy) for name, policy in policies.items()}
        # one marker per batch: the clock syncs the device it is on
        markers = [torch.zeros(1, device=large.device) for _ in batches]
        timed = timing.interleave(
            markers,
            runners,
            warmup=min(warmup, len(batches)),
            threads=threads,
            repeats=repeats,
            progress=f"batch {size}" if progress else False,
        )
        base = [t[GREEDY]["seconds"] for t in timed]
        for name, policy in policies.items():
            seconds = [t[name]["seconds"] for t in timed]
            same = sum(
                out == ref
                for t in timed
                for out, ref in zip(t[name]["tokens"], t[GREEDY]["tokens"])
            )
            lo, hi = interval(lambda idx: ratio_of_sums(base, seconds, idx), len(batches))
            rows.append(
                {
                    "batch_size": size,
                    "method": name,
                    "policy": policy,
                    "engine": engines[name],
                    "batches": len(batches),
                    "rows": len(batches) * size,
                    "outputs_per_second": len(batches) * size / sum(seconds),
                    "row_seconds": sum(seconds) / len(batches),
                    "speedup": sum(base) / sum(seconds),
                    "speedup_ci": [lo, hi],
                    "identical": same,
                    "seconds": seconds,
                }
            )
    return rows
