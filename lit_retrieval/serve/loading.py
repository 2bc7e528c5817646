"""Open an index and its model once for the server (the index folder is only read)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import asdict, replace

from lit_retrieval.search.index import VideoIndex, check_k
from lit_retrieval.search.loading import ModelSpec, load_item_embedder
from lit_retrieval.serve.app import Limits, SearchService, create_app
from lit_retrieval.serve.guards import GuardedH11Protocol, default_allowed_hosts
from lit_retrieval.serve.thumbnails import default_cache_dir, index_cache_dir

CONFIG_ENV = "LIT_RETRIEVAL_SERVE_CONFIG"  # how `--workers N` hands the settings to each worker process


def load_service(
    index: str,
    cache_dir: str | None = None,
    device: str = "cpu",
    gpu: bool = False,
    moment_segments: int = 4,
    limits: Limits | None = None,
    threads: int | None = 1,
) -> SearchService:
    """The index, the model it was built with (refused if it changed since: `VideoIndex.check`) and
    the cache folder for thumbnails and moment embeddings. `threads`: CPU threads of torch and faiss
    in this process (None: their defaults)."""
    if threads:
        import torch

        from lit_retrieval.faiss_library import faiss

        torch.set_num_threads(threads)
        faiss.omp_set_num_threads(threads)
    loaded = VideoIndex.load(index, gpu=gpu)
    check_k((limits or Limits()).max_k, loaded.on_gpu, len(loaded.videos), "--max-k")
    spec = replace(ModelSpec(**loaded.meta["model"]), device=device)
    embedder = load_item_embedder(spec)
    loaded.check(embedder)
    cache = index_cache_dir(cache_dir or default_cache_dir(), index, loaded.meta["fingerprint"])
    return SearchService(loaded, embedder, index, cache, moment_segments, limits)


def settings_json(**settings) -> str:
    if isinstance(settings.get("limits"), Limits):
        settings["limits"] = asdict(settings["limits"])
    return json.dumps(settings)


class OneLineInterruptions(logging.Filter):
    """A request cut short by its client (disconnect) or by shutdown (cancelled after
    `--shutdown-timeout`) is logged as one line, not as uvicorn's traceback; other errors keep theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, (asyncio.CancelledError, ConnectionError)) or type(error).__name__ == "ClientDisconnect":
            record.msg, record.args, record.exc_info = f"request cut short: {type(error).__name__}: {error}", (), None
        return True


def configure_logging() -> None:
    """Log lines prefixed with the command's name; uvicorn's interruptions in one line."""
    logging.basicConfig(format="lit-retrieval serve: %(message)s", level=logging.WARNING)
    errors = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, OneLineInterruptions) for f in errors.filters):
        errors.addFilter(OneLineInterruptions())


def app_from_environment():
    """App factory for uvicorn worker processes: settings from `CONFIG_ENV` (`allowed_hosts` and the
    limits' header timeout for the server, the rest for `load_service`)."""
    settings = json.loads(os.environ[CONFIG_ENV])
    limits = Limits(**settings["limits"]) if settings.get("limits") else Limits()
    allowed_hosts = tuple(settings.pop("allowed_hosts", None) or default_allowed_hosts("127.0.0.1"))
    GuardedH11Protocol.header_timeout_s = limits.header_timeout_s
    configure_logging()  # in each worker process too
    return create_app(load_service(**{**settings, "limits": limits}), allowed_hosts)


def is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")
