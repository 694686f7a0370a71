#!/usr/bin/env bash
# Eager vs compiled steps (CUDA graphs) on one GPU, in one call (not run in CI; no hub needed):
#
#     bash benchmarks/gpu_compile.sh [OUT]        # logs and JSON in OUT (default runs/gpu)
#
# `bench_compile.py --device cuda`, one pair per process, each under its own time limit so that one slow compilation
# cannot take the others' results with it: first the paper's T5 pair at its sizes (T5-large / T5-small, random
# weights, random 256-token sources: speed only), then the shipped toy pairs (trained: BLEU and the aligned small
# model where there is one). Budget: under 10 minutes for all.
set -uo pipefail
out="${1:-runs/gpu}"
cd "$(dirname "$0")/.."
mkdir -p "$out"
python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: this script is for a GPU box')" || exit 1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
export PYTHONUNBUFFERED=1
pair() {  # seconds, name, bench_compile arguments
    local limit=$1 name=$2
    shift 2
    timeout "$limit" python3 benchmarks/bench_compile.py --device cuda --out "$out/$name.json" "$@" 2>&1 | tee "$out/$name.log"
    echo "== $name: exit $?"
}
pair 250 paper-t5 --pair paper-t5 --n 10
pair 170 toy-mt --pair toy-mt --aligned --n 30
pair 120 toy-mt-llama --pair toy-mt-llama --n 30
