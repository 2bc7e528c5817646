"""Heads with and without the MEA loss on the synthetic corpus, same seeds and budget.

Runs `lit-retrieval fit` then `test` with `configs/quickstart_mea.yaml` for each head, variant and
seed (baseline = `mea: null`; the MELON Tab. 3 ablation rows and the Tab. 7 text-augmentation
stand-ins are variants too), then prints one JSON line: per run name the mean and standard
deviation over seeds of T2V/V2T R@1, Avg-Event R@1 and more, plus each run's fit time, and writes
an overlay of the training curves (MELON Fig. 9 style) next to the runs. Finished runs are reused,
so an interrupted sweep resumes. Run names are the variant for meanP, `HEAD-VARIANT` otherwise.

    python sweeps/mea_synthetic.py --seeds 0 1 2 --variants baseline mea
    python sweeps/mea_synthetic.py --seeds 0 --variants push push_xi push_pull mea
    python sweeps/mea_synthetic.py --out runs/heads_synthetic --epochs 4 --seeds 0 \
        --heads meanP seqLSTM seqTransf tightTransf xclip ts2net --variants baseline mea
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
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
HEAD = "--model.init_args.head"
HEADS = {  # overrides of the quick-start head (the 32 px ViT and MiniLM text tower stay)
    "meanP": [],
    "seqLSTM": [f"{HEAD}.class_path", "lit_retrieval.models.heads.SeqLSTMHead"],
    "seqTransf": [f"{HEAD}.class_path", "lit_retrieval.models.heads.SeqTransfHead", f"{HEAD}.init_args.layers", "2"],
    "tightTransf": [
        f"{HEAD}.class_path",
        "lit_retrieval.models.heads.TightTransfHead",
        f"{HEAD}.init_args.layers",
        "2",
        f"{HEAD}.init_args.max_frames",
        "12",
    ],
    "xclip": [
        f"{HEAD}.class_path",
        "lit_retrieval.models.heads.XCLIPHead",
        f"{HEAD}.init_args.max_words",
        "256",
        f"{HEAD}.init_args.max_frames",
        "12",
        f"{HEAD}.init_args.temporal_layers",
        "2",
    ],
    "ts2net": [
        f"{HEAD}.class_path",
        "lit_retrieval.models.heads.TS2NetHead",
        f"{HEAD}.init_args.max_frames",
        "12",
        f"{HEAD}.init_args.temporal_layers",
        "2",
        f"{HEAD}.init_args.samples",
        "100",
    ],
    "ucofia": [
        f"{HEAD}.class_path",
        "lit_retrieval.models.heads.UCoFiAHead",
        f"{HEAD}.init_args.max_frames",
        "12",
        f"{HEAD}.init_args.max_words",
        "256",
        f"{HEAD}.init_args.temporal_layers",
        "2",
        f"{HEAD}.init_args.samples",
        "100",
    ],
    "uatvr": [
        f"{HEAD}.class_path",
        "lit_retrieval.models.heads.UATVRHead",
        f"{HEAD}.init_args.max_words",
        "260",
        f"{HEAD}.init_args.layers",
        "2",
    ],
    "pau": [f"{HEAD}.class_path", "lit_retrieval.models.heads.PAUHead", f"{HEAD}.init_args.layers", "2"],
    # the quick-start ViT is random, so TempMe trains it fully here (train_backbone) besides merging
    "tempme": [
        f"{HEAD}.class_path",
        "lit_retrieval.models.heads.TempMeHead",
        f"{HEAD}.init_args.num_frames",
        "12",
        f"{HEAD}.init_args.merge_layers",
        "[1, 2]",
        f"{HEAD}.init_args.merge_frames",
        "[2, 2]",
        f"{HEAD}.init_args.image_r",
        "1",
        f"{HEAD}.init_args.train_backbone",
        "true",
    ],
    "mevtr": [
        f"{HEAD}.class_path",
        "lit_retrieval.models.heads.MeVTRHead",
        f"{HEAD}.init_args.num_events",
        "4",
        "--model.init_args.query_mode",
        "events",
        "--model.init_args.event_loss.class_path",
        "lit_retrieval.losses.MeVTRLoss",
    ],
}
KEYS = ("t2v/R@1", "v2t/R@1", "avg_event/t2v/R@1", "order/shuffled/t2v/R@1", "query_mode/events/t2v/R@1")


def run_name(head: str, variant: str) -> str:
    return variant if head == "meanP" else f"{head}-{variant}"


def run_one(out: Path, head: str, variant: str, seed: int, config: Path, epochs: int | None) -> dict:
    name = run_name(head, variant)
    fit_dir = out / name / f"seed{seed}"
    metrics = out / name / f"seed{seed}-test" / "metrics.json"
    if metrics.exists():
        return json.loads(metrics.read_text())["test"]
    common = [
        "--config",
        str(config),
        "--seed_everything",
        str(seed),
        "--data.init_args.shuffle_seed",
        str(seed),
        "--trainer.logger.init_args.save_dir",
        str(out),
        "--trainer.logger.init_args.name",
        name,
    ]
    common += HEADS[head] + VARIANTS[variant] + ([] if variant == "baseline" else [f"{MEA}.seed", str(seed)])
    common += [] if epochs is None else ["--trainer.max_epochs", str(epochs)]
    cli = [sys.executable, "-m", "lit_retrieval"]
    # the runs' own output goes to stderr: stdout carries only the JSON line
    start = time.perf_counter()
    subprocess.run(
        [*cli, "fit", *common, "--trainer.logger.init_args.version", f"seed{seed}"],
        cwd=ROOT,
        check=True,
        stdout=sys.stderr,
    )
    (fit_dir / "fit_seconds.txt").write_text(f"{time.perf_counter() - start:.1f}\n")
    subprocess.run(
        [
            *cli,
            "test",
            *common,
            "--trainer.logger.init_args.version",
            f"seed{seed}-test",
            "--ckpt_path",
            str(fit_dir / "checkpoints" / "last.ckpt"),
        ],
        cwd=ROOT,
        check=True,
        stdout=sys.stderr,
    )
    return json.loads(metrics.read_text())["test"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=["baseline", "mea"])
    parser.add_argument("--heads", nargs="+", choices=list(HEADS), default=["meanP"])
    parser.add_argument("--epochs", type=int, help="override the config's max_epochs")
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "quickstart_mea.yaml")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "mea_synthetic")
    args = parser.parse_args()
    args.out = args.out.resolve()
    summary = {}
    names = []
    for head in args.heads:
        for variant in args.variants:
            name = run_name(head, variant)
            names.append(name)
            results = [run_one(args.out, head, variant, seed, args.config, args.epochs) for seed in args.seeds]
            summary[name] = {
                key: {
                    "mean": round(statistics.fmean(r[key] for r in results), 2),
                    "std": round(statistics.stdev(r[key] for r in results), 2) if len(results) > 1 else 0.0,
                }
                for key in KEYS
                if all(key in r for r in results)
            }
            timings = [args.out / name / f"seed{seed}" / "fit_seconds.txt" for seed in args.seeds]
            if all(t.exists() for t in timings):
                summary[name]["fit_seconds"] = round(statistics.fmean(float(t.read_text()) for t in timings), 1)
    sys.path.insert(0, str(ROOT))
    from lit_retrieval.callbacks.training_curves import plot_training_curves

    curves = {
        n: json.loads((args.out / n / f"seed{args.seeds[0]}" / "training_curves.json").read_text()) for n in names
    }
    figure = plot_training_curves(curves, args.out / f"curves_{'_'.join(names)}_seed{args.seeds[0]}.png")
    print(
        json.dumps(
            {
                "benchmark": "mea_synthetic",
                "seeds": args.seeds,
                "figure": str(figure.relative_to(ROOT)),
                "results": summary,
            }
        )
    )


if __name__ == "__main__":
    main()
