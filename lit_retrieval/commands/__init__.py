"""Subcommands for the jobs around training; each module exposes `run(argv) -> exit code`."""

from lit_retrieval.commands import convert_checkpoint, curves, gve_tasks, index, metrics, mine_negatives, search, shots, slurm, synth, tiny_qwen, uvrb

COMMANDS = {
    "synth": synth.run,
    "metrics": metrics.run,
    "curves": curves.run,
    "shots": shots.run,
    "gve-tasks": gve_tasks.run,
    "mine-negatives": mine_negatives.run,
    "tiny-qwen": tiny_qwen.run,
    "uvrb": uvrb.run,
    "index": index.run,
    "search": search.run,
    "slurm": slurm.run,
    "convert-checkpoint": convert_checkpoint.run,
}
