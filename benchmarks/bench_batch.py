"""Benchmark: exact batched decoding (`batch.generate_batch`) against the engine
(`decoding.generate`, batch 1).

    python benchmarks/bench_batch.py                           # 64 toy-mt test examples, batch 1, 16, 64
    python benchmarks/bench_batch.py --n 128 --batch-sizes 1,16,64 --threads 1
    # the plan's batch gain:
    python benchmarks/bench_batch.py --n 1000 --split validation --max-new-tokens 128 --batch-sizes 64,256

Three setups from the shipped toy zoo (offline): the vanilla toy-mt T5 (greedy), toy-mt BiLD
(fallback 0.5, rollback 3) and toy-mt-llama greedy speculative decoding (k 4), all on toy-mt
examples (rows sorted by length: more examples, fuller batches). The study plan's BATCH_GAIN is the
vanilla row at batch 64 (`bildlab/study/plan.py`). Prints outputs per second of the engine and of
generate_batch at each batch size and with each of its engines (`--engines`: auto is ragged draft
and verify where the models allow it, lockstep runs both models at every position), their ratio to
the engine and to generate_batch greedy at the same batch size, and how many outputs equal the
engine's; clocks from bildlab.engine.timing, a fixed thread count, warm-up decodes untimed, the
engines of one batch size timed one after another. Exits non-zero if any output differs from the
engine's."""

import argparse
import sys

import torch

from bildlab import generate, load_pair
from bildlab.engine.batch import generate_batch
from bildlab.engine.timing import clock, fixed_threads
from bildlab.world.tasks import load_task

SETUPS = {
    "toy-mt vanilla (greedy)": ("toy-mt", dict(method="greedy")),
    "toy-mt bild fb 0.5 rb 3": ("toy-mt", dict(method="bild", fallback=0.5, rollback=3.0)),
    "toy-mt-llama speculative k 4": ("toy-mt-llama", dict(method="speculative", k=4)),
}


def timed(fn, device="cpu"):
    t0 = clock(device)
    out = fn()
    return out, clock(device) - t0


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=64, help="timed toy-mt examples (default 64)")
    ap.add_argument("--split", default="test", help="toy-mt split (default test)")
    ap.add_argument("--batch-sizes", default="1,16,64", help="comma-separated (default 1,16,64)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument(
        "--warmup", type=int, default=2, help="untimed warm-up decodes per method (default 2)"
    )
    ap.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads while timing (default 1)"
    )
    ap.add_argument(
        "--device", default="cpu", help="cpu or cuda[:n] (default cpu); the clock syncs CUDA"
    )
    ap.add_argument(
        "--engines", default="auto,lockstep", help="generate_batch engines (default auto,lockstep)"
    )
    args = ap.parse_args(argv)
    engines = args.engines.split(",")
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    examples = load_task("toy-mt", args.split, limit=args.n)
    differ = 0
    print(
        f"inputs={len(examples)} max_new_tokens={args.max_new_tokens} threads={args.threads} device={args.device}"
    )
    print(
        f"{'setup':>30} | {'decoding':>24} | {'outputs/s':>9} | {'x engine':>8} | "
        f"{'x greedy':>8} | {'identical':>9}"
    )
    greedy = {}  # (pair, batch size): generate_batch greedy's outputs per second
    with fixed_threads(args.threads), torch.inference_mode():
        for name, (pair_name, policy) in SETUPS.items():
            pair = load_pair(pair_name, device=args.device)
            inputs = [pair.encode(ex["source"]) for ex in examples]
            kw = dict(max_new_tokens=args.max_new_tokens, **policy)
            if policy["method"] != "greedy":
                kw["small"] = pair.small
            for x in inputs[: args.warmup]:
                generate(pair.large, x, **kw)
            generate_batch(pair.large, inputs[: args.warmup], **kw)
            ref, seconds = timed(
                lambda: [generate(pair.large, x, **kw).tokens for x in inputs], args.device
            )
            base = len(inputs) / seconds
            print(
                f"{name:>30} | {'generate':>24} | {base:9.1f} | {1.0:8.2f} | {'':>8} | {len(ref):>9}"
            )
            for size in sizes:
                if (pair_name, size) not in greedy:
                    _, seconds = timed(
                        lambda: generate_batch(
                            pair.large, inputs, batch_size=size, max_new_tokens=args.max_new_tokens
                        ),
                        args.device,
                    )
                    greedy[pair_name, size] = len(inputs) / seconds
                for engine in engines if policy["method"] != "greedy" else ["auto"]:
                    report = {}
                    outs, seconds = timed(
                        lambda: generate_batch(
                            pair.large, inputs, batch_size=size, engine=engine, report=report, **kw
                        ),
                        args.device,
                    )
                    same = sum(o.tokens == r for o, r in zip(outs, ref))
                    differ += len(ref) - same
                    rate = len(inputs) / seconds
                    how = f"batch {size} {report['engine']}"
                    print(
                        f"{name:>30} | {how:>24} | {rate:9.1f} | {rate / base:8.2f} | "
                        f"{rate / greedy[pair_name, size]:8.2f} | {f'{same}/{len(ref)}':>9}"
                    )
    if differ:
        print(f"NOT IDENTICAL: {differ} outputs differ from the engine's")
        return 1
    print("all outputs identical to the engine's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
