#!/usr/bin/env bash
# Does speculation survive batching, on one GPU, in one call (not run in CI; no hub needed):
#
#     bash benchmarks/gpu_batch_sizes.sh [OUT [PAIR ...]]   # JSON and logs in OUT (default runs/gpu/batch-sizes)
#     BILDLAB_ZOO=<zoo> bash benchmarks/gpu_batch_sizes.sh   # another zoo than the installed one (e.g. zoo v3)
#
# `bench_batch_sizes.py --device cuda` on 128 test inputs at batch 1 to 64, one pair per process, each under its own
# time limit. The file is rewritten after each batch size and a rerun resumes at the first one missing, so a pair cut
# off by its limit goes on in the next call. Not yet run on a GPU (none was lent); the limits are guesses from the CPU
# runs (a toy pair's batch-1 decodes dominate). Its files are not read by the notebook (results/batch-sizes/*.json
# are): copy one there, or pass the folder to `study.batch_answer`.
set -uo pipefail
out="${1:-runs/gpu/batch-sizes}"
shift $(( $# > 0 ? 1 : 0 ))
pairs=("$@")
[ ${#pairs[@]} -eq 0 ] && pairs=(toy-mt-llama toy-mt)
cd "$(dirname "$0")/.."
python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: this script is for a GPU box')" || exit 1
mkdir -p "$out"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
export PYTHONUNBUFFERED=1
for name in "${pairs[@]}"; do
    case "$name" in
        toy-mt|toy-mt-llama|toy-sum) limit=270 ;;
        *) echo "pair must be toy-mt, toy-mt-llama or toy-sum; got $name"; exit 2 ;;
    esac
    timeout "$limit" python3 benchmarks/bench_batch_sizes.py --device cuda --pair "$name" --n 128 --out "$out" 2>&1 \
        | grep --line-buffered -v "it/s\]" | tee -a "$out/$name.log"
    echo "== $name: exit ${PIPESTATUS[0]} (limit $limit s)"
done
python3 benchmarks/bench_batch_sizes.py --table --out "$out" --figures "$out"
