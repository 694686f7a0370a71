"""Benchmark: eager vs compiled decoding steps (static caches, `torch.compile`), against
transformers' references.

    python benchmarks/bench_compile.py                        # toy-mt and toy-mt-llama from the shipped zoo, CPU
    python benchmarks/bench_compile.py --pair toy-mt --n 30 --threads 1
    python benchmarks/bench_compile.py --device cuda --pair paper-t5 --pair paper-mt5   # a GPU: the paper's sizes,
                                                                                        # random weights, CUDA graphs

Per pair, one interleaved run under bildlab's one timing protocol (`timing.interleave`: warm-up
excluded, fixed threads, rotating order) of: transformers' greedy `generate` and assisted generation
(the references); bildlab's greedy, BiLD and speculative decoding eager (dynamic cache, the engine's
default) and compiled (`cache="static", compile=True`); bildlab's greedy on a static cache without
compilation; the small model's greedy alone, eager and compiled (with greedy's, the cost ratio c of
each mode: seconds per token). The compiled steps are built first by `static.warm_up`, whose seconds
(compilation, mostly) are reported apart and are in no timed example. Speedups are ratios of summed
seconds with 95% paired-bootstrap intervals (`intervals`), and for the zoo pairs the BLEU of every
method with the change against greedy. Exits non-zero if a lossless method's outputs differ from
greedy's. The paper pairs' models have random weights: their BiLD and speculative rows time what
random models accept (next to nothing), so only their greedy rows, the per-token costs and c say
something. `--out` writes the run as JSON."""

import argparse
import json
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

import bildlab
from bildlab.engine import static, timing
from bildlab.engine.policy import Policy
from bildlab.harness import shard
from bildlab.harness.benchmark import run
from bildlab.measure import metrics
from bildlab.measure.intervals import interval, intervals, ratio_of_sums
from bildlab.world.models import TOY_PAIRS, fingerprint

# row -> (method, engine keywords); "hf_*" are transformers' generate
ROWS = {
    "hf_greedy": ("hf_greedy", {}),
    "hf_assisted": ("hf_assisted", {}),
    "greedy": ("greedy", {}),
    "greedy static": ("greedy", dict(cache="static")),
    "greedy compiled": ("greedy", dict(cache="static", compile=True)),
    "bild": ("bild", {}),
    "bild compiled": ("bild", dict(cache="static", compile=True)),
    "speculative": ("speculative", {}),
    "speculative compiled": ("speculative", dict(cache="static", compile=True)),
    # the small model's greedy alone: with greedy's, the cost ratio c of each mode
    "small": ("small", {}),
    "small compiled": ("small", dict(cache="static", compile=True)),
}
LOSSLESS = (
    "hf_assisted",
    "greedy static",
    "greedy compiled",
    "speculative",
    "speculative compiled",
)
# (row, baseline, target): the issue's targets on CPU; the rest answer "does the speedup survive a
# compiled baseline"
SPEEDUPS = (
    ("greedy compiled", "greedy", 1.5),
    ("greedy static", "greedy", None),
    ("greedy", "hf_greedy", None),
    ("bild", "greedy", None),
    ("bild compiled", "greedy compiled", None),
    ("bild compiled", "hf_greedy", 2.0),
    ("speculative", "greedy", None),
    ("speculative compiled", "greedy compiled", None),
    ("speculative compiled", "hf_assisted", 1.5),
)


def zoo(name, n, device, aligned):
    pair = bildlab.load_pair(
        name, aligned=aligned and TOY_PAIRS[name][2] is not None, device=device
    )
    refs = [ex["target"] for ex in bildlab.load_task(pair.task, "test", limit=n)]
    return pair.large, pair.small, pair.inputs("test", limit=n), refs, pair.decode


def paper(name, n, device):
    """Random-weight models at the paper's sizes (`paper_size.py`) and random sources of 256 tokens:
    speed only."""
    from paper_size import FAMILIES, SOURCE, build

    large_name, small_name, _, rows, _ = FAMILIES[name[len("paper-") :]]
    large, _ = build(large_name, None, rows, device, torch.float32, seed=0)
    small, _ = build(small_name, None, rows, device, torch.float32, seed=1)
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randint(3, rows, (1, SOURCE), generator=g).to(device) for _ in range(n)]
    return large, small, inputs, None, None


