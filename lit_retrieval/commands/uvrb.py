"""`lit-retrieval uvrb`: evaluate a model on UVRB (or any retrieval tasks), or report abilities.

    lit-retrieval uvrb --model /models/GVE-3B --root /data/uvrb --out runs/uvrb/gve3b
    lit-retrieval uvrb --config configs/gve/tiny_cpu.yaml --ckpt last.ckpt --tasks my_tasks.yaml --out runs/uvrb/tiny
    lit-retrieval uvrb --config configs/gve/train.yaml --config configs/gve/model_3b.yaml \
        --config configs/gve/data_3b.yaml --ckpt runs/gve/checkpoints/last.ckpt --out runs/uvrb/gve3b_lora
    lit-retrieval uvrb report runs/uvrb/gve3b/results.json
    lit-retrieval uvrb convert msrvtt_pairs.jsonl --out data/uvrb/MSRVTT --field text=caption target=video_path
    lit-retrieval uvrb --model /models/GVE-3B --frames 16 --max-frame-tokens 400 --out runs/uvrb/gve3b_f16_t400

`--frames` and `--max-frame-tokens` are GVE's test-time scaling settings (GVE A.12 "Experiments of
Test-time Scaling": frames 8 -> 48 at 200 tokens, tokens per frame 200 -> 800 at 8 frames); the
embedding cache keys include them, so each setting is embedded once.

One run writes OUT and its embedding cache at a time (`locking.OutputLock`): a second is refused
with the holder's host, pid, command and start time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml
from rich.console import Console

from lit_retrieval.commands.arguments import add_model_arguments
from lit_retrieval.errors import UsageError
from lit_retrieval.locking import OutputLock
from lit_retrieval.progress import add_progress_arguments, configure_from
from lit_retrieval.uvrb.convert import convert_pairs
from lit_retrieval.uvrb.abilities import ability_scores, ability_table, read_scores
from lit_retrieval.uvrb.tasks import read_task_list


def run_report(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval uvrb report", description="UVRB ability table from per-dataset scores."
    )
    parser.add_argument("results", help="results.json of `lit-retrieval uvrb`, or a JSON object {dataset: score}")
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    args = parser.parse_args(argv)
    scores = read_scores(args.results)
    try:
        abilities = ability_scores(scores)
    except ValueError as err:
        raise UsageError(args.results, str(err)) from None
    if not args.json:
        Console().print(ability_table(abilities, f"UVRB abilities ({args.results})"))
    print(json.dumps(abilities))
    return 0


def composed_config(configs: list[str], out: Path) -> str:
    """The one training config file `configs` make: the file itself when there is one, else their composition
    as `lit-retrieval fit --config C1 --config C2 ...` resolves it (`resolved_training_config`), written to
    OUT/config.yaml so the run keeps what it evaluated."""
    if len(configs) == 1:
        return configs[0]
    from lit_retrieval.retrieval_cli import resolved_training_config  # Lightning: only where a config is read

    resolved = resolved_training_config(configs, [], "--config")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump(resolved, sort_keys=False))
    print(f"--config: {' + '.join(configs)} composed into {path}", file=sys.stderr)
    return str(path)


def run_convert(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval uvrb convert",
        description="A retrieval task (corpus.jsonl, queries.jsonl, qrels.jsonl) from one file of query -> video "
        "pairs (JSONL, JSON list or CSV); the row format is in lit_retrieval/uvrb/convert.py.",
    )
    parser.add_argument("pairs", help="the pairs file: one row per relevant (query, video) pair")
    parser.add_argument("--out", required=True, help="the task folder (a `dir` of the task list)")
    parser.add_argument(
        "--field", nargs="*", default=[], metavar="NAME=COLUMN", help="rename a field, e.g. text=caption target=path"
    )
    args = parser.parse_args(argv)
    fields = {}
    for item in args.field:
        name, sep, column = item.partition("=")
        if not sep or not name or not column:
            raise UsageError("--field", f"expected NAME=COLUMN, got {item!r}")
        fields[name] = column
    counts = convert_pairs(args.pairs, args.out, fields)
    print(f"{args.out}: {counts['queries']} queries, {counts['videos']} videos, {counts['pairs']} relevant pairs")
    return 0


def run(argv: list[str]) -> int:
    if argv and argv[0] == "report":
        return run_report(argv[1:])
    if argv and argv[0] == "convert":
        return run_convert(argv[1:])
    parser = argparse.ArgumentParser(
        prog="lit-retrieval uvrb", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_arguments(parser, required=True, composed=True)
    parser.add_argument(
        "--tasks", default="configs/uvrb/uvrb.yaml", help="task list YAML (default: the 16 UVRB datasets)"
    )
    parser.add_argument("--root", help="folder the task dirs are relative to (overrides the YAML's root)")
    parser.add_argument("--only", nargs="*", help="evaluate only these tasks")
    parser.add_argument("--out", required=True, help="output folder: results.json, results.md, results.png")
    parser.add_argument("--cache", help="embedding cache folder (default: OUT/cache)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--memory-mb", type=float, default=256, help="score-matrix budget per block")
    parser.add_argument(
        "--frames", type=int, help="test-time frames per video (GVE A.12 scales 8 to 48; default: the model's, 8)"
    )
    parser.add_argument(
        "--max-frame-tokens",
        type=int,
        help="test-time max visual tokens per frame, GVE models (GVE A.12 scales 200 to 800; default 200)",
    )
    add_progress_arguments(parser)
    args = parser.parse_args(argv)
    # imported here, not at the top: --help stays light
    from lit_retrieval.search.loading import ModelSpec, load_item_embedder
    from lit_retrieval.uvrb.runner import markdown_table, run_benchmark

    configure_from(args)
    if args.frames is not None and args.frames < 1:
        parser.error("--frames must be >= 1")
    if args.max_frame_tokens is not None and args.max_frame_tokens < 4:
        parser.error("--max-frame-tokens must be >= 4")
    specs = read_task_list(args.tasks, args.root, args.only)
    cache = Path(args.cache) if args.cache else Path(args.out) / "cache"
    with (
        OutputLock(args.out, name="uvrb"),
        OutputLock(cache, name="uvrb-cache"),
    ):  # one writer of results and of the cache
        config = composed_config(args.config, Path(args.out)) if args.config else None
        model = ModelSpec(
            args.model, config, args.ckpt, args.device, frames=args.frames, frame_tokens=args.max_frame_tokens
        )
        embedder = load_item_embedder(model, pairwise=True)  # any head: pairwise ones score with the head
        results = run_benchmark(embedder, specs, args.out, cache, args.batch_size, args.memory_mb)
    sys.stdout.write(markdown_table(results))
    return 0
