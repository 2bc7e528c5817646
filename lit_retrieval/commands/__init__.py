"""Subcommands for the jobs around training; each module exposes `run(argv) -> exit code`.

`COMMANDS` maps a command name to its module, imported only when that command runs (`cli.main`).
"""

COMMANDS = {
    "synth": "lit_retrieval.commands.synth",
    "metrics": "lit_retrieval.commands.metrics",
    "compare": "lit_retrieval.commands.compare",
    "curves": "lit_retrieval.commands.curves",
    "shots": "lit_retrieval.commands.shots",
    "sali-stats": "lit_retrieval.commands.sali_stats",
    "gve-tasks": "lit_retrieval.commands.gve_tasks",
    "mine-negatives": "lit_retrieval.commands.mine_negatives",
    "tiny-qwen": "lit_retrieval.commands.tiny_qwen",
    "uvrb": "lit_retrieval.commands.uvrb",
    "index": "lit_retrieval.commands.index",
    "search": "lit_retrieval.commands.search",
    "slurm": "lit_retrieval.commands.slurm",
    "configs": "lit_retrieval.commands.configs",
    "convert-checkpoint": "lit_retrieval.commands.convert_checkpoint",
    "validate-melon": "lit_retrieval.commands.validate_melon",
    "build-melon": "lit_retrieval.commands.build_melon",
    "export-gve": "lit_retrieval.commands.export_gve",
    "export-dual-encoder": "lit_retrieval.commands.export_dual_encoder",
    "cache-frames": "lit_retrieval.commands.cache_frames",
    "shard": "lit_retrieval.commands.shard",
    "grid": "lit_retrieval.commands.grid",
    "report": "lit_retrieval.commands.report",
    "serve": "lit_retrieval.commands.serve",
}


def run_command(name: str, argv: list[str]) -> int:
    """Import the subcommand `name` and run it with `argv`; its exit code."""
    import importlib

    return importlib.import_module(COMMANDS[name]).run(argv)
