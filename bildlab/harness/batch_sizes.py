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
decoded (`generate_batch`'s report).

What the calibrated costs predict (`costs=True`, the default): the cost model extended to batches.
`generate_batch` counts every forward it makes by model, rows and columns fed (its report's
`calls`, `tally.call`: a ragged round's draft steps and its verification over B rows x m tokens, a
lockstep's one-token steps, the encoders; rows leave as they finish). In the same interleave a
runner (`GRID`) times one forward of each model over a grid of rows (`ROWS`, up to the batch size)
and columns (`COLUMNS`; the encoders over `SOURCE` widths), after `PREFIX` cached columns, on the
first `cost_batches` batches (`_grid`); each batch's forwards are priced by that grid, linear
between its points (`price`). Each method's row then has `predicted_speedup` (the priced greedy
over the priced method, summed over the batches) with its paired interval, `measured_over_predicted`
and `forward_share` (the priced forwards over the measured seconds: the rest is the loop's host
work, which grows with the rows). Left out: the cache's growth beyond `PREFIX` (attention over
longer rows) and host work."""

from __future__ import annotations

import numpy as np
import torch

from ..engine import timing
from ..engine.batch import generate_batch
from ..engine.policy import of as policy_of
from ..engine.ragged import Rows
from ..measure.intervals import interval, ratio_of_sums

GREEDY = "greedy"
GRID = "forward grid"  # the runner that times the grid
COLUMNS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 32, 64)  # a draft step, a verification, a prefill
SOURCE = (8, 16, 32, 64, 128)  # an encoder's source widths
PREFIX = 16  # cached columns before a timed forward


def _check(inputs, methods, batch_sizes) -> None:
    if not isinstance(methods, dict) or not methods:
        raise ValueError("methods must be a non-empty dict of {name: generate's policy keywords}")
    if GREEDY in methods or GRID in methods:
        raise ValueError(
            f"methods: {GREEDY!r} is the baseline every row is measured against and {GRID!r} the "
            "forwards' timing; name the methods otherwise"
        )
    if not inputs:
        raise ValueError("inputs must hold at least one input")
    for b in batch_sizes:
        if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= len(inputs):
            raise ValueError(
                f"batch_sizes must be integers in [1, {len(inputs)}] (the number of inputs); "
                f"got {b!r}"
            )


def _rows_grid(size: int) -> list[int]:
    """The rows a batch of `size` passes through as its rows finish: powers of two, and `size`."""
    return sorted({2**i for i in range(size.bit_length()) if 2**i < size} | {size})


def _grid(large, small, size: int) -> timing.Runner:
    """A runner that times one forward per model, rows and columns of the grid (stats["grid"]:
    {name: {rows: {columns: seconds}}}): each decoder after PREFIX cached columns of R rows (an
    encoder-decoder's over a source of PREFIX tokens), each cropped back after its forward."""
    dev = large.device
    models = {"large": large, **({"small": small} if small is not None else {})}

    def run(x, i):
        grid = {}
        for name, model in models.items():
            for r in _rows_grid(size):
                ids = torch.full((r, PREFIX), 5, dtype=torch.long, device=dev)
                ones = torch.ones_like(ids)
                m = Rows(model, ids, ones) if model.config.is_encoder_decoder else Rows(model)
                m.feed(ids, ones, 1)
                m.realign(torch.full((r,), PREFIX, device=dev))
                cells = grid.setdefault(name, {}).setdefault(r, {})
                for c in COLUMNS:
                    new = torch.full((r, c), 5, dtype=torch.long, device=dev)
                    t0 = timing.clock(dev)
                    m.feed(new, torch.ones_like(new), 1)
                    cells[c] = timing.clock(dev) - t0
                    m.realign(torch.zeros(r, dtype=torch.long, device=dev))
                if model.config.is_encoder_decoder:
                    cells = grid.setdefault(f"{name} encoder", {}).setdefault(r, {})
                    for c in SOURCE:
                        src = torch.full((r, c), 5, dtype=torch.long, device=dev)
                        t0 = timing.clock(dev)
                        model.get_encoder()(input_ids=src, attention_mask=torch.ones_like(src))
                        cells[c] = timing.clock(dev) - t0
        return [], {"grid": grid}

    return run


def _mean_grid(grids: list[dict]) -> dict:
    """The mean seconds of each cell over the timed batches."""
    first = grids[0]
    return {
        name: {
            r: {c: float(np.mean([g[name][r][c] for g in grids])) for c in cells}
            for r, cells in rows.items()
        }
        for name, rows in first.items()
    }


def _interp(points: dict, x: float) -> float:
    """Linear in x between the points {x: y}, extended by the end segments' lines."""
    xs = np.array(sorted(points), dtype=float)
    ys = np.array([points[k] for k in sorted(points)], dtype=float)
    if len(xs) == 1:
        return float(ys[0])
    if x <= xs[0]:
        a, b = 0, 1
    elif x >= xs[-1]:
        a, b = -2, -1
    else:
        return float(np.interp(x, xs, ys))
    return float(ys[a] + (ys[b] - ys[a]) * (x - xs[a]) / (xs[b] - xs[a]))


def price(calls: list, grid: dict) -> float:
    """Seconds of the forwards `calls` ([name, rows, columns, count], `generate_batch`'s report)
    priced by `grid` ({name: {rows: {columns: seconds}}}): linear in columns at each calibrated row
    count, then linear in rows."""
    total = 0.0
    for name, rows, columns, count in calls:
        by_rows = {r: _interp(cells, columns) for r, cells in grid[name].items()}
        total += count * max(_interp(by_rows, rows), 0.0)
    return total


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
    costs: bool = True,
    cost_batches: int = 8,
) -> list[dict]:
    """The rows of the module docstring, batch size by batch size; `methods` maps a name to
        `generate`'s policy keywords (the small model is passed to the drafted ones), and may name
    `generate_batch`'s `engine` (default "auto"). `costs`: price
        each batch's forwards by a grid timed in the same run on its first `cost_batches` batches."""
    _check(inputs, methods, batch_sizes)
    if not isinstance(costs, bool):
        raise TypeError(f"costs must be True or False; got {costs!r}")
    if isinstance(cost_batches, bool) or not isinstance(cost_batches, int) or cost_batches < 1:
        raise ValueError(f"cost_batches must be an integer >= 1; got {cost_batches!r}")
    policies = {GREEDY: {"method": "greedy"}, **methods}
    rows = []
    for size in batch_sizes:
        batches = [inputs[i : i + size] for i in range(0, len(inputs) - size + 1, size)]
        engines = {}

        def runner(name: str, policy: dict, size=size, batches=batches, engines=engines):
            kw = dict(policy, small=small if _drafted(policy) else None)

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
                return [o.tokens for o in outs], {"calls": report["calls"]}

            return run

        runners = {name: runner(name, policy) for name, policy in policies.items()}
        if costs:
            drafts = any(_drafted(p) for p in methods.values())
            timed_grid = _grid(large, small if drafts else None, size)
            runners[GRID] = lambda x, i, g=timed_grid, n=cost_batches: (
                g(x, i) if i < n else ([], {})
            )
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
        grid = None
        if costs:
            grid = _mean_grid([t[GRID]["stats"]["grid"] for t in timed[:cost_batches]])
            priced = {
                name: [price(t[name]["stats"]["calls"], grid) for t in timed] for name in policies
            }
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
                    **(_predicted(base, seconds, priced[GREEDY], priced[name]) if costs else {}),
                }
            )
        if costs:
            rows[-1]["grid"] = grid  # the batch size's grid, once (its last row)
    return rows


def _drafted(method: dict) -> bool:
    """Does the method run the small model (`Policy.drafts`)?"""
    keywords = {k: v for k, v in method.items() if k != "engine"}
    return policy_of(None, keywords, "methods").drafts


def _predicted(base, seconds, base_priced, priced) -> dict:
    """The priced speedup over greedy and the measured one over it, with paired intervals over
    the batches, and the share of the measured seconds that the priced forwards explain."""
    n = len(seconds)
    lo, hi = interval(lambda idx: ratio_of_sums(base_priced, priced, idx), n)
    mlo, mhi = interval(
        lambda idx: ratio_of_sums(base, seconds, idx) / ratio_of_sums(base_priced, priced, idx), n
    )
    predicted = sum(base_priced) / sum(priced)
    return {
        "predicted_speedup": predicted,
        "predicted_speedup_ci": [lo, hi],
        "measured_over_predicted": sum(base) / sum(seconds) / predicted,
        "measured_over_predicted_ci": [mlo, mhi],
        "forward_share": sum(priced) / sum(seconds),
        "priced_seconds": priced,
    }
