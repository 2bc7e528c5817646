#!/usr/bin/env bash
# The GPU check for one offline H200 node as it comes (Python 3.12 with torch + CUDA, lightning,
# transformers 5.x and peft preinstalled; no network). What the node lacks travels as wheels in
# benchmarks/device_wheels (fetch them first with benchmarks/device_wheels.sh); they are installed
# into a venv that sees the node's packages, then benchmarks/device_check.py measures CLIP4Clip+MEA
# ViT-B/16 64-frame training (plain bf16 and DeepSpeed ZeRO-2, videos/s and model FLOP utilisation),
# GVE at Qwen2.5-VL-3B geometry (LoRA, samples/s) and the loader with 16 workers (on the fly and from
# the frame cache), and writes one JSON object to benchmarks/_work/device_check.json and stdout. A
# part that cannot run (e.g. DeepSpeed not installable) says why in its entry, and the JSON lists the
# version of each package found (or why it does not import). Then benchmarks/grad_cache.py measures
# gradient caching's memory/speed trade (CLIP4Clip+MEA ViT-B/16 at MELON batch 64 x 64 frames on one
# GPU, GVE-3B batch 64 per GPU; plain and cached at chunks 64, 16, 4, plain may run out of memory,
# which its row then says) and writes one JSON line to benchmarks/_work/grad_cache.json and stdout
# (GRAD_CACHE=0 skips it; with --cpu it runs only with GRAD_CACHE=1, at tiny sizes and one chunk).
# Then benchmarks/gve_positions.py --device cuda (GVE's M-RoPE positions on the GPU: ms per batch and whether
# they synchronise with the host; one JSON line to benchmarks/_work/gve_positions.json; not with --cpu).
# Last, the NVDEC case: benchmarks/decoders.py --device cuda (torchcodec decoding on the GPU next to
# PyAV and torchcodec on the CPU, one JSON line to benchmarks/_work/decoders_nvdec.json and stdout),
# attempted only when CUDA, torchcodec and FFmpeg's shared libraries are all there (a torchcodec cp312
# wheel put into benchmarks/device_wheels is installed with the others; device_wheels.sh does not fetch
# it); otherwise one skip line on stderr says which is missing (DECODERS=0 skips it; so does --cpu).
# Then benchmarks/device_cases.sh: one line per GPU path (fit -> test --ckpt_path, 8 CUDA RNG states on 1
# GPU, GPU bf16 vs CPU fp32 metrics, ZeRO-3 X-CLIP validation, GVE attention variants, --device cuda
# commands, faiss-gpu, flash-attn) into benchmarks/_work/device_cases.txt (DEVICE_CASES=0 skips them).
#   bash benchmarks/device_check.sh            # on the GPU node, about 5-8 minutes + 3-5 for grad_cache
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
"$PY" benchmarks/device_check.py --out "$OUT" "$@"
status=$?
if [ "${1:-}" = "--cpu" ]; then
  GC_DEFAULT=0
  GC_ARGS=(--size tiny --device cpu --models clip4clip_mea --chunks 0 16 --steps 1)
else
  GC_DEFAULT=1
  GC_ARGS=(--size gpu --device cuda --steps 3 --timeout 240)
fi
if [ "${GRAD_CACHE:-$GC_DEFAULT}" != 0 ]; then
  "$PY" benchmarks/grad_cache.py "${GC_ARGS[@]}" | tee "$(dirname "$OUT")/grad_cache.json" \
    || echo "grad_cache benchmark failed" >&2
fi
# host-to-device time of one MELON step's frames: float32 pageable, float32 pinned, uint8 pinned normalised on
# the GPU (the recipes' default); not with --cpu, where pinning has no CUDA device to pin for
if [ "${1:-}" != "--cpu" ]; then
  "$PY" benchmarks/loader_throughput.py --h2d-only | tee "$(dirname "$OUT")/host_to_device.json" \
    || echo "host-to-device benchmark failed" >&2
fi
# GVE's M-RoPE positions computed on the GPU (issue 57.10): ms per 16-row training batch, and "host_syncs": "none"
# when CUDA's sync debug mode saw no device -> host copy
if [ "${1:-}" != "--cpu" ]; then
  "$PY" benchmarks/gve_positions.py --device cuda | tee "$(dirname "$OUT")/gve_positions.json" \
    || echo "GVE positions benchmark failed" >&2
fi
if [ "${1:-}" = "--cpu" ] || [ "${DECODERS:-1}" = 0 ]; then
  echo "decoders NVDEC: skipped (--cpu or DECODERS=0)" >&2
else
  NVDEC_MISSING=$("$PY" -c '
import torch
from lit_retrieval.data.media.torchcodec_decoder import require_torchcodec
try:
    require_torchcodec()
    print("" if torch.cuda.is_available() else "no CUDA device")
except Exception as err:
    print(err)' 2>/dev/null) || NVDEC_MISSING="the availability check failed to run"
  if [ -n "$NVDEC_MISSING" ]; then
    echo "decoders NVDEC: skipped: $NVDEC_MISSING" >&2
  else
    "$PY" benchmarks/decoders.py --device cuda --videos 60s | tee "$(dirname "$OUT")/decoders_nvdec.json" \
      || echo "decoders NVDEC benchmark failed" >&2
  fi
fi
# The GPU paths the CPU tests only fake, one line each (benchmarks/device_cases.sh; DEVICE_CASES=0 skips
# them; with --cpu they run only with DEVICE_CASES=1, the CPU-runnable ones on the CPU)
if [ "${1:-}" = "--cpu" ]; then CASES_DEFAULT=0; CASES_ARGS=(--cpu); else CASES_DEFAULT=1; CASES_ARGS=(); fi
if [ "${DEVICE_CASES:-$CASES_DEFAULT}" != 0 ]; then
  PY="$PY" WORK="$(dirname "$OUT")/device_cases" bash benchmarks/device_cases.sh "${CASES_ARGS[@]}" \
    | tee "$(dirname "$OUT")/device_cases.txt" || echo "device cases: some FAILED (above)" >&2
fi
exit $status
