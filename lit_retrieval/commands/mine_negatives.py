"""`lit-retrieval mine-negatives`: top-K hard negatives per query with a prober model, mined once.

This is what `data.negative_mining: offline` trains with: negatives mined once, before training, with a
prober of your choice, and read from the task files at every epoch. GVE itself mines them again at every
epoch with that epoch's prober (Sec. 3.3: "hard negatives mined from a large external corpus using the
same prober Psi_t"), which `data.negative_mining: prober` does during training (`HardNegativeMining`).

Embeds a task's queries and a corpus of candidate targets (the task's own distinct positives, plus
the items of `--corpus` files), searches the K + 1 nearest candidates of every query with an exact
faiss inner-product index, drops the query's positive (and any candidate with the same content),
and writes the task file again with `negatives` filled.

    lit-retrieval mine-negatives --model /models/gme-7b --task t2v.jsonl --format T->V --out t2v_neg.jsonl --k 3
    lit-retrieval mine-negatives --config RUN_DIR/config.yaml --ckpt last.ckpt --task ... --out ...
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lit_retrieval.commands.arguments import add_model_arguments
from lit_retrieval.data.items import parse_format
from lit_retrieval.data.gve.negatives import candidate_targets, hardest_negatives, read_corpus
from lit_retrieval.data.items import item_to_json
from lit_retrieval.data.gve.tasks import TaskSpec, read_task, write_task
from lit_retrieval.progress import add_progress_arguments, configure_from


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval mine-negatives", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_arguments(parser, required=True)
    parser.add_argument("--task", required=True, help="task JSONL file")
    parser.add_argument("--format", required=True, help="the task's format, e.g. T->V")
    parser.add_argument("--out", required=True, help="output JSONL with negatives")
    parser.add_argument(
        "--corpus", nargs="*", default=[], help="extra JSONL files of candidate targets (one item per line)"
    )
    parser.add_argument("--k", type=int, default=3, help="negatives per query")
    parser.add_argument("--instruction", help="query instruction")
    parser.add_argument("--target-instruction", help="target instruction")
    parser.add_argument("--batch-size", type=int, default=8)
    add_progress_arguments(parser)
    args = parser.parse_args(argv)
    # imported here, not at the top: --help stays light
    from lit_retrieval.search.embedders import embed_tracked
    from lit_retrieval.search.loading import ModelSpec, load_item_embedder

    configure_from(args)
    if args.k < 1:
        parser.error("--k must be at least 1")
    _, target_format = parse_format(args.format)
    records = read_task(TaskSpec("mine", args.task, args.format))
    items, positions = candidate_targets([r.positive for r in records], read_corpus(args.corpus, target_format))
    embedder = load_item_embedder(ModelSpec(args.model, args.config, args.ckpt, args.device))
    queries = embed_tracked(embedder, [r.query for r in records], args.instruction, args.batch_size, "queries").numpy()
    candidates = embed_tracked(embedder, items, args.target_instruction, args.batch_size, "candidates").numpy()
    found = hardest_negatives(queries, candidates, [{p} for p in positions], args.k)
    base = Path(args.out).resolve().parent
    rows = []
    for record, negatives in zip(records, found):
        rows.append(
            {
                "id": record.record_id,
                "query": item_to_json(record.query, base),
                "positive": item_to_json(record.positive, base),
                "negatives": [item_to_json(items[j], base) for j in negatives],
            }
        )
    short = sum(len(n) < args.k for n in found)
    write_task(args.out, rows)
    print(
        f"wrote {len(rows)} pairs with up to {args.k} negatives each to {args.out}"
        + (f" ({short} have fewer: small corpus)" if short else "")
    )
    return 0
