"""`lit-retrieval index`: embed a folder (or list) of videos and build a faiss index.

    lit-retrieval index --model /models/GVE-3B --videos /data/my_videos --out runs/index/my_videos
    lit-retrieval index --config configs/quickstart.yaml --ckpt runs/quickstart/checkpoints/last.ckpt \
        --videos list.txt --out idx --kind hnsw

Interrupted runs resume: finished chunks are kept and their videos skipped. Videos that fail to
decode are listed in OUT/failed.json with their size and modification time; a rerun retries those
that changed since (a repaired file), `--retry-failed` retries all. One run writes an output folder
at a time (`locking.OutputLock`; each shard of an array job takes its own lock): a second is refused
with the holder's host, pid, command and start time.
"""

from __future__ import annotations

import argparse

from lit_retrieval.commands.arguments import add_model_arguments, add_shard_arguments, check_shard, positive_int
from lit_retrieval.errors import UsageError
from lit_retrieval.locking import OutputLock
from lit_retrieval.progress import add_progress_arguments, configure_from


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval index", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_arguments(parser)
    parser.add_argument("--videos", required=True, help="folder of videos, or a text file with one path per line")
    parser.add_argument("--out", required=True, help="index folder")
    parser.add_argument(
        "--kind", choices=["flat", "ivf", "hnsw"], default="flat", help="exact inner product, IVF-Flat or HNSW"
    )
    parser.add_argument(
        "--nlist", type=positive_int, help="IVF lists (default min(N/39, 4 sqrt(N))); needs at least as many videos"
    )
    parser.add_argument("--nprobe", type=positive_int, default=32, help="IVF lists searched per query")
    parser.add_argument("--chunk", type=positive_int, default=16, help="videos per saved chunk")
    parser.add_argument(
        "--sampling",
        choices=["exact", "keyframe"],
        default="exact",
        help="video frames: exact, or the key frame at or before each (faster, approximate); search uses the index's",
    )
    parser.add_argument("--gpu", action="store_true", help="build/search with faiss-gpu")
    add_shard_arguments(parser)
    parser.add_argument(
        "--embed-only", action="store_true", help="embed this shard's videos, do not build the index (array jobs)"
    )
    parser.add_argument(
        "--retry-failed",
        action="store_true",
        help="retry every video listed in OUT/failed*.json (changed files are retried anyway)",
    )
    add_progress_arguments(parser)
    args = parser.parse_args(argv)
    # imported here, not at the top: --help stays light
    from lit_retrieval.search.index import IndexConfig, build_video_index, check_ivf_lists, list_videos
    from lit_retrieval.search.loading import ModelSpec, load_item_embedder

    if args.model is None and args.config is None:
        parser.error("one of --model or --config is required")
    check_shard(parser, args)
    configure_from(args)
    spec = ModelSpec(args.model, args.config, args.ckpt, args.device, args.sampling)
    videos = list_videos(args.videos)
    if not videos:
        raise UsageError(args.videos, "no videos found (a folder without video files, or an empty list file)")
    settings = IndexConfig(kind=args.kind, nlist=args.nlist, nprobe=args.nprobe, gpu=args.gpu)
    check_ivf_lists(settings, len(videos))  # before the embedding, which would then be wasted
    shard = (args.shard, args.num_shards) if args.num_shards > 1 else None
    with OutputLock(args.out, name=f"index-s{args.shard}" if shard else "index"):  # before the (slow) model load
        meta = build_video_index(
            load_item_embedder(spec),
            spec,
            videos,
            args.out,
            settings,
            chunk=args.chunk,
            shard=shard,
            embed_only=args.embed_only,
            retry_failed=args.retry_failed,
        )
    if meta is None:
        print(f"embedded shard {args.shard} of {args.num_shards} into {args.out}/parts")
    else:
        print(
            f"indexed {meta['count']} videos ({meta['failed']} failed, listed in {args.out}/failed*.json) -> {args.out}"
        )
    return 0