def measure(name, args):
    if name.startswith("paper-"):
        large, small, inputs, refs, decode = paper(name, args.n, args.device)
    else:
        large, small, inputs, refs, decode = zoo(name, args.n, args.device, args.aligned)
    eos = large.generation_config.eos_token_id
    policy = dict(
        max_new_tokens=args.max_new_tokens,
        eos=eos,
        policy=Policy(k=args.k, fallback=args.fallback, rollback=args.rollback),
    )
    with timing.fixed_threads(args.threads):
        compile_seconds = static.warm_up(
            large, inputs, small=small, max_new_tokens=args.max_new_tokens
        )
        # the small alone
        compile_seconds += static.warm_up(small, inputs, max_new_tokens=args.max_new_tokens)
    print(f"{name}: compilation (static.warm_up, untimed) {compile_seconds:.1f} s", flush=True)

    def runner(method, kw):
        if method == "small":
            return lambda x, i: run("greedy", small, None, x, **policy, **kw)
        return lambda x, i: run(method, large, small, x, **policy, **kw)

    runners = {row: runner(*ROWS[row]) for row in ROWS}
    t0 = time.perf_counter()
    rows = timing.interleave(
        inputs,
        runners,
        warmup=args.warmup,
        threads=args.threads,
        repeats=args.repeats,
        progress=name,
    )
    seconds = {r: [row[r]["seconds"] for row in rows] for r in ROWS}
    outputs = {r: [row[r]["tokens"] for row in rows] for r in ROWS}
    print(
        f"\n== {name}: {len(inputs)} inputs (after {args.warmup} warm-up decodes), k={args.k}, "
        f"(rb, fb)=({args.rollback}, {args.fallback}), {'aligned' if args.aligned else 'unaligned'} small if any, "
        f"threads={args.threads}, device={large.device}, max_new_tokens={args.max_new_tokens}"
    )
    print(
        f"compilation (static.warm_up, untimed): {compile_seconds:.1f} s; timed run {time.perf_counter() - t0:.0f} s"
    )
    bleu = {}
    if refs is not None:
        data = {
            r: metrics.sentence_data("bleu", [decode(t) for t in outputs[r]], refs) for r in ROWS
        }
        bleu = {r: metrics.corpus("bleu", data[r], list(range(len(refs))))[0] for r in ROWS}

        def change(idx):  # every row's BLEU change against greedy, on the same resamples (paired)
            base = metrics.corpus("bleu", data["greedy"], idx)
            return [metrics.corpus("bleu", data[r], idx) - base for r in ROWS]

        lo, hi = intervals(change, len(refs))
        delta = {r: (bleu[r] - bleu["greedy"], lo[j], hi[j]) for j, r in enumerate(ROWS)}
    print(
        f"{'row':>22} | {'tokens/s':>9} | {'same as greedy':>14} | {'BLEU (change vs greedy)':>30}"
    )
    aligned = args.aligned and name in TOY_PAIRS and TOY_PAIRS[name][2] is not None
    result = {
        "pair": name,
        # the models' files (models.fingerprint): which zoo made the run
        "zoo": fingerprint(name, "aligned" if aligned else "small"),
        "n": len(inputs),
        "compile_seconds": compile_seconds,
        "rows": {},
        "speedups": [],
    }
    for r in ROWS:
        tps = sum(map(len, outputs[r])) / sum(seconds[r])
        same = sum(a == b for a, b in zip(outputs[r], outputs["greedy"]))
        q = (
            f"{bleu[r]:.2f} ({delta[r][0]:+.2f} [{delta[r][1]:+.2f}, {delta[r][2]:+.2f}])"
            if bleu
            else "-"
        )
        print(f"{r:>22} | {tps:9.1f} | {same:>6}/{len(inputs):<7} | {q:>30}")
        result["rows"][r] = {
            "tokens_per_second": tps,
            "same_as_greedy": same,
            "bleu": bleu.get(r),
            "bleu_change": list(delta[r]) if bleu else None,
        }
    print("speedups (ratio of summed seconds, 95% paired-bootstrap interval):")
    for r, base, target in SPEEDUPS:
        x = sum(seconds[base]) / sum(seconds[r])
        lo, hi = interval(lambda idx: ratio_of_sums(seconds[base], seconds[r], idx), len(inputs))
        verdict = (
            ""
            if target is None
            else f"  target >= {target}x: {'met' if x >= target else 'NOT met'}"
        )
        print(f"  {r} / {base}: {x:.2f}x [{lo:.2f}, {hi:.2f}]{verdict}")
        result["speedups"].append(
            {"row": r, "baseline": base, "speedup": x, "interval": [lo, hi], "target": target}
        )
    per_token = {r: sum(seconds[r]) / sum(map(len, outputs[r])) for r in ROWS}
    result["cost_ratio"] = {
        "eager": per_token["small"] / per_token["greedy"],
        "compiled": per_token["small compiled"] / per_token["greedy compiled"],
    }
    print(
        "cost ratio c (the small model's greedy over the large model's, seconds per token): eager "
        f"{result['cost_ratio']['eager']:.3f}, compiled {result['cost_ratio']['compiled']:.3f}"
    )
    result["not_identical"] = [r for r in LOSSLESS if outputs[r] != outputs["greedy"]]
    return result


# the committed runs the README's table is made from
RUNS = Path(__file__).resolve().parent / "compile"
README_ROWS = (
    ("greedy compiled", "greedy", "greedy compiled / eager"),
    ("bild compiled", "greedy compiled", "BiLD / greedy, both compiled"),
    ("bild compiled", "hf_greedy", "BiLD compiled / HF greedy"),
    ("speculative compiled", "greedy compiled", "speculative / greedy, both compiled"),
    ("speculative compiled", "hf_assisted", "speculative compiled / HF assisted"),
)
# the rows --full adds (docs/benchmark.md's table): the eager speedups and a static cache uncompiled
FULL_ROWS = (
    ("greedy static", "greedy", "greedy on a static cache, eager / greedy"),
    ("bild", "greedy", "BiLD / greedy, eager"),
    ("speculative", "greedy", "speculative / greedy, eager"),
)


