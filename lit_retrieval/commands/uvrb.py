"""`lit-retrieval uvrb`: evaluate a model on UVRB (or any retrieval tasks), or report abilities.

    lit-retrieval uvrb --model /models/GVE-3B --root /data/uvrb --out runs/uvrb/gve3b
    lit-retrieval uvrb --config configs/gve/tiny_cpu.yaml --ckpt last.ckpt --tasks my_tasks.yaml --out runs/uvrb/tiny
    lit-retrieval uvrb report runs/uvrb/gve3b/results.json
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
import math
import sys
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from lit_retrieval.data.reading import parse_json, read_text
from lit_retrieval.errors import ConfigError, UsageError
from lit_retrieval.locking import OutputLock
from lit_retrieval.progress import add_progress_arguments, configure_from
from lit_retrieval.search.loading import ModelSpec, load_item_embedder
from lit_retrieval.uvrb.abilities import ABILITIES, ability_scores
from lit_retrieval.uvrb.runner import markdown_table, run_benchmark
from lit_retrieval.uvrb.tasks import FieldMap, RetrievalTaskSpec


def read_task_list(path: str, root: str | None, only: list[str] | None) -> list[RetrievalTaskSpec]:
    """The tasks of a task-list YAML; a file that is not such a list is a `ConfigError` naming it."""
    try:
        raw = yaml.safe_load(read_text(path)) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({' '.join(str(err).split())})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("tasks", []), list):
        raise ConfigError(f"{path}: expected a mapping with a 'tasks' list")
    base = Path(root or raw.get("root", "."))
    specs = []
    for k, entry in enumerate(raw.get("tasks", [])):
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("name"), str)
            or not isinstance(entry.get("fields", {}), dict)
        ):
            raise ConfigError(f"{path}: task {k}: expected a mapping with a 'name' (and optional 'fields' mapping)")
        entry = dict(entry)
        entry["dir"] = str(base / entry.get("dir", entry["name"]))
        try:
            entry["fields"] = FieldMap(**entry.get("fields", {}))
            specs.append(RetrievalTaskSpec(**entry))
        except (TypeError, ValueError) as err:
            raise ConfigError(f"{path}: task {entry['name']!r}: {err}") from None
    if only:
        unknown = set(only) - {s.name for s in specs}
        if unknown:
            raise ConfigError(f"{path}: unknown task(s) {sorted(unknown)} given to --only")
        specs = [s for s in specs if s.name in only]
    return specs


def read_scores(path: str) -> dict[str, float]:
    """Per-dataset scores of a `results.json` (`{"datasets": {name: {"score": ...}}}`) or of a plain
    `{name: score}` object; any other shape, or a score that is not a finite number, is a
    `UsageError` naming the file and the dataset."""
    raw = parse_json(read_text(path), path, constants=True)  # NaN is reported with its dataset below
    if not isinstance(raw, dict):
        raise UsageError(path, f"expected a JSON object (results.json or {{dataset: score}}), got {type(raw).__name__}")
    if "datasets" in raw:
        if not isinstance(raw["datasets"], dict):
            raise UsageError(path, "'datasets' must be an object {dataset: {\"score\": ...}}")
        entries = raw["datasets"]
        bad = next((name for name, entry in entries.items() if not isinstance(entry, dict)), None)
        if bad is not None:
            raise UsageError(path, f"dataset {bad!r}: expected an object with a 'score', got {entries[bad]!r}")
        raw = {name: entry["score"] for name, entry in entries.items() if "score" in entry}
    for name, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise UsageError(path, f"dataset {name!r}: the score must be a finite number, got {value!r}")
    return {name: float(value) for name, value in raw.items()}


def report(argv: list[str]) -> int:
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
        table = Table(title=f"UVRB abilities ({args.results})")
        for key in ("AVG_datasets", "AVG_abilities", *ABILITIES):
            table.add_column(key, justify="right")
        table.add_row(*(f"{abilities[k]:.3f}" for k in ("AVG_datasets", "AVG_abilities", *ABILITIES)))
        Console().print(table)
    print(json.dumps(abilities))
    return 0


def run(argv: list[str]) -> int:
    if argv and argv[0] == "report":
        return report(argv[1:])
    parser = argparse.ArgumentParser(
        prog="lit-retrieval uvrb", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="model directory (GVE / Qwen2.5-VL), embedded as is")
    source.add_argument("--config", help="training config of a GVE or dual-encoder model")
    parser.add_argument("--ckpt", help="checkpoint to load with --config")
    parser.add_argument(
        "--tasks", default="configs/uvrb/uvrb.yaml", help="task list YAML (default: the 16 UVRB datasets)"
    )
    parser.add_argument("--root", help="folder the task dirs are relative to (overrides the YAML's root)")
    parser.add_argument("--only", nargs="*", help="evaluate only these tasks")
    parser.add_argument("--out", required=True, help="output folder: results.json, results.md, results.png")
    parser.add_argument("--cache", help="embedding cache folder (default: OUT/cache)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--memory-mb", type=float, default=256, help="score-matrix budget per block")
    parser.add_argument("--device", default="cpu")
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
        model = ModelSpec(
            args.model, args.config, args.ckpt, args.device, frames=args.frames, frame_tokens=args.max_frame_tokens
        )
        embedder = load_item_embedder(model, pairwise=True)  # any head: pairwise ones score with the head
        results = run_benchmark(embedder, specs, args.out, cache, args.batch_size, args.memory_mb)
    sys.stdout.write(markdown_table(results))
    return 0
