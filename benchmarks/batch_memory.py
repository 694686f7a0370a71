"""A memory budget at the paper's sizes: the measured peak of `generate_batch` under a budget, and
its outputs against batch-1 outputs (random weights with the checkpoints' configurations;
bildlab/engine/memory.py says what is estimated).

    python benchmarks/batch_memory.py                              # CPU: T5-large + T5-small, resident memory
    python benchmarks/batch_memory.py --device cuda                # a GPU: torch's peak allocated bytes
    python benchmarks/batch_memory.py --device cuda --family mt5 --sources 1024,1024,1024,1024,800 --rows 4

The budget is what `--rows` rows of the longest source take by the estimate (or `--memory`); the
batches are packed under it, so the first batch holds the shorter sources together. It prints one
JSON line: the budget, the measured peak over what the models held before (CPU: the process's
resident memory, sampled every millisecond; CUDA: `torch.cuda.max_memory_allocated`), the batches
decoded, and whether every output equals its batch-1 output. tests/test_memory.py runs it on a CPU;
on a GPU box it is one short call (a few seconds a family)."""

import argparse
import json
import threading
import time

import torch
import transformers as tf

from bildlab.engine import memory
from bildlab.engine.batch import generate_batch
from bildlab.world import models


def build(name: str, device) -> tf.PreTrainedModel:
    return models.random_model(name, device)


def resident() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))


def measure(fn, device) -> tuple[object, int]:
    """fn()'s result and the peak bytes it added: CUDA's allocator peak, or the sampled resident
    memory."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        out = fn()
        torch.cuda.synchronize(device)
        return out, torch.cuda.max_memory_allocated(device) - base
    base, peak, stop = resident(), [0], threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], resident())
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        out = fn()
    finally:
        stop.set()
        watcher.join()
    return out, peak[0] - base


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--family", default="t5", choices=("t5", "mt5"))
    ap.add_argument(
        "--sources",
        default="1024,600,1024",
        help="source lengths in tokens (default 1024,600,1024)",
    )
    ap.add_argument(
        "--rows",
        type=int,
        default=2,
        help="rows of the longest source the budget admits (default 2)",
    )
    ap.add_argument("--memory", default=None, help="the budget instead (bytes or e.g. '2GiB')")
    ap.add_argument("--max-new-tokens", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    large, small = (build(f"{args.family}-{size}", args.device) for size in ("large", "small"))
    lengths = [int(n) for n in args.sources.split(",")]
    xs = [torch.randint(2, 32000, (1, n), device=args.device) for n in lengths]
    new = args.max_new_tokens
    geometries = [memory.geometry(large), memory.geometry(small)]
    budget = memory.parse(args.memory) or memory.peak_bytes(
        geometries, args.rows, max(lengths), new
    )
    kw = dict(small=small, method="bild", fallback=0.5, rollback=3.0, max_new_tokens=new)
    report = {}
    batched, peak = measure(
        lambda: generate_batch(large, xs, memory=budget, batch_size=256, report=report, **kw),
        args.device,
    )
    alone = generate_batch(large, xs, batch_size=1, **kw)
    g = geometries[0]
    result = {
        "device": args.device,
        "family": args.family,
        "sources": lengths,
        "budget": budget,
        "measured": peak,
        "report": report,
        "cross_cache_per_row": 2
        * g.layers
        * g.kv_heads
        * g.head_dim
        * max(lengths)
        * g.dtype_bytes,
        "identical": sum(a.tokens == b.tokens for a, b in zip(batched, alone)),
        "n": len(xs),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
