"""`lit-retrieval search`: the top-k videos of an index for text, multi-event, image or video queries.

    lit-retrieval search runs/index/my_videos "a dog catches a frisbee"
    lit-retrieval search runs/index/my_videos --event "a man opens a door" --event "he sits down" -k 5 --json
    lit-retrieval search runs/index/my_videos --image query.jpg --instruction "Find the video according to the image."

The index remembers its model; `--model`/`--config` may be given only to confirm it (a different
model or settings is refused). The arguments are checked before anything loads: `-k` at least 1,
no empty or blank query text or event; the index folder is checked whole (`VideoIndex.load`); a
query the model cannot embed (`--text` with `--video` on a dual encoder) is refused once it loads.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from rich.console import Console
from rich.table import Table

from lit_retrieval.commands.arguments import add_model_arguments
from lit_retrieval.data.items import MediaItem
from lit_retrieval.data.text.queries import concat_query
from lit_retrieval.errors import UsageError


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse what would rank videos for nothing: `-k` below 1, an empty or blank query or event."""
    if args.k < 1:
        raise UsageError("-k", f"must be at least 1, got {args.k}")
    for flag, texts in (("query", args.queries), ("--event", args.event or [])):
        for number, text in enumerate(texts, start=1):
            if not text.strip():
                raise UsageError(f"{flag} {number}", f"empty or blank text ({text!r}); give words to search for")


QUERY_KINDS = {"T": ("--text", "text"), "I": ("--image", "image"), "V": ("--video", "video")}


def _kind(modality: str) -> str:
    return "+".join(QUERY_KINDS[letter][1] for letter in modality)


def check_query_kinds(queries: list[MediaItem], modalities: set[str]) -> None:
    """Refuse a composed or image query the index's model cannot embed (a dual encoder embeds text
    and video items only), naming the options that make it, before any query is embedded."""
    for query in queries:
        if query.modality not in modalities:
            raise UsageError(
                " with ".join(QUERY_KINDS[letter][0] for letter in query.modality),
                f"the query is {_kind(query.modality)}, but the index's model embeds "
                f"{' or '.join(map(_kind, sorted(modalities)))} items only: search with text or --video alone, "
                "or index with a GVE model for composed and image queries",
            )


def queries_from(args: argparse.Namespace) -> list[MediaItem]:
    queries = [MediaItem(text=q) for q in args.queries]
    if args.event:  # a multi-event query: its events in order, concatenated (MELON Sec. 4.2)
        queries.append(MediaItem(text=concat_query(args.event)))
    if args.image or args.video:
        queries.append(MediaItem(text=args.text, image=args.image, video=args.video))
    return queries


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval search", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("index", help="index folder written by `lit-retrieval index`")
    parser.add_argument("queries", nargs="*", help="text queries")
    parser.add_argument("--event", action="append", help="one event of a multi-event query (repeat, in order)")
    parser.add_argument("--image", help="image query (GVE)")
    parser.add_argument("--video", help="video query (GVE)")
    parser.add_argument("--text", help="text to compose with --image/--video")
    parser.add_argument("--instruction", help="query instruction (GVE)")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--json", action="store_true", help="one JSON object per query")
    add_model_arguments(parser)
    parser.add_argument("--gpu", action="store_true")
    args = parser.parse_args(argv)
    # imported here, not at the top: --help stays light
    from lit_retrieval.search.index import VideoIndex, check_k
    from lit_retrieval.search.loading import ModelSpec, load_item_embedder

    check_arguments(args)
    queries = queries_from(args)
    if not queries:
        parser.error("give a query: text, --event ..., --image or --video")
    index = VideoIndex.load(args.index, gpu=args.gpu)
    check_k(args.k, index.on_gpu, len(index.videos))
    spec = ModelSpec(**index.meta["model"])
    if args.model or args.config:
        given = ModelSpec(args.model, args.config, args.ckpt, args.device).resolved()
        if (given.model, given.config, given.ckpt) != (spec.model, spec.config, spec.ckpt):
            raise UsageError(args.index, f"built with {index.meta['model']}, not {given}")
    spec = replace(spec, device=args.device)  # the rest (frame sampling too) as the index was built
    embedder = load_item_embedder(spec)
    index.check(embedder)
    check_query_kinds(queries, embedder.modalities)
    results = index.search(embedder.embed(queries, args.instruction).numpy(), args.k)
    for query, hits in zip(queries, results):
        label = query.text or query.image or query.video
        if args.json:
            print(json.dumps({"query": label, "results": [{"video": v, "score": s} for v, s in hits]}))
        else:
            table = Table(title=f"{label}")
            for column in ("rank", "score", "video"):
                table.add_column(column)
            for rank, (video, score) in enumerate(hits, 1):
                table.add_row(str(rank), f"{score:.4f}", video)
            Console().print(table)
    return 0
