"""Draft cost ratio c and acceptance of each draft of a zoo pair: the separate small model, the early exit as a view
of the large model (`bildlab.exit_draft`: shared weights, encoder outputs and KV cache), and the early exit as a
separate copy (the old `load_pair(early_exit=True)`: its own weights, encoder run and cache).

    python benchmarks/early_exit_cost.py --pair toy-mt --n 40
    python benchmarks/early_exit_cost.py --pair toy-mt-llama --n 40 --exits 1,2,4,6,8

Greedy speculative decoding (k drafted tokens per verification) on the pair's test inputs, 1 thread, after a warm-up;
the large model alone and every draft interleaved input by input (order rotated). c = draft time per draft call /
large-model time per token of greedy decoding (wall clock, as `generate` reports them); acceptance = accepted /
drafted tokens; the speedup over greedy decoding in wall time and in this process's CPU time. With `--clock cpu` the
times inside `generate` are this process's CPU time too (on 1 thread the same as wall time on an idle machine, and
steadier on a shared one). Outputs are checked against greedy (exit 1 if one differs).
"""

import argparse
import sys
import time

import torch

import bildlab
from bildlab.models import EXIT_LAYER, load_pair


def copy_of(draft, large):
    """The early exit as a separate model: the draft's config, a copy of the large model's weights."""
    copy = type(large)(draft.config).eval()
    missing, _ = copy.load_state_dict(large.state_dict(), strict=False)
    assert not missing, missing
    return copy.to(large.dtype)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="toy-mt")
    ap.add_argument("--n", type=int, default=40, help="timed test inputs (default 40)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="the clock inside generate (default wall)")
    ap.add_argument("--exits", default="", help="extra exit layers for an acceptance-only sweep, e.g. 1,2,4")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.clock == "cpu":  # CPU only: no device sync needed
        bildlab.decoding._clock = lambda device: time.process_time()
    pair = load_pair(args.pair)
    large = pair.large
    view = bildlab.exit_draft(large, EXIT_LAYER)
    drafts = {"small": pair.small, f"exit@{EXIT_LAYER} view": view, f"exit@{EXIT_LAYER} copy": copy_of(view, large)}
    inputs = pair.inputs("test", limit=args.warmup + args.n)
    names = ["greedy", *drafts]
    totals = {name: dict(seconds=0.0, large_seconds=0.0, large_calls=0, small_seconds=0.0, small_calls=0,
                         drafted=0, accepted=0, tokens=0, cpu=0.0) for name in names}
    ok = True
    for i, x in enumerate(inputs):
        order = names[i % len(names):] + names[: i % len(names)]
        outs, cpu = {}, {}
        for name in order:
            t0 = time.process_time()
            if name == "greedy":
                outs[name] = bildlab.generate(large, x, max_new_tokens=args.max_new_tokens)
            else:
                outs[name] = bildlab.generate(large, x, small=drafts[name], method="speculative", k=args.k,
                                              max_new_tokens=args.max_new_tokens)
            cpu[name] = time.process_time() - t0
        ok &= all(o.tokens == outs["greedy"].tokens for o in outs.values())
        if i < args.warmup:
            continue
        for name, out in outs.items():
            for key in totals[name]:
                totals[name][key] += (len(out.tokens) if key == "tokens" else cpu[name] if key == "cpu"
                                      else out.stats[key])
    g = totals["greedy"]
    step = g["large_seconds"] / g["large_calls"]
    print(f"{args.pair}: {args.n} test inputs after {args.warmup} warm-up, k={args.k}, 1 thread, {args.clock} clock, "
          f"torch {torch.__version__}; large step {1000 * step:.3f} ms/token (greedy)")
    print("| draft | c (draft step / large step) | draft ms/call | acceptance | tokens/verification | "
          "speedup vs greedy (wall / CPU time) |")
    print("|---|---|---|---|---|---|")
    for name in drafts:
        t = totals[name]
        c = t["small_seconds"] / t["small_calls"] / step
        print(f"| {name} | {c:.3f} | {1000 * t['small_seconds'] / t['small_calls']:.3f} | "
              f"{t['accepted'] / t['drafted']:.3f} | {t['tokens'] / t['large_calls']:.2f} | "
              f"{g['seconds'] / t['seconds']:.2f}x / {g['cpu'] / t['cpu']:.2f}x |")
    if args.exits:
        print("\nacceptance of other exits (views; same inputs, speculative k=%d):" % args.k)
        for layer in (int(v) for v in args.exits.split(",")):
            draft = bildlab.exit_draft(large, layer)
            acc = dft = 0
            for x in inputs[args.warmup:]:
                st = bildlab.generate(large, x, small=draft, method="speculative", k=args.k,
                                      max_new_tokens=args.max_new_tokens).stats
                acc, dft = acc + st["accepted"], dft + st["drafted"]
            print(f"  exit after decoder layer {layer}: acceptance {acc / dft:.3f}")
    print("lossless outputs identical to greedy:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
