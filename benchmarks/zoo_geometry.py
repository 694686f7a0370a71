"""Probe for a "zoo v3" large model: candidate large geometries (random weights) against the shipped
SMALL models.

    PYTHONPATH=. python benchmarks/zoo_geometry.py --out benchmarks/zoo-geometry/cpu-amd-epyc.json

For each candidate, in a fresh process of its own (dynamo's graph caches and the static caches are
per process; candidates never share a compiled code object's cache), on ONE thread, under bildlab's
timing protocol (`timing.interleave`: warm-up excluded, runners rotated input to input):

- eager: whole greedy decodes (dynamic cache) of --new tokens, EOS disabled (`eos_token_id=[]`,
  every decode runs the same length), large and shipped small interleaved; seconds per new token, c
  = small / large; - compiled: the same after `static.warm_up` with `cache="static", compile=True`
  (compile seconds reported); - the large model's pass over 5 new tokens against its one-token pass,
  after --prefix cached positions: eager with `calibrate._runners` (the calibration's own runner,
  `views.View`), compiled with the same pattern on a `static.StaticView` (a 5-token pass is padded
  to bucket 8 there); - training: one forward + backward + AdamW step on a ~1600-token batch of
  toy-mt training pairs (the zoo's batch_tokens), median of --train-steps after one untimed; -
  parameters and the fp16 file size (`save_pretrained` in float16, as the zoo stores its models).

Inputs: toy-mt test sources (the T5 pair's for T5, toy-mt-llama's for Llama).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# name -> geometry. T5: (encoder layers, decoder layers, width, d_ff); Llama: (layers, width,
# intermediate). Heads: width / 32 (d_kv 32, as the zoo). "ref" rows are today's large geometry
# (random weights, for comparison).
T5 = {
    "t5 10+10 w128 (ref)": (10, 10, 128, 512),
    "t5 10+24 w128": (10, 24, 128, 512),
    "t5 10+32 w128": (10, 32, 128, 512),
    "t5 10+36 w128": (10, 36, 128, 512),
    "t5 10+40 w128": (10, 40, 128, 512),
    "t5 4+24 w128": (4, 24, 128, 512),
    "t5 6+12 w256": (6, 12, 256, 1024),
    "t5 6+16 w256": (6, 16, 256, 1024),
    "t5 4+12 w384": (4, 12, 384, 1536),
}
LLAMA = {
    "llama 10 w128 (ref)": (10, 128, 384),
    "llama 24 w128": (24, 128, 384),
    "llama 32 w128": (32, 128, 384),
    "llama 40 w128": (40, 128, 384),
    "llama 12 w256": (12, 256, 768),
    "llama 16 w256": (16, 256, 768),
}
CANDIDATES = {**T5, **LLAMA}


def new_large(name: str, vocab: int):
    """A random model of the candidate geometry, configured as `zoo.new_model` configures the zoo's."""
    import transformers as tf

    torch.manual_seed(0)
    common = dict(vocab_size=vocab, pad_token_id=0, eos_token_id=1)
    if name in T5:
        enc, dec, width, ff = T5[name]
        cfg = tf.T5Config(
            decoder_start_token_id=0,
            dropout_rate=0.0,
            d_model=width,
            d_ff=ff,
            num_heads=width // 32,
            d_kv=32,
            num_layers=enc,
            num_decoder_layers=dec,
            **common,
        )
        return tf.T5ForConditionalGeneration(cfg).eval()
    layers, width, inter = LLAMA[name]
    cfg = tf.LlamaConfig(
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=None,
        hidden_size=width,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=width // 32,
        num_key_value_heads=width // 32,
        **common,
    )
    return tf.LlamaForCausalLM(cfg).eval()


def train_batch(pair, llama: bool, batch_tokens: int = 1600):
    """The first ~batch_tokens batch (train.batches, as the zoo trains) of toy-mt training pairs:
    model kwargs."""
    from bildlab.toy import train, zoo
    from bildlab.world import tasks

    pairs = train.encode_pairs(
        pair.tokenizer,
        tasks.load_task("toy-mt", "train", limit=2000),
        zoo.PREFIX["toy-mt"],
        max_target=zoo.MAX_NEW["toy-mt"],
    )
    # prompt + <sep>, then target + EOS; loss on the target (zoo._llama_data, train.train_causal_lm)
    if llama:
        pairs = [(s[:-1] + [pair.tokenizer.sep_token_id], t) for s, t in pairs]
    batch = train.batches(pairs, batch_tokens, seed=0)[0]  # the seeded plan's first batch
    if llama:
        ids = train.pad_rows([pairs[i][0] + pairs[i][1] for i in batch], 0)
        labels = train.pad_rows([[-100] * len(pairs[i][0]) + pairs[i][1] for i in batch], -100)
        mask = train.pad_rows([[1] * (len(pairs[i][0]) + len(pairs[i][1])) for i in batch], 0)
        return dict(input_ids=ids, attention_mask=mask, labels=labels)
    src = train.pad_rows([pairs[i][0] for i in batch], 0)
    return dict(
        input_ids=src,
        attention_mask=src.ne(0),
        labels=train.pad_rows([pairs[i][1] for i in batch], -100),
    )


