"""`lit-retrieval configs`: list the configs the package ships, or copy them into a project folder.

    lit-retrieval configs list
    lit-retrieval configs copy                      # every config into ./configs/
    lit-retrieval configs copy quickstart.yaml plans/melon_tab2.yaml melon --to my_project

A copied config keeps its name under `configs/` (the paths the plans, the docs and the other configs use),
so the documented commands (`lit-retrieval fit --config configs/quickstart.yaml`) run from that folder.
The Slurm templates need no copy: `lit-retrieval slurm fit.sbatch` reads the shipped one when no such
file exists.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lit_retrieval.shipped import copy_configs, shipped_configs


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval configs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="print every shipped config's name under configs/")
    copy = actions.add_parser("copy", help="copy shipped configs to DIR/configs/NAME")
    copy.add_argument("names", nargs="*", help="config files or folders under configs/ (default: all)")
    copy.add_argument("--to", type=Path, default=Path("."), help="the project folder (default: here)")
    copy.add_argument("--force", action="store_true", help="overwrite files that exist")
    args = parser.parse_args(argv)
    if args.action == "list":
        print("\n".join(shipped_configs()))
        return 0
    written = copy_configs(args.names, args.to, overwrite=args.force)
    print(f"copied {len(written)} config(s) to {args.to / 'configs'}")
    return 0
