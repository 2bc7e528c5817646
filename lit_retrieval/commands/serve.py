"""`lit-retrieval serve`: search an index from a browser or over HTTP, with the model loaded once.

    lit-retrieval serve runs/index/my_videos                 # http://127.0.0.1:8000/
    lit-retrieval serve runs/index/my_videos --port 9000 --workers 4 --cache-dir /scratch/serve-cache

Binds to 127.0.0.1 unless --host says otherwise (the API has no authentication: expose it only
behind something that has) and answers only requests whose Host header names the bound address,
localhost or an --allowed-host. Thumbnails and moment embeddings go to --cache-dir (default the
per-user cache, ~/.cache/lit-retrieval/serve); the index folder is only read. Each of --workers
processes loads its own copy of the model and index. The port is taken before the model loads.
"""

from __future__ import annotations

import argparse
import os
import sys

from lit_retrieval.serve.limits import Limits
from lit_retrieval.serve.server import listening_socket, serve_forever

MB = 2**20


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("index", help="index folder written by `lit-retrieval index`")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="another name clients may reach the server by (Host header; the bound address and localhost always; "
        "'*': any, which lets web pages reach it through DNS rebinding)",
    )
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
    defaults = Limits()
    parser.add_argument("--max-k", type=int, default=defaults.max_k, help="largest k a request may ask for")
    parser.add_argument(
        "--max-upload-mb", type=float, default=defaults.max_upload_bytes / MB, help="largest query image/video upload"
    )
    parser.add_argument(
        "--max-upload-pixels", type=int, default=defaults.max_upload_pixels, help="pixels per frame of an upload"
    )
    parser.add_argument(
        "--max-upload-frames", type=int, default=defaults.max_upload_frames, help="frames of an uploaded video"
    )
    parser.add_argument(
        "--decode-timeout", type=float, default=defaults.decode_timeout_s, help="seconds to decode one upload"
    )
    parser.add_argument(
        "--text-cache-mb", type=float, default=defaults.text_cache_bytes / MB, help="query vectors kept in memory"
    )
    parser.add_argument(
        "--thumbnail-cache-mb",
        type=float,
        default=defaults.thumbnail_cache_bytes / MB,
        help="thumbnails kept in the cache folder",
    )
    parser.add_argument(
        "--header-timeout", type=float, default=defaults.header_timeout_s, help="seconds for a request's headers"
    )
    parser.add_argument(
        "--body-timeout", type=float, default=defaults.body_timeout_s, help="seconds for a request's whole body"
    )
    parser.add_argument(
        "--shutdown-timeout",
        type=float,
        default=5.0,
        help="seconds open requests get to finish after SIGTERM/Ctrl-C before they are cut",
    )
    parser.add_argument(
        "--batch-window-ms",
        type=float,
        default=defaults.batch_window_ms,
        help="how long concurrent text queries are gathered into one forward pass",
    )
    args = parser.parse_args(argv)
    if args.workers < 1 or args.moment_segments < 0 or args.max_k < 1 or args.threads < 0:
        parser.error("--workers and --max-k must be at least 1, --moment-segments and --threads at least 0")
    timings = (args.decode_timeout, args.header_timeout, args.body_timeout, args.shutdown_timeout)
    if min(timings) <= 0 or args.batch_window_ms < 0 or args.max_upload_pixels < 1 or args.max_upload_frames < 1:
        parser.error("timeouts, --max-upload-pixels and --max-upload-frames must be positive")
    return args


def run(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        sock = listening_socket(args.host, args.port)
    except OSError as err:
        print(f"lit-retrieval serve: cannot listen on {args.host}:{args.port}: {err.strerror}", file=sys.stderr)
        return 2
    import uvicorn

    from lit_retrieval.serve.guards import GuardedH11Protocol, default_allowed_hosts
    from lit_retrieval.serve.loading import (
        CONFIG_ENV,
        app_from_environment,
        configure_logging,
        is_loopback,
        settings_json,
    )

    if not is_loopback(args.host):
        print(
            f"lit-retrieval serve: listening on {args.host}, reachable from other machines; "
            "the API has no authentication (clients must name it by an --allowed-host)",
            file=sys.stderr,
        )
    limits = Limits(
        max_upload_bytes=int(args.max_upload_mb * MB),
        max_k=args.max_k,
        max_upload_pixels=args.max_upload_pixels,
        max_upload_frames=args.max_upload_frames,
        decode_timeout_s=args.decode_timeout,
        header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout,
        text_cache_bytes=int(args.text_cache_mb * MB),
        thumbnail_cache_bytes=int(args.thumbnail_cache_mb * MB),
        batch_window_ms=args.batch_window_ms,
    )
    os.environ[CONFIG_ENV] = settings_json(
        index=args.index,
        cache_dir=args.cache_dir,
        device=args.device,
        gpu=args.gpu,
        moment_segments=args.moment_segments,
        limits=limits,
        threads=args.threads or None,
        allowed_hosts=[*default_allowed_hosts(args.host), *args.allowed_host],
    )
    if args.workers == 1:  # load here, so a bad index or model fails before the server starts
        serve_forever(app_from_environment(), sock, args.header_timeout, args.shutdown_timeout)
    else:
        from lit_retrieval.search.index import VideoIndex

        VideoIndex.load(args.index)  # a bad index folder: one line here, not an error in every worker
        sock.close()  # uvicorn's supervisor binds it again and hands it to the workers
        configure_logging()
        uvicorn.run(
            "lit_retrieval.serve.loading:app_from_environment",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            http=GuardedH11Protocol,
            log_level="warning",
            timeout_graceful_shutdown=args.shutdown_timeout,
        )
    return 0
