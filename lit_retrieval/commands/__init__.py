"""Subcommands for the jobs around training; each module exposes `run(argv) -> exit code`."""

from lit_retrieval.commands import curves, metrics, shots, synth

COMMANDS = {"synth": synth.run, "metrics": metrics.run, "curves": curves.run, "shots": shots.run}
