"""Counts what a plan row's test split holds before any training: the queries over N text tokens of the
row's model (E1b) or the relational and Rel-Multi queries by the row's relational rule (E3b), generating the
row's synthetic corpus on first use. docs/experiments.md (E1b, E3b) fixes the counts each design needs.

    python sweeps/corpus_counts.py configs/plans/melon_long_queries.yaml --row meanp_248 --tokens-over 77
    python sweeps/corpus_counts.py configs/plans/sali_control_b.yaml --row clip4clip --rel-multi

`--grow-by N --until-rel-multi M` applies E3b's growth rule: while fewer than M Rel-Multi test queries,
delete the generated corpus and write it again with N more videos (same seed), counting each size.

Prints one JSON line per counted corpus.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import tempfile
from pathlib import Path

import yaml

from lit_retrieval.commands.sali_stats import config_statistics
from lit_retrieval.data.datasets.synthetic import SETTINGS_FILE
from lit_retrieval.grid.plan import load_plan
from lit_retrieval.grid.runs import override_args
from lit_retrieval.retrieval_cli import build_datamodule, build_module, resolved_training_config, training_config


def count(config: dict, args: argparse.Namespace) -> dict:
    """The counts of one resolved row config, generating its synthetic corpus on first use."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        out: dict = {"plan": args.plan, "row": args.row, "synthetic": config["data"]["init_args"].get("synthetic")}
        data = build_datamodule(training_config([str(path)]))
        data.prepare_data()  # a synthetic corpus is generated on first use, as `fit` does
        if args.tokens_over is not None:
            data.setup("test")
            events = [list(record.descriptions) for record in data.datasets["test"].records]
            module, _ = build_module(str(path))
            counts = module.query_token_counts(events)
            out.update(
                test_queries=len(counts), over=sum(c > args.tokens_over for c in counts), tokens=args.tokens_over
            )
        if args.rel_multi:
            out["test"] = config_statistics(str(path), ["test"])
    return out


def grown(config: dict, videos: int) -> dict:
    """`config` with `videos` synthetic videos, its generated corpus folder deleted so it is written anew."""
    folder = Path(config["data"]["init_args"]["annotation"]).parent
    if folder.exists():
        if not (folder / SETTINGS_FILE).is_file():
            raise SystemExit(f"{folder} holds no {SETTINGS_FILE}: not a generated corpus, not deleting it")
        shutil.rmtree(folder)
    config = copy.deepcopy(config)
    config["data"]["init_args"]["synthetic"]["num_videos"] = videos
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan")
    parser.add_argument("--row", required=True)
    parser.add_argument("--tokens-over", type=int, help="count the test queries longer than this many tokens")
    parser.add_argument("--rel-multi", action="store_true", help="count relational and Rel-Multi test queries")
    parser.add_argument("--grow-by", type=int, help="videos added per step of the growth rule (with --until-rel-multi)")
    parser.add_argument("--until-rel-multi", type=int, help="grow the corpus until this many Rel-Multi test queries")
    args = parser.parse_args()
    if (args.grow_by is None) != (args.until_rel_multi is None) or (args.grow_by and not args.rel_multi):
        parser.error("--grow-by and --until-rel-multi go together, with --rel-multi")
    plan = load_plan(args.plan)
    row = plan.row(args.row)
    if row is None:
        parser.error(f"{args.plan} has no row {args.row!r}")
    config = resolved_training_config(row.configs, override_args(row.overrides), row.name)
    out = count(config, args)
    print(json.dumps(out), flush=True)
    while args.grow_by and out["test"]["test"]["rel_multi"] < args.until_rel_multi:
        config = grown(config, config["data"]["init_args"]["synthetic"]["num_videos"] + args.grow_by)
        out = count(config, args)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
