#!/usr/bin/env bash
# The paper calibration on one GPU, in one call (not run in CI; no hub needed):
#
#     bash benchmarks/calibrate_gpu.sh            # cuda, 1 thread; writes results/paper/.calibrations/
#     bash benchmarks/calibrate_gpu.sh cuda:1     # another GPU
#
# The paper pairs' models at their sizes with random weights (T5-large / T5-small for XSum and CNN/DM, mT5-large /
# mT5-small for IWSLT and WMT; each geometry measured once), `calibrate.defaults` on a GPU: 8 sampled inputs per cost
# (random sources of 64, 256 and 1,024 tokens), 127 new tokens, the batch gain at 32 rows. Budget: under 10 minutes
# for all; the `timeout` stops it at 10. Then `bildlab study --profile paper --plan` prices from this calibration.
set -euo pipefail
device="${1:-cuda}"
cd "$(dirname "$0")/.."
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: this script is for a GPU box')"
start=$(date +%s)
timeout 600 python -m bildlab.cli calibrate --profile paper --root . -p device "$device"
echo "calibrated on $(python -c 'import torch; print(torch.cuda.get_device_name())') in $(( $(date +%s) - start )) s"
