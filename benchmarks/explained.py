"""Are speedups explained by measured costs on this machine? A calibration, then the policies timed
right after it on the same machine, each record's measured speedup against the one its exact counts
predict (bildlab.measure.costs).

    python benchmarks/explained.py                     # the toy pairs, 100 validation examples each, 1 thread
    python benchmarks/explained.py --pairs toy-mt --n 200

Into a registry of its own (default a temporary folder; never the committed results/toy): `bildlab
calibrate`'s record for each pair, then one sweep per pair (every example timed at batch 1 under the
one protocol, vanilla interleaved), each record priced by that calibration
(`records.build_records`). Prints one row per record and the count within +-5%, and writes them as
JSON (--out)."""

import argparse
import json
import sys
import tempfile
import time

from bildlab.harness import evaluate as ev
from bildlab.harness.calibrate import calibrate
from bildlab.measure import costs

GRID = [
    {"method": "bild", "fallback": 0.5, "rollback": 3.0},
    {"method": "bild", "fallback": 0.1, "rollback": 1.0},
    {"method": "bild", "fallback": 0.9, "rollback": 6.0},
    {"method": "bild", "fallback": 0.5, "rollback": 0.5},
    {"method": "speculative", "k": 2},
    {"method": "speculative", "k": 4},
    {"method": "small"},
    {"method": "prompt-lookup", "ngram": 3, "k": 2},
]
EXTRA = {
    "toy-mt": [
        {"method": "bild", "draft": "early-exit", "fallback": 0.5, "rollback": 3.0},
        {"method": "bild", "draft": "aligned", "fallback": 0.5, "rollback": 3.0},
    ],
    "toy-sum": [
        {"method": "bild", "draft": "early-exit", "fallback": 0.5, "rollback": 3.0},
        {"method": "bild", "draft": "aligned", "fallback": 0.5, "rollback": 3.0},
    ],
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", default="toy-mt,toy-sum,toy-mt-llama")
    ap.add_argument(
        "--n", type=int, default=100, help="validation examples per pair, every one timed"
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--registry", default=None, help="registry folder (default: a temporary one)")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    registry = args.registry or tempfile.mkdtemp(prefix="bildlab-explained-")
    rows = []
    for pair in args.pairs.split(","):
        t0 = time.perf_counter()
        cal = calibrate(pair, threads=args.threads, registry=registry)
        t1 = time.perf_counter()
        recs = ev.sweep(
            pair,
            GRID + EXTRA.get(pair, []),
            split="validation",
            limit=args.n,
            threads=args.threads,
            registry=registry,
            progress=False,
        )
        print(
            f"{pair}: calibrated in {t1 - t0:.0f} s (pass(1) {1e3 * cal['costs']['large_pass']['seconds'][0][0]:.2f}"
            f" ms, c {costs.cost_ratio(cal):.3f}), swept in {time.perf_counter() - t1:.0f} s",
            file=sys.stderr,
        )
        for r in recs:
            s = r["summary"]
            rows.append(
                {
                    "pair": pair,
                    "method": r["key"]["method"],
                    "draft": r["key"].get("draft") or "-",
                    "policy": r["key"]["policy"],
                    "n": s["examples"],
                    "speedup": s["speedup"],
                    "speedup_ci": s["speedup_ci"],
                    "predicted": s["predicted_speedup"],
                    "predicted_ci": s["predicted_speedup_ci"],
                    "ratio": s["measured_over_predicted"],
                    "ratio_ci": s["measured_over_predicted_ci"],
                }
            )
    print(
        f"{'pair':<13} {'method':<14} {'draft':<11} {'policy':<42} {'measured':>22} {'predicted':>22} "
        f"{'measured / predicted':>26}"
    )
    for r in rows:
        policy = json.dumps(r["policy"], separators=(",", ":"))
        print(
            f"{r['pair']:<13} {r['method']:<14} {r['draft']:<11} {policy:<42} "
            f"{r['speedup']:>6.2f}x [{r['speedup_ci'][0]:.2f}, {r['speedup_ci'][1]:.2f}] "
            f"{r['predicted']:>6.2f}x [{r['predicted_ci'][0]:.2f}, {r['predicted_ci'][1]:.2f}] "
            f"{r['ratio']:>8.3f} [{r['ratio_ci'][0]:.3f}, {r['ratio_ci'][1]:.3f}]"
        )
    inside = sum(abs(r["ratio"] - 1) <= costs.TOLERANCE for r in rows)
    print(
        f"within ±{costs.TOLERANCE:.0%}: {inside} of {len(rows)} records (N = {args.n} examples each, "
        f"{args.threads} thread(s)); registry {registry}"
    )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