def train_seconds(model, batch: dict, steps: int) -> dict:
    """Median seconds of one forward + backward + AdamW step (as train._loop), after one untimed
    step."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for s in range(steps + 1):
        t0 = time.perf_counter()
        model(**batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if s:
            times.append(time.perf_counter() - t0)
    model.eval()
    # padded positions the step computes: source (or prompt + target) rows, plus the decoder's
    # target rows (T5)
    tokens = batch["input_ids"].numel() + (
        batch["labels"].numel() if model.config.is_encoder_decoder else 0
    )
    return {
        "seconds": statistics.median(times),
        "padded_tokens": tokens,
        "rows": int(batch["input_ids"].shape[0]),
    }


def compiled_pass_runner(large, ms, prefix: int, new: int):
    """`calibrate._runners`' draft pattern (prefix fed untimed, then the large model's pass over m
    positions, cropped back), on the compiled static cache: seconds of each m's pass."""
    from bildlab.engine import static, timing
    from bildlab.harness.calibrate import _seq

    def run(x, i):
        v = static.StaticView(
            large,
            x,
            static.cache_length(x.shape[1] if not large.config.is_encoder_decoder else 1, new),
            compile=True,
        )
        seq, start = _seq(v, x, prefix + max(ms) + 1)
        # the prompt / decoder start and the prefix (eager first call), untimed
        v.logits(seq, start + prefix, 1)
        passes = []
        for m in ms:
            t0 = timing.clock(large.device)
            v.logits(seq, start + prefix + m, m)
            passes.append(timing.clock(large.device) - t0)
            v.crop(start + prefix)
        return [], {"passes": passes}

    return run


def measure(name: str, args) -> dict:
    """One candidate, in this process."""
    import bildlab
    from bildlab.engine import static, timing
    from bildlab.harness import calibrate

    torch.set_num_threads(1)
    llama = name in LLAMA
    pair = bildlab.load_pair("toy-mt-llama" if llama else "toy-mt")
    small, vocab = pair.small.eval(), len(pair.tokenizer)
    large = new_large(name, vocab)
    xs = pair.inputs("test", limit=args.n)
    new, ms, p = args.new, [1, 5], args.prefix
    out = {
        "name": name,
        "arch": "llama" if llama else "t5",
        "geometry": CANDIDATES[name],
        "params": sum(t.numel() for t in large.parameters()),
        "small_params": sum(t.numel() for t in small.parameters()),
        "source_tokens_mean": statistics.mean(x.shape[1] for x in xs),
    }
    with tempfile.TemporaryDirectory() as tmp:  # the file as the zoo stores it (fp16 safetensors)
        large.to(torch.float16).save_pretrained(tmp)
        large.to(torch.float32)
        out["fp16_mb"] = sum(f.stat().st_size for f in Path(tmp).glob("*.safetensors")) / 2**20

    def decoder(model, **kw):
        return lambda x, i: (lambda o: (o.tokens, o.stats))(
            bildlab.generate(model, x, max_new_tokens=new, eos_token_id=[], **kw)
        )

    def per_token(rows, runner):
        return statistics.mean(r[runner]["seconds"] / len(r[runner]["tokens"]) for r in rows)

    def passes(rows, runner):  # mean seconds of each m's pass
        return [
            statistics.mean(r[runner]["stats"]["passes"][j] for r in rows) for j in range(len(ms))
        ]

    log = lambda msg: print(f"[{name}] {msg}", file=sys.stderr, flush=True)  # noqa: E731

    def summary(rows, how: str) -> dict:  # per-token costs, c and the passes of one interleave
        res = {"large": per_token(rows, "large"), "small": per_token(rows, "small")}
        res["c"] = res["small"] / res["large"]
        res["pass_m"], res["pass_seconds"] = ms, passes(rows, "pass")
        res["pass5_over_pass1"] = res["pass_seconds"][1] / res["pass_seconds"][0]
        log(
            f"{how} large {res['large'] * 1e3:.2f} ms/token, small {res['small'] * 1e3:.2f}, "
            f"c {res['c']:.3f}, 5-token pass {res['pass5_over_pass1']:.2f}x"
        )
        return res

    # eager: whole decodes, and the calibration's own pass runner (views.View)
    pass_runner = calibrate._runners({"small": (large, small)}, ms, [p], new)[f"draft small {p}"]
    rows = timing.interleave(
        xs,
        {"large": decoder(large), "small": decoder(small), "pass": pass_runner},
        warmup=2,
        threads=1,
    )
    assert all(len(r["large"]["tokens"]) == new for r in rows)
    eager = summary(rows, "eager")
    # compiled: warm_up (the small's compile reported apart), then the same decodes on the static
    # cache
    comp = {"compile_small_seconds": static.warm_up(small, xs, max_new_tokens=new)}
    comp["compile_seconds"] = static.warm_up(large, xs, max_new_tokens=new)
    log(
        f"compiled in {comp['compile_seconds']:.0f} s (small {comp['compile_small_seconds']:.0f} s)"
    )
    rows = timing.interleave(
        xs,
        {
            "large": decoder(large, cache="static", compile=True),
            "small": decoder(small, cache="static", compile=True),
            "pass": compiled_pass_runner(large, ms, p, new),
        },
        warmup=2,
        threads=1,
    )
    comp.update(summary(rows, "compiled"))
    out.update(eager=eager, compiled=comp)
    out["train"] = train_seconds(large, train_batch(pair, llama), args.train_steps)
    out["train"]["hours_per_1000_steps"] = out["train"]["seconds"] * 1000 / 3600
    log(
        f"train step {out['train']['seconds']:.2f} s ({out['train']['padded_tokens']} padded tokens)"
    )
    return out


