"""Benchmark: does speculation survive batching? `generate_batch`'s greedy, speculative decoding,
BiLD and prompt lookup at batch sizes 1 to 64 on a toy pair's test inputs (speculative decoding and
BiLD by both engines of `generate_batch`: ragged and lockstep), each method against
batched greedy at the same batch size (`bildlab.harness.batch_sizes`: the one timing protocol,
paired intervals over the batches).

    python benchmarks/bench_batch_sizes.py --pair toy-mt-llama            # 256 inputs, 1..64
    python benchmarks/bench_batch_sizes.py --pair toy-mt --n 128 --batch-sizes 1,8,64

Each row is set beside what the calibrated costs predict: every batch's forwards (`generate_batch`
counts them by rows and columns) priced by a grid of forwards timed in the same run.

Writes results/batch-sizes/<pair>.json (the machine, the zoo's fingerprint, the settings and a row
per batch size and method), rewritten atomically after each batch size: an interrupted run resumes
at the first batch size not yet in the file (same settings, same machine and zoo; else it starts
over). Prints each batch size's rows as they finish."""

import argparse
import json
import sys
from pathlib import Path

import torch

from bildlab import load_pair
from bildlab.atomic import atomic_path
from bildlab.harness import batch_sizes
from bildlab.harness.shard import machine
from bildlab.study import batching, plots
from bildlab.world.models import fingerprint
from bildlab.world.tasks import load_task

ROOT = Path(__file__).resolve().parent.parent
METHODS = {
    "speculative k 4": dict(method="speculative", k=4),
    "bild fb 0.5 rb 3": dict(method="bild", fallback=0.5, rollback=3.0),
    "prompt lookup k 4": dict(method="prompt-lookup", k=4, ngram=2),
    # the same outputs by the lockstep (both models at every position): which engine is faster
    "speculative k 4 lockstep": dict(method="speculative", k=4, engine="lockstep"),
    "bild fb 0.5 rb 3 lockstep": dict(method="bild", fallback=0.5, rollback=3.0, engine="lockstep"),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--pair", default="toy-mt-llama", help="a toy pair (default toy-mt-llama)")
    ap.add_argument("--n", type=int, default=256, help="test inputs (default 256)")
    ap.add_argument("--batch-sizes", default="1,2,4,8,16,32,64")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:n] (default cpu)")
    ap.add_argument("--out", default=str(ROOT / "results" / "batch-sizes"))
    ap.add_argument(
        "--table",
        action="store_true",
        help="print the Markdown table of --out's files and draw their figure; run nothing",
    )
    ap.add_argument(
        "--figures",
        default=str(ROOT / "figures"),
        help="where --table writes the figure batch_sizes.png/.pdf (default figures/)",
    )
    args = ap.parse_args(argv)
    if args.table:
        files = batching.load(args.out)
        print(batching.markdown_table(files))
        for path in plots.save(batching.figure(files), "batch_sizes", args.figures):
            print(f"wrote {path}")
        return 0
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    pair = load_pair(args.pair, device=args.device)
    inputs = [pair.encode(ex["source"]) for ex in load_task(pair.task, "test", limit=args.n)]
    head = {
        "pair": args.pair,
        "zoo": fingerprint(args.pair),
        "machine": machine(args.device),
        "n": len(inputs),
        "max_new_tokens": args.max_new_tokens,
        "threads": args.threads,
        "methods": METHODS,
        "torch": torch.__version__,
        "grid": {"columns": batch_sizes.COLUMNS, "source": batch_sizes.SOURCE},
    }
    path = Path(args.out) / f"{args.pair}.json"
    done = json.loads(path.read_text()) if path.exists() else {}
    rows = done.get("rows", []) if {k: done.get(k) for k in head} == head else []
    path.parent.mkdir(parents=True, exist_ok=True)
    for size in sizes:
        if any(r["batch_size"] == size for r in rows):
            continue
        new = batch_sizes.measure(
            pair.large,
            pair.small,
            inputs,
            METHODS,
            [size],
            max_new_tokens=args.max_new_tokens,
            threads=args.threads,
            progress=True,
        )
        rows += new
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps({**head, "rows": rows}, indent=1) + "\n")
        for r in new:
            lo, hi = r["speedup_ci"]
            plo, phi = r["predicted_speedup_ci"]
            print(
                f"batch {size:3d} {r['method']:>20} {r['engine']:>8}: "
                f"{r['outputs_per_second']:7.1f} outputs/s, {r['speedup']:.2f}x greedy "
                f"[{lo:.2f}, {hi:.2f}] (N={r['batches']} batches), predicted "
                f"{r['predicted_speedup']:.2f}x [{plo:.2f}, {phi:.2f}], forwards "
                f"{r['forward_share']:.0%} of the time, "
                f"{r['identical']}/{r['rows']} equal to greedy",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
