"""The paper's models at their real sizes, timed on this machine: the per-step costs that a GPU-less
box can measure.

    python benchmarks/paper_size.py                        # 1 thread, CPU; writes benchmarks/paper_size.json
    python benchmarks/paper_size.py --threads 2 --steps 8
    python benchmarks/paper_size.py --device cuda          # the same on a GPU (timings synchronize CUDA)

Random-weight models with the paper checkpoints' configurations (T5-large / T5-small for XSum and
CNN/DM, mT5-large / mT5-small with their own output layers for IWSLT and WMT), the configs read from
the local mirror when there is one ($BILDLAB_MIRROR), else the public ones written below; both
models' vocabularies cut to the tokenizer as `load_pair` does (32,100 / 250,100 rows). One pair at a
time, both models in memory (only ratios of times measured in one call mean anything), freed before
the next. Per pair, under bildlab's one timing protocol (`timing.interleave`: warm-up excluded, a
fixed thread count, rotating order):

- a decoder step with a KV cache: one new token after a prefix of PREFIX tokens, over a source of
  SOURCE tokens, the output layer included, for the large and the small model; the cost ratio c =
  small step / large step; - the large model verifying n tokens in one call (n in VERIFY), as
  speculative decoding and BiLD do; - the output layer alone, and its share of a decoder step; - the
  encoder, per source length (ENCODER): one timed call after one warm-up (at 1,024 tokens a large
  encoder takes about 20 s on one CPU thread).

It prints Leviathan et al.'s expected speedup (1 - a^(k+1)) / ((1 - a)(k c + 1)) over acceptance
rates a (the paper does not give per-token acceptance rates for these pairs), and the same with the
measured cost of verifying k + 1 tokens in place of one step; the process's peak memory; and writes
everything as JSON for the plan."""

import argparse
import json
import platform
import resource
import sys
import time
from pathlib import Path

import torch
import transformers as tf

from bildlab.engine.timing import interleave, settings
from bildlab.measure.summary import expected_speedup, expected_tokens_per_call
from bildlab.world import mirror, models

# the checkpoints' public configs
CONFIGS, COMMON = models.PAPER_CONFIGS, models.PAPER_CONFIG_COMMON
# family -> (large, small, the paper pair whose checkpoints a mirror holds, the tokenizer's rows,
# the tasks)
FAMILIES = {
    "t5": ("t5-large", "t5-small", "xsum", 32100, ["xsum", "cnn_dailymail"]),
    "mt5": ("mt5-large", "mt5-small", "wmt14-de-en", 250100, ["iwslt2017-de-en", "wmt14-de-en"]),
}
SOURCE, PREFIX = 256, 32  # a typical encoded source and decoder prefix for the step timings
VERIFY = (1, 2, 4, 8)
ENCODER = (64, 256, 1024)
ACCEPTANCE = (0.6, 0.7, 0.8, 0.9)
KS = (1, 3, 7)  # draft lengths whose verification (k + 1 tokens) is measured


def build(name: str, repo_dir: Path | None, rows: int, device, dtype, seed: int):
    """A random-weight model with the checkpoint's configuration (`models.random_model`; the
    mirror's config.json if given), and what it is."""
    model = models.random_model(
        name, device, rows=rows, seed=seed, dtype=dtype, config_dir=repo_dir, config=CONFIGS[name]
    )
    config = model.config
    return model, {
        "config": str(repo_dir)
        if repo_dir
        else "configs in bildlab/world/models.py (PAPER_CONFIGS)",
        "parameters": sum(p.numel() for p in model.parameters()),
        "untied_output_layer": model.get_output_embeddings().weight
        is not model.get_input_embeddings().weight,
        "vocabulary_rows": rows,
        "d_model": config.d_model,
        "layers": config.num_layers,
    }


def runners(tag: str, model, source: torch.Tensor, verify: tuple[int, ...]) -> dict:
    """Timed calls on one model: a decoder step (and verifying n tokens) after a cached prefix, the
    output layer."""
    enc = model.get_encoder()(input_ids=source, return_dict=True)
    cache = tf.EncoderDecoderCache(tf.DynamicCache(), tf.DynamicCache())
    with torch.inference_mode():
        model(
            decoder_input_ids=torch.full((1, PREFIX), 7, device=source.device),
            encoder_outputs=enc,
            cache=cache,
            use_cache=True,
        )
    hidden = torch.randn(1, 1, model.config.d_model, device=source.device, dtype=model.dtype)

    def feed(n):
        ids = torch.full((1, n), 9, device=source.device)

        def run(x, i):
            model(decoder_input_ids=ids, encoder_outputs=enc, cache=cache, use_cache=True)
            cache.crop(-n)  # back to the prefix
            return [], {}

        return run

    def output_layer(x, i):
        model.lm_head(hidden)
        return [], {}

    out = {f"{tag} step": feed(1)}
    out.update({f"{tag} verify {n}": feed(n) for n in verify if n > 1})
    out[f"{tag} output layer"] = output_layer
    return out


def encoders(tag: str, model, source: torch.Tensor) -> dict:
    """Timed calls of the encoder on the first n tokens of `source`, n in ENCODER."""

    def encode(n):
        def run(x, i):
            model.get_encoder()(input_ids=source[:, :n])
            return [], {}

        return run

    return {f"{tag} encoder {n}": encode(n) for n in ENCODER}


def median_seconds(rows: list[dict]) -> dict:
    import statistics

    return {name: statistics.median(r[name]["seconds"] for r in rows) for name in rows[0]}