def targets(r: dict) -> dict:
    """The brief's targets: c <= 0.12 eager and compiled, 5-token pass <= 1.3x, large/small >= 8
    (both modes)."""
    e, c = r["eager"], r["compiled"]
    return {
        "c_eager": e["c"] <= 0.12,
        "c_compiled": c["c"] <= 0.12,
        "pass5": e["pass5_over_pass1"] <= 1.3,
        "ratio8": min(1 / e["c"], 1 / c["c"]) >= 8,
    }


def table(record: dict) -> str:
    """The results as a markdown table (for benchmarks/zoo-geometry/README.md)."""
    ok = lambda b: "yes" if b else "no"  # noqa: E731
    lines = [
        "| candidate | params M | fp16 MB | eager large ms/tok | eager c | compiled large ms/tok | compiled c "
        "| compile s | 5-tok pass eager / compiled | train s/step (h/1000) | all targets |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in record["results"]:
        e, c, t = r["eager"], r["compiled"], r["train"]
        lines.append(
            f"| {r['name']} | {r['params'] / 1e6:.1f} | {r['fp16_mb']:.1f} | {e['large'] * 1e3:.1f} | "
            f"{e['c']:.3f} | {c['large'] * 1e3:.1f} | {c['c']:.3f} | {c['compile_seconds']:.0f} | "
            f"{e['pass5_over_pass1']:.2f} / {c['pass5_over_pass1']:.2f} | {t['seconds']:.2f} "
            f"({t['hours_per_1000_steps']:.2f}) | {ok(all(r['targets'].values()))} |"
        )
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON file of the results")
    ap.add_argument(
        "--only", nargs="*", default=list(CANDIDATES), help="candidate names (default: all)"
    )
    ap.add_argument("--n", type=int, default=10, help="timed inputs")
    ap.add_argument("--new", type=int, default=32, help="new tokens per decode")
    ap.add_argument(
        "--prefix", type=int, default=16, help="cached output positions before the timed passes"
    )
    ap.add_argument("--train-steps", type=int, default=3)
    # measure --only[0], write --out
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--table", action="store_true", help="print --out's results as a markdown table"
    )
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(args.out.read_text())))
        return
    if args.worker:
        args.out.write_text(json.dumps(measure(args.only[0], args), indent=1))
        return
    import transformers

    results, t_start = [], time.perf_counter()
    for i, name in enumerate(args.only):  # one process per candidate, one at a time
        print(
            f"== {i + 1}/{len(args.only)} {name} ({time.perf_counter() - t_start:.0f} s so far)",
            flush=True,
        )
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            cmd = [
                sys.executable,
                __file__,
                "--worker",
                "--out",
                f.name,
                "--only",
                name,
                "--n",
                str(args.n),
                "--new",
                str(args.new),
                "--prefix",
                str(args.prefix),
                "--train-steps",
                str(args.train_steps),
            ]
            subprocess.run(cmd, check=True)
            r = json.loads(Path(f.name).read_text())
        r["targets"] = targets(r)
        results.append(r)
    from bildlab.harness.shard import processor

    record = {
        "cpu": processor(),
        "threads": 1,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "made": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "settings": {
            "n": args.n,
            "new_tokens": args.new,
            "prefix": args.prefix,
            "warmup": 2,
            "train_steps": args.train_steps,
            "batch_tokens": 1600,
        },
        "seconds": round(time.perf_counter() - t_start, 1),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")


import torch  # noqa: E402  (after the environment is set)

if __name__ == "__main__":
    main()
