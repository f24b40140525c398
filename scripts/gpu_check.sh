#!/bin/sh
# Issue 33's GPU lane, for a machine with an NVIDIA GPU, PyTorch and nvidia-smi (scripts/test.sh does not run
# it): memgap from this tree (src/ on the path, nothing installed), under the Python that has torch.
#     sh scripts/gpu_check.sh [OUT_DIR]        # PYTHON=... to name another interpreter
# What it checks and why: benchmarks/gpu_check.py (a PyTorch process under inspect, top and run, then a lab over
# PYTORCH_ALLOC_CONF on tests/programs/torch_fragment.py). Exits 1 where a check failed, 2 where the machine
# lacks what it needs; figures in OUT_DIR/gpu_check.json, the whole log in OUT_DIR/gpu_check.log, each
# command's output beside them. Under 8 minutes on a 16-core H100 or H200 machine (each step's seconds in
# the JSON).
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT_DIR=${1:-${OUT:-/tmp/gpu_check}}
mkdir -p "$OUT_DIR"
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'" || { echo "gpu_check: needs torch with a GPU" >&2; exit 2; }
command -v nvidia-smi >/dev/null || { echo "gpu_check: needs nvidia-smi" >&2; exit 2; }
{ nvidia-smi; "$PY" -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"; } \
    > "$OUT_DIR/machine.txt" 2>&1 || true
rc=0
PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" "$PY" benchmarks/gpu_check.py "$OUT_DIR" \
    > "$OUT_DIR/gpu_check.log" 2>&1 || rc=$?
cat "$OUT_DIR/gpu_check.log"
[ "$rc" -eq 0 ] || echo "gpu_check: FAILED (exit code $rc): see $OUT_DIR/gpu_check.log and $OUT_DIR/*.stderr" >&2
exit "$rc"
