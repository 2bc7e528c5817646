"""SALI against CLIP4Clip-meanP on the synthetic corpus with relational scenes (SALI Tab. 2-3 in
miniature), with the "train meanP longer" control of SALI Sec. 4.

Fits CLIP4Clip-meanP (`configs/sali/synthetic_clip4clip.yaml`), then, warm-started from it with
the same budget, each SALI training variant (`configs/sali/synthetic_sali_max.yaml` with the
training operator and penalty switched) and meanP itself; every SALI model is tested with each
inference operator. Prints one JSON line with overall, relational and Rel-Multi R@K per run and
test setting (mean and standard deviation over seeds). Finished runs are reused, so an
interrupted sweep resumes.

    python sweeps/sali_synthetic.py --seeds 0 --train max ot max_pen ot_pen
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAD = "--model.init_args.head.init_args"
TRAIN = {  # SALI training settings (SALI Tab. 3 rows)
    "max": [f"{HEAD}.train_operator", "max", f"{HEAD}.train_penalty", "false"],
    "ot": [f"{HEAD}.train_operator", "ot", f"{HEAD}.train_penalty", "false"],
    "max_pen": [f"{HEAD}.train_operator", "max", f"{HEAD}.train_penalty", "true"],
    "ot_pen": [f"{HEAD}.train_operator", "ot", f"{HEAD}.train_penalty", "true"],
}
INFER = {"max": [f"{HEAD}.eval_operator", "max"], "ot": [f"{HEAD}.eval_operator", "ot"]}
KEYS = (
    "t2v/R@1",
    "t2v/R@5",
    "t2v/R@10",
    "rel_multi/t2v/R@1",
    "rel_multi/t2v/R@5",
    "rel_multi/t2v/R@10",
    "relational/t2v/R@1",
    "non_relational/t2v/R@1",
    "rel_multi/n",
    "rel_multi/min_shots",
)


def cli(*args: str) -> None:
    # the runs' own output goes to stderr: stdout carries only the JSON line
    subprocess.run([sys.executable, "-m", "lit_retrieval", *args], cwd=ROOT, check=True, stdout=sys.stderr)


def fit(out: Path, name: str, config: str, overrides: list[str]) -> Path:
    ckpt = out / name / "fit" / "checkpoints" / "last.ckpt"
    if not ckpt.exists():
        cli(
            "fit",
            "--config",
            config,
            *overrides,
            "--trainer.logger.init_args.save_dir",
            str(out),
            "--trainer.logger.init_args.name",
            name,
            "--trainer.logger.init_args.version",
            "fit",
        )
    return ckpt


def test(out: Path, name: str, version: str, config: str, overrides: list[str], ckpt: Path) -> dict[str, float]:
    metrics = out / name / version / "metrics.json"
    if not metrics.exists():
        cli(
            "test",
            "--config",
            config,
            *overrides,
            "--ckpt_path",
            str(ckpt),
            "--trainer.logger.init_args.save_dir",
            str(out),
            "--trainer.logger.init_args.name",
            name,
            "--trainer.logger.init_args.version",
            version,
        )
    results = json.loads(metrics.read_text())["test"]
    return {k: results[k] for k in KEYS if k in results}


def checkpoint_to(out: Path, name: str) -> list[str]:
    """Put the run's checkpoints inside its logger folder (the configs name a fixed one)."""
    return [
        "--trainer.callbacks",
        json.dumps(
            [
                {
                    "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                    "init_args": {
                        "dirpath": str(out / name / "fit" / "checkpoints"),
                        "save_last": True,
                        "save_top_k": 0,
                    },
                }
            ]
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--train", nargs="+", choices=list(TRAIN), default=["max", "ot"])
    parser.add_argument("--epochs", type=int, default=4, help="SALI and control epochs after the warm start")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "sali_synthetic")
    args = parser.parse_args()
    out = args.out.resolve()
    base_config, sali_config = "configs/sali/synthetic_clip4clip.yaml", "configs/sali/synthetic_sali_max.yaml"
    base = fit(out, "clip4clip", base_config, checkpoint_to(out, "clip4clip"))
    runs: dict[str, list[dict[str, float]]] = {"clip4clip": [test(out, "clip4clip", "test", base_config, [], base)]}
    for seed in args.seeds:
        seeded = [
            "--seed_everything",
            str(seed),
            "--data.init_args.shuffle_seed",
            str(seed),
            "--trainer.max_epochs",
            str(args.epochs),
            "--model.init_args.warm_start",
            str(base),
        ]
        name = f"clip4clip_longer/seed{seed}"
        longer = ["--model.init_args.optim.backbone_lr", "1e-7", "--model.init_args.optim.head_lr", "1e-4"]
        ckpt = fit(out, name, base_config, seeded + longer + checkpoint_to(out, name))
        runs.setdefault("clip4clip_longer", []).append(test(out, name, "test", base_config, [], ckpt))
        for train in args.train:
            name = f"sali_{train}/seed{seed}"
            ckpt = fit(out, name, sali_config, seeded + TRAIN[train] + checkpoint_to(out, name))
            for infer, overrides in INFER.items():
                runs.setdefault(f"sali_{train}/infer_{infer}", []).append(
                    test(out, name, f"test_{infer}", sali_config, TRAIN[train] + overrides, ckpt)
                )
    summary = {
        name: {
            k: {
                "mean": round(statistics.fmean(r[k] for r in results), 2),
                "std": round(statistics.stdev(r[k] for r in results), 2) if len(results) > 1 else 0.0,
            }
            for k in KEYS
            if all(k in r for r in results)
        }
        for name, results in runs.items()
    }
    print(json.dumps({"benchmark": "sali_synthetic", "seeds": args.seeds, "epochs": args.epochs, "results": summary}))


if __name__ == "__main__":
    main()
