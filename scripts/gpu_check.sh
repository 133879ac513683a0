#!/usr/bin/env bash
# GPU check: a short real SGLang 0.5.23 run vs the simulator's prediction for
# the same trace; prints mean JCT and per-iteration latency of both and the ratio real/sim.
# Sized for a 10-minute window on one GPU (Qwen2.5-7B, dummy weights, 16 DAG-4 tasks).
#
#   pip install -e .[sglang]          # once, on the GPU machine (CUDA torch comes with sglang)
#   bash scripts/gpu_check.sh         # or: make gpu-check;  args go to python -m topas.fidelity.gpu_check
#   bash scripts/gpu_check.sh --model qwen2_5_32b --gpu a100_80gb --num-tasks 12
#   bash scripts/gpu_check.sh --fidelity     # the simulator-fidelity validation (topas.fidelity) on this GPU:
#                                            # latency profile + dag4 x {fcfs, topas}, real vs simulated; table and
#                                            # figure in runs/gpu_check/fidelity/ (dry run: --fidelity --device cpu)
#
# Output: a table on stdout and runs/gpu_check/{comparison.json,trace.jsonl,real/,sim/}
# (real/ keeps server.log, decisions.jsonl, iterations.jsonl). Exit 0: both runs finished;
# 2: setup problem (no GPU, sglang missing, bad argument); 1: a run failed; 124: hard timeout.
# GPU_CHECK_TIMEOUT (seconds, default 570) bounds the whole script; on expiry it is
# interrupted (SIGINT: the server is stopped) and killed 30 s later.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python

device=gpu
for a in "$@"; do case "$a" in cpu|--device=cpu) device=cpu;; esac; done
if [ "$device" = gpu ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "error: no GPU visible (nvidia-smi -L failed); for a dry run on CPU: bash scripts/gpu_check.sh --device cpu" >&2
    exit 2
  fi
  nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader >&2
fi
if ! "$PY" -c "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('sglang') else 1)"; then
  echo "error: sglang is not importable by $PY: pip install -e .[sglang] (GPU) or make sglang-cpu (CPU)" >&2
  exit 2
fi
"$PY" -c "import importlib.metadata as m; v = m.version('sglang'); print(f'sglang {v}', '(pinned 0.5.23)' if v == '0.5.23' else '(WARNING: pinned 0.5.23)')" >&2
exec timeout --signal=INT --kill-after=30 "${GPU_CHECK_TIMEOUT:-570}" "$PY" -m topas.fidelity.gpu_check "$@"
