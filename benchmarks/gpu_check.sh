#!/bin/sh
# The prepared GPU check (at most 8 minutes): gpu-marked tests, the cell-update benchmark at dims
# 512..8192 and one HM-LSTM training step at PTB size, all results in one JSON file.
#   sh benchmarks/gpu_check.sh [--out DIR] [--quick]
cd "$(dirname "$0")/.." || exit 1
exec timeout 480 "${PYTHON:-python}" benchmarks/gpu_check.py "$@"
