"""The one timing protocol: every speed number in bildlab (harness, benchmark, zoo card) is measured
here.

    rows = interleave(inputs, {"greedy": run_greedy, "bild": run_bild}, warmup=2, threads=1, repeats=1)
    rows[i]["bild"]  # {"tokens": [...], "stats": {...}, "seconds": 0.0123} for input i

- warm-up excluded: every runner decodes the first `warmup` inputs once, untimed, before any clock
  is read; - a fixed, recorded thread count (`threads`, 1 by default on CPU; the previous count is
  restored afterwards); - a CUDA sync before every clock read on GPU (`clock`); - interleaved: for
  every input all runners run back to back, in an order that rotates from input to input (and from
  repeat to repeat), so machine drift hits all of them alike; - `repeats` timings per input and
  runner, the median kept (outputs come from the first repeat).

A runner is `fn(input_ids, index) -> (tokens, stats)`. Only ratios of times measured in one call
mean anything on a shared machine: absolute times are recorded, never asserted."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable

import torch

Runner = Callable[[torch.Tensor, int], tuple[list[int], dict]]


def clock(device: torch.device | str) -> float:
    """Seconds on a monotonic clock, after waiting for the device's queued work (CUDA)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


@contextlib.contextmanager
def fixed_threads(threads: int | None):
    """Run the block with `threads` intra-op threads (None: leave the count as it is), restored
    afterwards."""
    _check_threads(threads)
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def settings(threads: int | None = 1, repeats: int = 1, warmup: int = 2) -> dict:
    """The protocol's settings as they go into a record (and its registry key where they change the
    result)."""
    check(threads, repeats, warmup)
    return {"threads": threads, "repeats": repeats, "warmup": warmup}


def _check_threads(threads) -> None:
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
    ):
        raise ValueError(f"threads must be None or an integer >= 1; got {threads!r}")


def ns(x):
    """Seconds to the nanosecond, the clock's resolution (digits beyond it are float noise; the
    registry stores whole nanoseconds); in a stats dict, every value whose name ends in 'seconds'.
    """
    if isinstance(x, dict):
        return {k: ns(v) if k.endswith("seconds") and v is not None else v for k, v in x.items()}
    return round(x * 1e9) / 1e9


def check(threads, repeats, warmup) -> None:
    _check_threads(threads)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1; got {repeats!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0; got {warmup!r}")


def progress_bar(items=None, **kwargs):
    """A live progress bar: a widget in Jupyter when ipywidgets is installed, else plain text on
    stderr (no warning either way); it disappears when done."""
    try:
        import ipywidgets  # noqa: F401
        from tqdm.auto import tqdm
    except ImportError:
        from tqdm.std import tqdm
    return tqdm(items, leave=False, **kwargs)


def interleave(
    inputs: list[torch.Tensor],
    runners: dict[str, Runner],
    *,
    warmup: int = 2,
    threads: int | None = 1,
    repeats: int = 1,
    indices: list[int] | None = None,
    progress: bool | str = False,
    on_row: Callable[[int, dict], None] | None = None,
) -> list[dict[str, dict]]:
    """Time every runner on every input under the protocol (module docstring); one dict of runner
    results per input.

    `indices` are the inputs' positions in the whole example list (passed to the runners, which seed
    sampling with them, and used for the rotation), default 0..n-1. `on_row(i, row)` is called after
    each input (checkpoints)."""
    check(threads, repeats, warmup)
    if not runners:
        raise ValueError("runners must name at least one runner")
    indices = list(range(len(inputs))) if indices is None else list(indices)
    if len(indices) != len(inputs):
        raise ValueError(
            f"indices must have one entry per input; got {len(indices)} for {len(inputs)} inputs"
        )
    names = list(runners)
    rows: list[dict[str, dict]] = []
    with fixed_threads(threads), torch.inference_mode():
        for x, i in zip(inputs[:warmup], indices[:warmup]):
            for name in names:
                runners[name](x, i)
        items = zip(inputs, indices)
        if progress:
            items = progress_bar(
                items, total=len(inputs), desc=progress if isinstance(progress, str) else "timing"
            )
        for x, i in items:
            row, times = {}, {name: [] for name in names}
            for r in range(repeats):
                shift = (i + r) % len(names)
                for name in names[shift:] + names[:shift]:
                    t0 = clock(x.device)
                    tokens, stats = runners[name](x, i)
                    times[name].append(clock(x.device) - t0)
                    if r == 0:
                        row[name] = {"tokens": list(tokens), "stats": dict(stats)}
            for name in names:
                row[name]["seconds"] = statistics.median(times[name])
            rows.append(row)
            if on_row is not None:
                on_row(i, row)
    return rows
