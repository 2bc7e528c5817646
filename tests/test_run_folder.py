"""`run_folder.py` on config files written with known content: which folders are a run's, and every path under
them moved (a logger folder inside the run folder moves with it; paths outside stay)."""

from __future__ import annotations

import yaml
from jsonargparse import Namespace

from lit_retrieval.run_folder import config_run_folders, moved


def test_run_folders_and_their_paths_move_together(tmp_path):
    row = tmp_path / "row.yaml"
    row.write_text(
        yaml.safe_dump(
            {
                "trainer": {
                    "default_root_dir": "runs/x/",
                    "logger": [
                        {"class_path": "TensorBoardLogger", "init_args": {"save_dir": "runs/x/tb"}},
                        {"class_path": "CSVLogger", "init_args": {"save_dir": "logs/x"}},
                        {"class_path": "WandbLogger", "init_args": None},
                    ],
                }
            }
        )
    )
    (tmp_path / "model.yaml").write_text("model: {class_path: M}\n")
    (tmp_path / "broken.yaml").write_text("trainer: [unclosed\n")
    files = [str(row), str(tmp_path / "model.yaml"), str(tmp_path / "broken.yaml"), str(tmp_path / "missing.yaml")]
    assert config_run_folders(files) == {"runs/x", "logs/x"}
    trainer = Namespace(
        logger=[
            Namespace(init_args=Namespace(save_dir="runs/x/tb")),
            Namespace(init_args=Namespace(save_dir="logs/x")),
        ],
        callbacks=[Namespace(init_args=Namespace(dirpath="runs/x/checkpoints", filename="runs/xy"))],
        default_root_dir="runs/x",
    )
    changes: list[str] = []
    moved(trainer, {"runs/x", "logs/x"}, "/scratch/r1", changes)
    assert (
        trainer.logger[0].init_args.save_dir == "/scratch/r1/tb"
        and trainer.logger[1].init_args.save_dir == "/scratch/r1"
    )
    assert trainer.callbacks[0].init_args.dirpath == "/scratch/r1/checkpoints"
    assert trainer.callbacks[0].init_args.filename == "runs/xy"  # a name that only starts like the folder stays
    assert "runs/x/checkpoints -> /scratch/r1/checkpoints" in changes and len(changes) == 4
    assert moved({"a": ["runs/x/f", 3]}, {"runs/x"}, "R") == {"a": ["R/f", 3]}
