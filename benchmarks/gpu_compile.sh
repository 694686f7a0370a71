#!/usr/bin/env bash
# Eager vs compiled steps (CUDA graphs) on one GPU, in one call (not run in CI; no hub needed):
#
#     bash benchmarks/gpu_compile.sh [OUT [PAIR ...]]   # logs and JSON in OUT (default runs/gpu)
#     bash benchmarks/gpu_compile.sh runs/gpu            # toy-mt, then toy-mt-llama: under 7 minutes on an H200
#     bash benchmarks/gpu_compile.sh runs/gpu paper-t5   # T5-large / T5-small at the paper's sizes: a call of its own
#
# `bench_compile.py --device cuda`, one pair per process, each under its own time limit so that one slow compilation
# cannot take the others' results with it. The toy pairs are the shipped zoo (trained: BLEU, the aligned small model
# where there is one); the paper pairs have random weights and random 256-token sources (speed only). On the H200,
# compilation took 122 s for toy-mt and 71 s for toy-mt-llama; paper-t5's did not end within 250 s.
set -uo pipefail
out="${1:-runs/gpu}"
shift $(( $# > 0 ? 1 : 0 ))
pairs=("$@")
[ ${#pairs[@]} -eq 0 ] && pairs=(toy-mt toy-mt-llama)
cd "$(dirname "$0")/.."
mkdir -p "$out"
python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: this script is for a GPU box')" || exit 1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
export PYTHONUNBUFFERED=1
for name in "${pairs[@]}"; do
    case "$name" in
        toy-mt) limit=240 extra=(--aligned --n 30) ;;
        toy-mt-llama|toy-sum) limit=170 extra=(--n 30) ;;
        paper-t5|paper-mt5) limit=560 extra=(--n 10) ;;
        *) echo "pair must be toy-mt, toy-sum, toy-mt-llama, paper-t5 or paper-mt5; got $name"; exit 2 ;;
    esac
    timeout "$limit" python3 benchmarks/bench_compile.py --device cuda --pair "$name" "${extra[@]}" \
        --out "$out/$name.json" 2>&1 | grep --line-buffered -v "it/s\]" | tee "$out/$name.log"
    echo "== $name: exit ${PIPESTATUS[0]} (limit $limit s)"
done
