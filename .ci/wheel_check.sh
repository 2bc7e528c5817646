#!/usr/bin/env bash
# The project as users install it: the wheel (.ci/build_wheel.sh), installed non-editable into a fresh venv,
# run from a folder outside the checkout. The venv reuses .venv's installed dependencies (torch and the rest,
# through a .pth line: nothing downloaded), never its editable lit_retrieval: the check below fails unless
# lit_retrieval is imported from the wheel.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
wheel="$(bash "$root/.ci/build_wheel.sh" "$work/dist")"
"$root/.venv/bin/python" -m venv "$work/venv"
py="$work/venv/bin/python"
purelib() { "$1" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"; }
purelib "$root/.venv/bin/python" > "$(purelib "$py")/reuse_dependencies.pth"
"$py" -m pip install --quiet --no-deps --ignore-installed "$wheel"
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
