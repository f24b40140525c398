#!/bin/sh
# Issue 33's GPU lane, for a machine with an NVIDIA GPU, PyTorch and nvidia-smi (scripts/test.sh does not run
# it): memgap from this tree (src/ on the path, nothing installed), under the Python that has torch.
#     sh scripts/gpu_check.sh [OUT_DIR]        # PYTHON=... to name another interpreter
# What it checks and why: benchmarks/gpu_check.py. Exits 1 where a check failed; figures in OUT_DIR/gpu_check.json.
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'" || { echo "gpu_check: needs torch with a GPU" >&2; exit 2; }
command -v nvidia-smi >/dev/null || { echo "gpu_check: needs nvidia-smi" >&2; exit 2; }
PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" benchmarks/gpu_check.py "${1:-${OUT:-/tmp/gpu_check}}"
