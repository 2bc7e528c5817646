#!/usr/bin/env bash
# The project as users install it (docs/install.md): the wheel (.ci/build_wheel.sh) installed alone into a fresh
# venv with the extras the quick start needs, as `pip install` does for a user: the Makefile's torch pair first (its
# TORCH line; local files on this project's machines), then the wheel and its dependencies, nothing borrowed from
# the checkout's venv; then the quick start from a folder outside the checkout.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
wheel="$(bash "$root/.ci/build_wheel.sh" "$work/dist")"
"$root/.venv/bin/python" -m venv "$work/venv"  # the interpreter only: a venv never sees another venv's packages
py="$work/venv/bin/python"
read -ra torch_pair <<< "$(sed -n 's/^TORCH ?= //p' "$root/Makefile")"
"$py" -m pip install --quiet "${torch_pair[@]}"
"$py" -m pip install --quiet "${wheel}[cpu,quickstart]"
"$py" -m pip check
echo "wheel check: installed in $((SECONDS - start)) s"
mkdir "$work/project" && cd "$work/project"
cli="$work/venv/bin/lit-retrieval"
"$py" -c "import lit_retrieval, sys; p = lit_retrieval.__file__; print(p); sys.exit(not p.startswith('$work/venv/'))"
"$cli" --help
"$cli" slurm fit.sbatch --set CONFIG=configs/quickstart.yaml ACCOUNT=proj PARTITION=cpu RUN_DIR=runs/quick \
  GPUS=0 ACCELERATOR=cpu TASKS_PER_NODE=1 --out fit.sbatch
grep -q "lit-retrieval fit --config configs/quickstart.yaml" fit.sbatch  # the shipped template, rendered
"$cli" configs copy
"$cli" grid configs/plans/melon_tab2.yaml --out runs/melon_tab2 --dry-run | tail -2
# the quick start, quick-start sized: 1 epoch on a 120-video synthetic corpus
small=(--trainer.max_epochs 1 --data.init_args.synthetic.num_videos 120)
"$cli" fit --config configs/quickstart.yaml "${small[@]}"
"$cli" test --config configs/quickstart.yaml "${small[@]}" --trainer.logger.init_args.version test \
  --ckpt_path runs/quickstart/checkpoints/last.ckpt
test -s runs/quickstart/logs/test/metrics.json
echo "wheel check: $((SECONDS - start)) s"
