#!/usr/bin/env bash
# Fetch (on a machine with network) what benchmarks/device_check.sh installs offline on a GPU node that
# has Python 3.12, torch (CUDA), lightning, transformers 5.x and peft but not the rest:
#   bash benchmarks/device_wheels.sh [FOLDER]       # default benchmarks/device_wheels (git-ignored)
# Binary wheels for cp312 manylinux x86_64 only (--only-binary, --no-deps): jsonargparse and the two
# packages of its `signatures` extra, PyAV, torchcodec (device_check's NVDEC case; it needs FFmpeg's shared
# libraries on the node), DeepSpeed's pure-Python dependencies. DeepSpeed itself
# publishes no current wheel (PyPI holds only its source archive), so its sdist is fetched and
# device_check.sh builds it without compiled ops (DS_BUILD_OPS=0); faiss and PySceneDetect (with
# OpenCV) are left out: the check does not use them, and OpenCV alone would not fit the 64 MiB.
# The folder must stay under 64 MiB with the repository (this script prints the total).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-benchmarks/device_wheels}
mkdir -p "$OUT"
PIP=(python3 -m pip download --quiet --no-deps --dest "$OUT")
"${PIP[@]}" --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  jsonargparse docstring-parser typeshed-client av hjson py-cpuinfo ninja msgpack nvidia-ml-py einops \
  'torchcodec>=0.17,<0.18'
# DeepSpeed in the project's range (pyproject.toml's `deepspeed` extra; 0.19.x fails on every 0-dim
# parameter such as `logit_scale`, which would read as a GPU fault in the check)
DEEPSPEED=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["deepspeed"][0])')
"${PIP[@]}" --no-binary=:all: --no-build-isolation "$DEEPSPEED"
echo "fetched (name-version):"
ls "$OUT" | sed -E 's/(-py[23].*|-cp3.*|\.tar\.gz|\.zip)$//' | sort | sed 's/^/  /'
WHEELS=$(du -sb "$OUT" | cut -f1)
REPO=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
echo "wheels $((WHEELS / 1048576)) MiB + repository $((REPO / 1048576)) MiB = $(((WHEELS + REPO) / 1048576)) MiB (limit 64 MiB)"
[ $((WHEELS + REPO)) -lt $((64 * 1048576)) ] || { echo "over 64 MiB: drop a package" >&2; exit 1; }