def peak_memory(device) -> dict:
    out = {"host_peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}
    if torch.device(device).type == "cuda":
        out["device_peak_gb"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    return out


def measure(family: str, args) -> dict:
    large_name, small_name, pair, rows, tasks = FAMILIES[family]
    base = mirror.root()
    dirs = [mirror.repo_dir(repo, base) if base else None for repo in models.PAPER_PAIRS[pair][:2]]
    t0 = time.perf_counter()
    large, large_info = build(large_name, dirs[0], rows, args.device, torch.float32, seed=0)
    small, small_info = build(small_name, dirs[1], rows, args.device, torch.float32, seed=1)
    built = time.perf_counter() - t0
    g = torch.Generator().manual_seed(0)
    source = torch.randint(3, rows, (1, max(ENCODER)), generator=g).to(args.device)
    inputs = [source] * (args.steps + 1)  # placeholders: every runner times the same call
    with torch.inference_mode():
        calls = {
            **runners("large", large, source[:, :SOURCE], VERIFY),
            **runners("small", small, source[:, :SOURCE], ()),
        }
    steps = median_seconds(interleave(inputs, calls, warmup=1, threads=args.threads))
    encoder_calls = {**encoders("large", large, source), **encoders("small", small, source)}
    steps.update(
        median_seconds(interleave([source] * 2, encoder_calls, warmup=1, threads=args.threads))
    )
    c = steps["small step"] / steps["large step"]
    out = {
        "tasks": tasks,
        "large": {"name": large_name, **large_info},
        "small": {"name": small_name, **small_info},
        "seconds": {k: round(v, 5) for k, v in steps.items()},
        "c": round(c, 4),
        "output_layer_share": {
            m: round(steps[f"{m} output layer"] / steps[f"{m} step"], 3) for m in ("large", "small")
        },
        "verify_over_step": {
            n: round(steps[f"large verify {n}"] / steps["large step"], 3) for n in VERIFY if n > 1
        },
        "build_seconds": round(built, 1),
        "memory": peak_memory(args.device),
    }
    out["expected_speedup"] = {
        f"a={a}": {
            f"k={k}": {
                "formula": round(expected_speedup(a, k, c), 2),
                "measured_verify": round(
                    expected_tokens_per_call(a, k)
                    / (k * c + steps[f"large verify {k + 1}"] / steps["large step"]),
                    2,
                ),
            }
            for k in KS
        }
        for a in ACCEPTANCE
    }
    del large, small, calls, encoder_calls
    return out


def report(family: str, r: dict, threads: int) -> None:
    s = r["seconds"]
    print(
        f"\n== {family}: {r['large']['name']} ({r['large']['parameters'] / 1e6:,.0f}M) / {r['small']['name']} "
        f"({r['small']['parameters'] / 1e6:,.0f}M), {r['large']['vocabulary_rows']:,} rows, "
        f"output layer {'own' if r['large']['untied_output_layer'] else 'tied'}; tasks {', '.join(r['tasks'])}"
    )
    print(
        f"decoder step (prefix {PREFIX}, source {SOURCE}, {threads} thread(s)): large {s['large step'] * 1e3:.1f} ms,"
        f" small {s['small step'] * 1e3:.1f} ms  ->  c = {r['c']:.3f}"
    )
    print(
        "large verifying n tokens / one step: "
        + ", ".join(f"n={n}: {v:.2f}" for n, v in r["verify_over_step"].items())
    )
    print(
        f"output layer share of a step: large {r['output_layer_share']['large']:.0%}, "
        f"small {r['output_layer_share']['small']:.0%}"
    )
    print(
        "encoder (ms): "
        + "; ".join(
            f"{m} " + ", ".join(f"{n}: {s[f'{m} encoder {n}'] * 1e3:.0f}" for n in ENCODER)
            for m in ("large", "small")
        )
    )
    print(
        f"expected speedup bound (Leviathan et al.; measured verify cost in brackets), k = {', '.join(map(str, KS))}:"
    )
    for a, row in r["expected_speedup"].items():
        print(
            f"  {a}: "
            + "  ".join(
                f"k={k[2:]}: {v['formula']:.2f}x [{v['measured_verify']:.2f}x]"
                for k, v in row.items()
            )
        )
    print(f"built in {r['build_seconds']:.0f} s; peak memory so far: {r['memory']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads while timing (default 1)"
    )
    ap.add_argument(
        "--steps", type=int, default=5, help="timed calls per measurement, median kept (default 5)"
    )
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:n] (default cpu)")
    ap.add_argument(
        "--family", action="append", choices=list(FAMILIES), help="only this family (repeatable)"
    )
    ap.add_argument(
        "--out",
        default=str(Path(__file__).with_suffix(".json")),
        help="the JSON file ('' for none)",
    )
    args = ap.parse_args(argv)
    if args.threads < 1 or args.steps < 1:
        ap.error(f"--threads and --steps must be >= 1; got {args.threads}, {args.steps}")
    from bildlab.study.params import ParameterError, check_device

    try:
        check_device(args.device)
    except ParameterError as e:
        ap.error(str(e))
    t0 = time.perf_counter()
    results = {}
    for family in args.family or FAMILIES:
        results[family] = measure(family, args)
        report(family, results[family], args.threads)
    total = time.perf_counter() - t0
    print(f"\nall in {total:.0f} s")
    if args.out:
        doc = {
            "machine": {
                "device": str(args.device),
                "cpu": platform.processor() or platform.machine(),
                "torch": torch.__version__,
                "transformers": tf.__version__,
                "python": sys.version.split()[0],
            },
            "protocol": settings(threads=args.threads, repeats=1, warmup=1),
            "timed_calls": args.steps,
            "source_tokens": SOURCE,
            "prefix_tokens": PREFIX,
            "mirror": str(mirror.root() or ""),
            "seconds_total": round(total),
            "families": results,
        }
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