def table(paths, full: bool = False) -> str:
    """The README's table of runs written by `--out` (one column per pair and machine): `--table
    FILE ...`; with `full` (`--full`) docs/benchmark.md's, which adds the eager speedups and greedy's
    tokens per second."""
    cols, head = [], []
    for path in paths:
        run = json.loads(Path(path).read_text())
        threads = run["args"]["threads"]
        cpu = re.sub(r"\((R|TM)\)| Processor| CPU .*", "", run["machine"]["processor"]).strip()
        where = (
            run["machine"]["device_name"]
            if run["machine"]["device"].startswith("cuda")
            else f"{cpu or 'CPU'}, {threads} thread{'s' * (threads != 1)}"
        )
        for pair in run["pairs"]:
            cols.append(pair)
            head.append(f"{pair['pair']}, {where}")
    lines = ["| 95% interval | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for row, base, label in README_ROWS + FULL_ROWS * full:
        cells = []
        for pair in cols:
            x = next(s for s in pair["speedups"] if s["row"] == row and s["baseline"] == base)
            cells.append(f"{x['speedup']:.2f}x [{x['interval'][0]:.2f}, {x['interval'][1]:.2f}]")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append(
        "| cost ratio c, eager → compiled | "
        + " | ".join(
            f"{p['cost_ratio']['eager']:.2f} → {p['cost_ratio']['compiled']:.2f}" for p in cols
        )
        + " |"
    )
    if full:
        lines.append(
            "| greedy tokens/s, eager → compiled | "
            + " | ".join(
                f"{p['rows']['greedy']['tokens_per_second']:.0f} → "
                f"{p['rows']['greedy compiled']['tokens_per_second']:.0f}"
                for p in cols
            )
            + " |"
        )
    lines.append(
        "| N; compilation (untimed) | "
        + " | ".join(f"{p['n']}; {p['compile_seconds']:.0f} s" for p in cols)
        + " |"
    )
    return "\n".join(lines) + "\n"


def commit() -> str | None:
    """The checkout's commit, with "+changes" if files differ from it (None outside a git checkout)."""

    def git(*cmd):
        return subprocess.run(
            ["git", *cmd], capture_output=True, text=True, cwd=Path(__file__).parent
        ).stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        return (
            head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")
        ) or None
    except OSError:
        return None


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--pair",
        action="append",
        help="toy-mt, toy-sum, toy-mt-llama, paper-t5 or paper-mt5 "
        "(repeatable; default toy-mt and toy-mt-llama)",
    )
    ap.add_argument("--n", type=int, default=30, help="timed inputs per pair (default 30)")
    ap.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="untimed warm-up decodes of the first inputs (default 2)",
    )
    ap.add_argument(
        "--repeats", type=int, default=1, help="timings per input and row, median kept (default 1)"
    )
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument(
        "--k", type=int, default=4, help="draft length for speculative / assisted (default 4)"
    )
    ap.add_argument("--fallback", type=float, default=0.5)
    ap.add_argument("--rollback", type=float, default=0.5)
    ap.add_argument(
        "--aligned", action="store_true", help="the aligned small model (zoo pairs that have one)"
    )
    ap.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads while timing (default 1)"
    )
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:n] (default cpu)")
    ap.add_argument(
        "--out",
        help="also write the run (machine, versions, every row and speedup) to this JSON file",
    )
    ap.add_argument(
        "--table",
        nargs="*",
        metavar="FILE",
        help="print the README's table of these --out files (none: "
        "the committed runs, benchmarks/compile/*.json); runs nothing",
    )
    ap.add_argument(
        "--full",
        action="store_true",
        help="with --table: docs/benchmark.md's table (adds the eager speedups and tokens/s)",
    )
    args = ap.parse_args(argv)
    if args.table is not None:
        print(table(args.table or sorted(RUNS.glob("*.json")), args.full), end="")
        return 0
    pairs = args.pair or ["toy-mt", "toy-mt-llama"]
    known = ("toy-mt", "toy-sum", "toy-mt-llama", "paper-t5", "paper-mt5")
    if not set(pairs) <= set(known):
        ap.error(f"--pair must be among {', '.join(known)}; got {pairs}")
    results = [measure(name, args) for name in pairs]
    if args.out:  # the run, whole, beside the printed tables
        run_info = {
            "machine": shard.machine(args.device),
            "commit": commit(),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "transformers": __import__("transformers").__version__,
            "args": vars(args),
            "pairs": results,
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(run_info, indent=1) + "\n")
    bad = {r["pair"]: r["not_identical"] for r in results if r["not_identical"]}
    if bad:
        print("NOT IDENTICAL to greedy:", bad)
        return 1
    print("lossless rows: identical outputs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
