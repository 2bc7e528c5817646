#!/usr/bin/env bash
# The GPU check for one offline H200 node as it comes (Python 3.12 with torch + CUDA, lightning,
# transformers 5.x and peft preinstalled; no network). What the node lacks travels as wheels in
# benchmarks/device_wheels (fetch them first with benchmarks/device_wheels.sh); they are installed
# into a venv that sees the node's packages, then benchmarks/device_check.py measures CLIP4Clip+MEA
# ViT-B/16 64-frame training (plain bf16 and DeepSpeed ZeRO-2, videos/s and model FLOP utilisation),
# GVE at Qwen2.5-VL-3B geometry (LoRA, samples/s) and the loader with 16 workers (on the fly and from
# the frame cache), and writes one JSON object to benchmarks/_work/device_check.json and stdout. A
# part that cannot run (e.g. DeepSpeed not installable) says why in its entry, and the JSON lists the
# version of each package found (or why it does not import).
#   bash benchmarks/device_check.sh            # on the GPU node, about 5-8 minutes
#   bash benchmarks/device_check.sh --cpu      # the same script at tiny sizes on a CPU
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=${WHEELS:-benchmarks/device_wheels}
VENV=${VENV:-/tmp/lit-retrieval-device-venv}
OUT=${OUT:-benchmarks/_work/device_check.json}
mkdir -p "$(dirname "$OUT")"
if [ "${1:-}" = "--cpu" ] && [ -z "${DEVICE_CHECK_VENV:-}" ]; then
  PY=${PYTHON:-python3}  # the CPU check runs in the environment it is given
else
  python3 -m venv --system-site-packages "$VENV"
  PY="$VENV/bin/python"
  INSTALL=("$PY" -m pip install --quiet --no-index --no-deps --find-links "$WHEELS")
  for wheel in "$WHEELS"/*.whl; do
    [ -e "$wheel" ] || { echo "no wheels in $WHEELS (run benchmarks/device_wheels.sh)" >&2; break; }
    "${INSTALL[@]}" "$wheel" || echo "install failed: $wheel" >&2
  done
  for sdist in "$WHEELS"/deepspeed-*.tar.gz; do
    [ -e "$sdist" ] && { DS_BUILD_OPS=0 "${INSTALL[@]}" --no-build-isolation "$sdist" || echo "install failed: $sdist" >&2; }
  done
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" benchmarks/device_check.py --out "$OUT" "$@"
