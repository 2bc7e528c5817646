"""CLIP4Clip-meanP with and without the MEA loss on the synthetic corpus, same seeds and budget.

Runs `lit-retrieval fit` then `test` with `configs/quickstart_mea.yaml` for each variant and seed
(baseline = `mea: null`; the MELON Tab. 3 ablation rows and the Tab. 7 text-augmentation stand-ins
are variants too), then prints one JSON line: per variant the mean and standard deviation over
seeds of T2V/V2T R@1 and Avg-Event R@1, and writes an overlay of the training curves
(MELON Fig. 9 style) next to the runs. Finished runs are reused, so an interrupted sweep resumes.

    python benchmarks/mea_synthetic.py --seeds 0 1 2 --variants baseline mea
    python benchmarks/mea_synthetic.py --seeds 0 --variants push push_xi push_pull mea
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEA = "--model.init_args.mea"
VARIANTS = {
    "baseline": [f"{MEA}", "null"],
    "push": [f"{MEA}.use_xi", "false", f"{MEA}.use_pull", "false"],
    "push_xi": [f"{MEA}.use_pull", "false"],
    "push_pull": [f"{MEA}.use_xi", "false"],
    "mea": [],
    "replace_words": [f"{MEA}.source", "replace_words"],
    "shuffle_events": [f"{MEA}.source", "shuffle_events"],
}
KEYS = ("t2v/R@1", "v2t/R@1", "avg_event/t2v/R@1", "order/shuffled/t2v/R@1", "query_mode/events/t2v/R@1")


def run_one(out: Path, variant: str, seed: int, config: Path) -> dict:
    fit_dir = out / variant / f"seed{seed}"
    metrics = out / variant / f"seed{seed}-test" / "metrics.json"
    if metrics.exists():
        return json.loads(metrics.read_text())["test"]
    common = ["--config", str(config), "--seed_everything", str(seed), "--data.init_args.shuffle_seed", str(seed),
              "--trainer.logger.init_args.save_dir", str(out), "--trainer.logger.init_args.name", variant]
    common += VARIANTS[variant] + ([] if variant == "baseline" else [f"{MEA}.seed", str(seed)])
    cli = [sys.executable, "-m", "lit_retrieval"]
    # the runs' own output goes to stderr: stdout carries only the JSON line
    subprocess.run([*cli, "fit", *common, "--trainer.logger.init_args.version", f"seed{seed}"], cwd=ROOT, check=True, stdout=sys.stderr)
    subprocess.run([*cli, "test", *common, "--trainer.logger.init_args.version", f"seed{seed}-test",
                    "--ckpt_path", str(fit_dir / "checkpoints" / "last.ckpt")], cwd=ROOT, check=True, stdout=sys.stderr)
    return json.loads(metrics.read_text())["test"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=["baseline", "mea"])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "quickstart_mea.yaml")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "mea_synthetic")
    args = parser.parse_args()
    summary = {}
    for variant in args.variants:
        results = [run_one(args.out, variant, seed, args.config) for seed in args.seeds]
        summary[variant] = {
            key: {"mean": round(statistics.fmean(r[key] for r in results), 2),
                  "std": round(statistics.stdev(r[key] for r in results), 2) if len(results) > 1 else 0.0}
            for key in KEYS if all(key in r for r in results)
        }
    sys.path.insert(0, str(ROOT))
    from lit_retrieval.callbacks.training_curves import plot_training_curves

    curves = {v: json.loads((args.out / v / f"seed{args.seeds[0]}" / "training_curves.json").read_text()) for v in args.variants}
    figure = plot_training_curves(curves, args.out / f"curves_{'_'.join(args.variants)}_seed{args.seeds[0]}.png")
    print(json.dumps({"benchmark": "mea_synthetic", "seeds": args.seeds, "figure": str(figure.relative_to(ROOT)), "results": summary}))


if __name__ == "__main__":
    main()
