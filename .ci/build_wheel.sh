#!/usr/bin/env bash
# Build the project's wheel into DIST (usage: .ci/build_wheel.sh DIST [PYTHON]) from a copy of the files it is
# made of, so the checkout gets no build/ folder. --no-build-isolation: the setuptools of PYTHON's environment
# (default .venv), nothing downloaded. The wheel's configs/ come through the symbolic link lit_retrieval/configs,
# the Slurm templates from the root's slurm/ through the symbolic link lit_retrieval/launch/sbatch (pyproject.toml's
# package-data).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dist="$(mkdir -p "$1" && cd "$1" && pwd)"
python="${2:-$root/.venv/bin/python}"
source_copy="$(mktemp -d)"
trap 'rm -rf "$source_copy"' EXIT
tar -C "$root" --exclude=__pycache__ -cf - pyproject.toml README.md LICENSE lit_retrieval configs slurm \
  | tar -C "$source_copy" -xf -
(cd "$source_copy" && "$python" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$dist" .)
ls "$dist"/lit_retrieval-*.whl
