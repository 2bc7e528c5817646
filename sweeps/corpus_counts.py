"""Counts what a plan row's test split holds before any training: the queries over N text tokens of the
row's model (E1b) or the relational and Rel-Multi queries by the row's relational rule (E3b), generating the
row's synthetic corpus on first use. docs/experiments.md (E1b, E3b) fixes the counts each design needs.

    python sweeps/corpus_counts.py configs/plans/melon_long_queries.yaml --row meanp_248 --tokens-over 77
    python sweeps/corpus_counts.py configs/plans/sali_control_b.yaml --row clip4clip --rel-multi

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import yaml

from lit_retrieval.commands.sali_stats import config_statistics
from lit_retrieval.grid.plan import load_plan
from lit_retrieval.grid.runs import override_args
from lit_retrieval.retrieval_cli import build_datamodule, build_module, resolved_training_config, training_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan")
    parser.add_argument("--row", required=True)
    parser.add_argument("--tokens-over", type=int, help="count the test queries longer than this many tokens")
    parser.add_argument("--rel-multi", action="store_true", help="count relational and Rel-Multi test queries")
    args = parser.parse_args()
    plan = load_plan(args.plan)
    row = plan.row(args.row)
    if row is None:
        parser.error(f"{args.plan} has no row {args.row!r}")
    config = resolved_training_config(row.configs, override_args(row.overrides), row.name)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        out: dict = {"plan": args.plan, "row": args.row}
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
    print(json.dumps(out))


if __name__ == "__main__":
    main()
