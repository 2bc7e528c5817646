#!/usr/bin/env bash
# GPU smoke test on one lent GPU machine, in one command:
#   WHEELS=/path/to/wheels bash benchmarks/gpu_smoke.sh
# Installs torch/torchvision and the `gpu` extra (DeepSpeed, faiss-gpu, flash-attn) from wheels
# brought along (nothing is downloaded when WHEELS holds them all), then runs DeepSpeed ZeRO-2
# bf16 steps of CLIP4Clip+MEA and of a small random GVE, and the 3B-sized GVE throughput; each
# part prints one JSON line (steps/s, samples/s or tokens/s, peak GPU memory).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${WHEELS:-wheels}
VENV=${VENV:-.venv-gpu}
TORCH=${TORCH:-"torch torchvision"}
python3 -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet --find-links "$WHEELS")
if [ -d "$WHEELS" ] && [ -z "${ONLINE:-}" ]; then PIP+=(--no-index); fi
"${PIP[@]}" $TORCH
"${PIP[@]}" -e '.[gpu,dev]'
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$VENV/bin/python" benchmarks/gpu_smoke.py --steps "${STEPS:-20}"
