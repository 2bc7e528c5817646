"""Start-up time of every `lit-retrieval` subcommand (issues 40, 56): the wall and CPU time of each one's `--help` in a
fresh interpreter, beside `python -c pass`, `python -c "import torch"` and `python -c "import lightning.pytorch"`.
The commands are read from `lit-retrieval --help` (the CLI's own list), not listed here. The target: every command
outside the trainer ones (fit/validate/test/predict: LightningCLI builds their parsers from the classes) within
1.5 s of `import torch`, wall and CPU alike; `fit --help` is timed for reference. Best of `--repeats` runs each;
prints one JSON line.

    python benchmarks/cli_startup.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

BASELINES = {"pass": "pass", "import torch": "import torch", "import lightning.pytorch": "import lightning.pytorch"}
TARGET_S = 1.5  # over `import torch`


def cli_commands() -> tuple[list[str], list[str]]:
    """The trainer commands and the other commands, as `lit-retrieval --help` lists them."""
    text = subprocess.run([sys.executable, "-m", "lit_retrieval", "--help"], check=True, capture_output=True, text=True)
    listed = {}
    for line in text.stdout.splitlines():
        head, _, names = line.partition(": ")
        if head.startswith(("trainer commands", "other commands")):
            listed[head.split()[0]] = [name.strip() for name in names.split(",")]
    return listed["trainer"], listed["other"]


def timed(argv: list[str], repeats: int) -> tuple[float, float]:
    """Best wall and best CPU seconds (user + system of the child) of `repeats` runs."""
    walls, cpus = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return round(min(walls), 3), round(min(cpus), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    trainer, others = cli_commands()
    runs = {name: [sys.executable, "-c", code] for name, code in BASELINES.items()}
    runs["lit-retrieval --help"] = [sys.executable, "-m", "lit_retrieval", "--help"]
    for name in [trainer[0], *others]:
        runs[f"lit-retrieval {name} --help"] = [sys.executable, "-m", "lit_retrieval", name, "--help"]
    seconds = {name: timed(argv, args.repeats) for name, argv in runs.items()}
    wall_limit = seconds["import torch"][0] + TARGET_S
    cpu_limit = seconds["import torch"][1] + TARGET_S
    measured = {name: times for name, times in seconds.items() if name.startswith("lit-retrieval ")}
    outside = {name: times for name, times in measured.items() if name.split()[1] not in trainer}
    over = [name for name, (wall, cpu) in outside.items() if wall > wall_limit or cpu > cpu_limit]
    print(
        json.dumps(
            {
                "wall_s": {name: wall for name, (wall, _) in seconds.items()},
                "cpu_s": {name: cpu for name, (_, cpu) in seconds.items()},
                "wall_limit_s": round(wall_limit, 3),
                "cpu_limit_s": round(cpu_limit, 3),
                "commands": len(others),
                "over_limit": over,
            }
        )
    )


if __name__ == "__main__":
    main()
