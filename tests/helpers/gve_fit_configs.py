"""The tiny GVE fit (`configs/gve/tiny_cpu.yaml` on the tiny Qwen2.5-VL and the synthetic GVE tasks, 2 frames)
as the Modality Pyramid and interruption tests run it, with optional stops, crashes and step checkpoints."""

from __future__ import annotations

import yaml


def write_config(
    path,
    tiny_qwen,
    gve_tasks,
    run_dir,
    epochs=2,
    steps=3,
    workers=0,
    stop_after=None,
    crash_at=None,
    every_n_steps=None,
):
    config = yaml.safe_load(open("configs/gve/tiny_cpu.yaml"))
    config["trainer"].update(max_epochs=epochs, default_root_dir=str(run_dir))
    if stop_after is not None:
        config["trainer"]["callbacks"].append(
            {"class_path": "helpers.stop_callbacks.StopAfterEpoch", "init_args": {"epoch": stop_after}}
        )
    if crash_at is not None:
        config["trainer"]["callbacks"].append(
            {"class_path": "helpers.stop_callbacks.CrashAtStep", "init_args": {"step": crash_at}}
        )
    if every_n_steps is not None:
        config["trainer"]["callbacks"][0]["init_args"]["every_n_train_steps"] = every_n_steps
    config["trainer"]["logger"]["init_args"]["save_dir"] = str(run_dir)
    config["trainer"]["callbacks"][0]["init_args"]["dirpath"] = str(run_dir / "checkpoints")
    config["trainer"]["callbacks"][1]["init_args"]["num_probe_pairs"] = 6
    model = config["model"]["init_args"]
    model["embedder"]["model_path"] = str(tiny_qwen)
    model["embedder"]["inputs"]["max_frames"] = 2
    data = config["data"]["init_args"]
    data.update(steps_per_epoch=steps, num_workers=workers)
    by_name = {s.name: s.path for s in gve_tasks["train"]}
    for task in data["tasks"]:
        task.update(path=by_name[task["name"]], batch_size=4)
    val = {s.name: s.path for s in gve_tasks["val"]}
    for task in data["val_tasks"]:
        task["path"] = val[task["name"]]
    path.write_text(yaml.safe_dump(config))
    return path
