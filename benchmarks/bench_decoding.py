"""Benchmark: Hugging Face greedy and assisted generation vs bildlab greedy / speculative / BiLD,
side by side.

    python benchmarks/bench_decoding.py                       # the toy-mt pair from the shipped zoo
    python benchmarks/bench_decoding.py --pair random         # a tiny random T5 pair (engine overhead only)
    python benchmarks/bench_decoding.py --n 100 --k 4 --threads 1
    python benchmarks/bench_decoding.py --device cuda --dtype bfloat16   # on a GPU (timings synchronize CUDA)

Same pair, same inputs, under bildlab's one timing protocol (warm-up, fixed threads, rotating
order), in one run; prints tokens/s, ratios, tokens per large call and whether the lossless methods
gave identical outputs. Exits non-zero if a lossless method differs from greedy."""

import argparse
import sys

import torch

from bildlab.engine.policy import Policy
from bildlab.harness.benchmark import LOSSLESS, METHODS, compare, random_pair

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def zoo_pair(name, n, device, dtype):
    import bildlab

    pair = bildlab.load_pair(name, device=device, dtype=dtype)
    return pair.large, pair.small, pair.inputs("test", limit=n)


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--pair", default="toy-mt", help="a zoo pair name, or 'random' (default: toy-mt)"
    )
    ap.add_argument("--n", type=int, default=40, help="timed inputs (default 40)")
    ap.add_argument(
        "--warmup",
        type=int,
        default=3,
        help="untimed warm-up decodes of the first inputs (default 3)",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="timings per input and method, median kept (default 1)",
    )
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument(
        "--k", type=int, default=4, help="draft length for speculative / assisted (default 4)"
    )
    ap.add_argument("--fallback", type=float, default=0.6)
    ap.add_argument("--rollback", type=float, default=5.0)
    ap.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads while timing (default 1)"
    )
    ap.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"comma-separated, among {', '.join(METHODS)} (default: all)",
    )
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:n] (default cpu)")
    ap.add_argument(
        "--dtype", default="float32", choices=list(DTYPES), help="model weights (default float32)"
    )
    args = ap.parse_args(argv)
    methods = tuple(args.methods.split(","))
    if "hf_greedy" not in methods or not set(methods) <= set(METHODS):
        ap.error(
            f"--methods must include hf_greedy (the reference) and be among {', '.join(METHODS)}; "
            f"got {args.methods!r}"
        )
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    if args.pair == "random":
        large, small, inputs = random_pair()
        large, small = large.to(device, dtype), small.to(device, dtype)
        inputs = [x.to(device) for x in inputs]
    else:
        large, small, inputs = zoo_pair(args.pair, args.n, device, dtype)
    inputs = inputs[: args.n]
    result = compare(
        large,
        small,
        inputs,
        methods,
        warmup=args.warmup,
        threads=args.threads,
        repeats=args.repeats,
        max_new_tokens=args.max_new_tokens,
        policy=Policy(k=args.k, fallback=args.fallback, rollback=args.rollback),
        progress=True,
    )
    print(
        f"pair={args.pair} inputs={len(inputs)} (after {args.warmup} warm-up decodes) k={args.k} "
        f"fallback={args.fallback} rollback={args.rollback} threads={args.threads} device={large.device} "
        f"dtype={args.dtype}"
    )
    rows = result.table()
    header = list(rows[0])
    print(" | ".join(f"{h:>22}" for h in header))
    for row in rows:
        print(" | ".join(f"{str(row[h]):>22}" for h in header))
    for name, baseline in (("speculative", "hf_assisted"), ("greedy", "hf_greedy")):
        if name in methods and baseline in methods:
            print(f"bildlab {name} / HF {baseline[3:]}: {result.ratio(name, baseline):.2f}x")
    differ = [name for name in LOSSLESS if name in methods and not result.identical(name)]
    if differ:
        print("NOT IDENTICAL to greedy:", ", ".join(differ))
        return 1
    print("lossless methods: identical outputs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
