"""`lit-retrieval serve`: search an index from a browser or over HTTP, with the model loaded once.

    lit-retrieval serve runs/index/my_videos                 # http://127.0.0.1:8000/
    lit-retrieval serve runs/index/my_videos --port 9000 --workers 4 --cache-dir /scratch/serve-cache

Binds to 127.0.0.1 unless --host says otherwise (the API has no authentication: expose it only
behind something that has). Thumbnails and moment embeddings go to --cache-dir (default the
per-user cache, ~/.cache/lit-retrieval/serve); the index folder is only read. Each of --workers
processes loads its own copy of the model and index.
"""

from __future__ import annotations

import argparse
import os
import sys

from lit_retrieval.serve.app import Limits


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("index", help="index folder written by `lit-retrieval index`")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1, help="server processes, each with its own model and index")
    parser.add_argument("--cache-dir", help="thumbnails and moment embeddings (default ~/.cache/lit-retrieval/serve)")
    parser.add_argument("--device", default="cpu", help="device of the query model")
    parser.add_argument("--gpu", action="store_true", help="search the index with faiss-gpu")
    parser.add_argument(
        "--moment-segments",
        type=int,
        default=4,
        help="windows per found video scored for the best-matching moment (0: off)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads per worker for the query model and faiss (0: torch's default). One query is "
        "small: one thread avoids thread contention; add --workers for throughput",
    )
    parser.add_argument("--max-k", type=int, default=Limits.max_k, help="largest k a request may ask for")
    parser.add_argument(
        "--max-upload-mb", type=float, default=Limits.max_upload_bytes / 2**20, help="largest query image/video upload"
    )
    args = parser.parse_args(argv)
    if args.workers < 1 or args.moment_segments < 0 or args.max_k < 1 or args.threads < 0:
        parser.error("--workers and --max-k must be at least 1, --moment-segments and --threads at least 0")
    import uvicorn

    from lit_retrieval.serve.loading import CONFIG_ENV, is_loopback, settings_json

    if not is_loopback(args.host):
        print(
            f"lit-retrieval serve: listening on {args.host}, reachable from other machines; "
            "the API has no authentication",
            file=sys.stderr,
        )
    limits = Limits(max_upload_bytes=int(args.max_upload_mb * 2**20), max_k=args.max_k)
    os.environ[CONFIG_ENV] = settings_json(
        index=args.index,
        cache_dir=args.cache_dir,
        device=args.device,
        gpu=args.gpu,
        moment_segments=args.moment_segments,
        limits=limits,
        threads=args.threads or None,
    )
    if args.workers == 1:  # load here, so a bad index or model fails before the server starts
        from lit_retrieval.serve.loading import app_from_environment

        uvicorn.run(app_from_environment(), host=args.host, port=args.port, log_level="warning")
    else:
        from lit_retrieval.search.index import VideoIndex

        VideoIndex.load(args.index)  # a bad index folder: one line here, not an error in every worker
        uvicorn.run(
            "lit_retrieval.serve.loading:app_from_environment",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level="warning",
        )
    return 0
