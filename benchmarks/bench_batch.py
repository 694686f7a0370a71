"""Benchmark: exact batched decoding (`batch.generate_batch`) against the engine
(`decoding.generate`, batch 1).

    python benchmarks/bench_batch.py                           # 64 toy-mt test examples, batch 1, 16, 64
    python benchmarks/bench_batch.py --n 128 --batch-sizes 1,16,64 --threads 1
    # the plan's batch gain:
    python benchmarks/bench_batch.py --n 1000 --split validation --max-new-tokens 128 --batch-sizes 64 \
        --setups vanilla

Three setups from the shipped toy zoo (offline): the vanilla toy-mt T5 (greedy), toy-mt BiLD
(fallback 0.5, rollback 3) and toy-mt-llama greedy speculative decoding (k 4), all on toy-mt
examples (rows sorted by length: more examples, fuller batches); `--setups` picks some. The study
plan's toy-mt BATCH_GAIN is the vanilla row at batch 64 (`bildlab/study/plan.py`). Prints outputs
per second of the engine and of generate_batch at each batch size and with each of its engines
(`--engines`: auto is ragged draft and verify where the models allow it, lockstep runs both models
at every position), their ratio to the engine and to generate_batch greedy at the same batch size,
and how many outputs equal the engine's; timed under the one protocol (`timing.interleave`): at each
batch size the examples are cut into full batches, and every batch is decoded by the engine (its
rows one after another), by batched greedy and by each engine of generate_batch, back to back in a
rotating order, after untimed warm-up batches. Each ratio is a ratio of summed seconds with its 95%
paired bootstrap interval over the batches (N = examples // batch size: a single batch has no
interval). Exits non-zero if any output differs from the engine's."""

import argparse
import sys

import torch

from bildlab import generate, load_pair
from bildlab.engine.batch import generate_batch
from bildlab.engine.timing import interleave
from bildlab.measure.intervals import interval, ratio_of_sums
from bildlab.world.tasks import load_task

# --setups name: (label, pair, policy)
SETUPS = {
    "vanilla": ("toy-mt vanilla (greedy)", "toy-mt", dict(method="greedy")),
    "bild": ("toy-mt bild fb 0.5 rb 3", "toy-mt", dict(method="bild", fallback=0.5, rollback=3.0)),
    "speculative": (
        "toy-mt-llama speculative k 4",
        "toy-mt-llama",
        dict(method="speculative", k=4),
    ),
}


def ratio(num: list[float], den: list[float]) -> str:
    """sum(num) / sum(den) [95% paired interval over the batches] (none from one batch)."""
    if len(num) < 2:
        return f"{sum(num) / sum(den):.2f}x (1 batch)"
    lo, hi = interval(lambda idx: ratio_of_sums(num, den, idx), len(num))
    return f"{sum(num) / sum(den):.2f}x [{lo:.2f}, {hi:.2f}]"


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=64, help="timed toy-mt examples (default 64)")
    ap.add_argument("--split", default="test", help="toy-mt split (default test)")
    ap.add_argument("--batch-sizes", default="1,16,64", help="comma-separated (default 1,16,64)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument(
        "--warmup", type=int, default=2, help="untimed warm-up batches per batch size (default 2)"
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
    ap.add_argument(
        "--setups",
        default=",".join(SETUPS),
        help=f"comma-separated, of {', '.join(SETUPS)} (default all)",
    )
    args = ap.parse_args(argv)
    setups = args.setups.split(",")
    unknown = [s for s in setups if s not in SETUPS]
    if unknown:
        ap.error(f"--setups must be of {', '.join(SETUPS)}; got {', '.join(unknown)}")
    engines = args.engines.split(",")
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    examples = load_task("toy-mt", args.split, limit=args.n)
    differ = 0
    print(
        f"inputs={len(examples)} max_new_tokens={args.max_new_tokens} threads={args.threads} device={args.device}"
    )
    print(
        f"{'setup':>30} | {'decoding':>18} | {'outputs/s':>9} | {'x engine [95%]':>22} | "
        f"{'x greedy [95%]':>22} | {'identical':>9}"
    )
    for name, pair_name, policy in (SETUPS[s] for s in setups):
        pair = load_pair(pair_name, device=args.device)
        inputs = [pair.encode(ex["source"]) for ex in examples]
        kw = dict(max_new_tokens=args.max_new_tokens, **policy)
        if policy["method"] != "greedy":
            kw["small"] = pair.small
        for size in sizes:
            batches = [inputs[i : i + size] for i in range(0, len(inputs) - size + 1, size)]
            reports = {}

            def batched(name, **policy_kw):
                def run(x, i):
                    report = reports.setdefault(name, {})
                    outs = generate_batch(
                        pair.large, batches[i], batch_size=size, report=report, **policy_kw
                    )
                    return [o.tokens for o in outs], {}

                return run

            runners = {
                "engine": lambda x, i: (
                    [generate(pair.large, r, **kw).tokens for r in batches[i]],
                    {},
                ),
                "greedy": batched("greedy", max_new_tokens=args.max_new_tokens),
            }
            for engine in engines if policy["method"] != "greedy" else []:
                runners[engine] = batched(engine, engine=engine, **kw)
            markers = [torch.zeros(1, device=pair.large.device) for _ in batches]
            rows = interleave(
                markers, runners, warmup=min(args.warmup, len(batches)), threads=args.threads
            )
            seconds = {k: [r[k]["seconds"] for r in rows] for k in runners}
            ref = [t for r in rows for t in r["engine"]["tokens"]]
            for k in runners:
                if k == "engine" or (k == "greedy" and policy["method"] != "greedy"):
                    continue
                outs = [t for r in rows for t in r[k]["tokens"]]
                same = sum(o == t for o, t in zip(outs, ref))
                differ += len(ref) - same
                how = f"batch {size} {reports[k].get('engine', k)}"
                print(
                    f"{name:>30} | {how:>18} | {len(ref) / sum(seconds[k]):9.1f} | "
                    f"{ratio(seconds['engine'], seconds[k]):>22} | "
                    f"{'' if k == 'greedy' else ratio(seconds['greedy'], seconds[k]):>22} | "
                    f"{f'{same}/{len(ref)}':>9}"
                )
    if differ:
        print(f"NOT IDENTICAL: {differ} outputs differ from the engine's")
        return 1
    print("all outputs identical to the engine's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
