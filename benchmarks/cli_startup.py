"""Start-up time of the commands that do not train (issue 40): the wall time of each one's `--help` in a fresh
interpreter, beside `python -c pass`, `python -c "import torch"` and `python -c "import lightning.pytorch"`.
The target (README): every such command within 1.5 s of `import torch`. Best of `--repeats` runs each;
prints one JSON line.

    python benchmarks/cli_startup.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

BASELINES = {"pass": "pass", "import torch": "import torch", "import lightning.pytorch": "import lightning.pytorch"}
COMMANDS = ["", "metrics", "report", "slurm", "grid", "configs", "validate-melon", "sali-stats", "build-melon", "fit"]
TARGET_S = 1.5  # over `import torch`


def wall(argv: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return round(min(times), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    baselines = {name: wall([sys.executable, "-c", code], args.repeats) for name, code in BASELINES.items()}
    commands = {
        f"lit-retrieval {name} --help".replace("  ", " "): wall(
            [sys.executable, "-m", "lit_retrieval", *([name] if name else []), "--help"], args.repeats
        )
        for name in COMMANDS
    }
    limit = baselines["import torch"] + TARGET_S
    over = [name for name, seconds in commands.items() if seconds > limit and " fit " not in name]
    print(json.dumps({"seconds": {**baselines, **commands}, "limit_s": round(limit, 3), "over_limit": over}))


if __name__ == "__main__":
    main()
