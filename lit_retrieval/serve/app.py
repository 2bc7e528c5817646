"""The search service: FastAPI routes over one loaded model and faiss index.

Routes: `POST /search` (JSON `{"text"} | {"events": [...]}` with optional `k` and `instruction`, or a
multipart form with an image/video `file`, optional `text`, `k`, `instruction`), `GET /thumbnail/{id}`
(`?t=seconds`), `GET|HEAD /video/{id}` (HTTP range requests, so the page's player can seek),
`GET /health`, `GET /info` and the page at `/`. Videos are named by their index id (position in
`videos.json`), never by a path, so a URL can reach only files the index lists; names are shown as
text (bytes that are not UTF-8 as U+FFFD), never as local paths. Every error is JSON
`{"error": message, "status": code}`. Requests pass `guards` first (Host, Origin, body size and
time); concurrent text queries are embedded together (`TextBatcher`); uploads are decoded within
`DecodeBounds` outside the model lock; the index folder is only read.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from lit_retrieval.data.items import ItemError, MediaItem
from lit_retrieval.data.text.queries import concat_query
from lit_retrieval.data.media.video import VideoDecodeError
from lit_retrieval.models.encoders.text_towers import AutoTextTower
from lit_retrieval.search.embedders import ItemEmbedder
from lit_retrieval.search.index import VIDEO_SUFFIXES, VideoIndex
from lit_retrieval.serve.batching import TextBatcher
from lit_retrieval.serve.caches import ByteBoundedLRU
from lit_retrieval.serve.guards import BodyGuard, HostGuard, WithoutRange, check_range, error_response
from lit_retrieval.serve.moments import MomentFinder
from lit_retrieval.serve.thumbnails import ThumbnailCache
from lit_retrieval.serve.limits import Limits
from lit_retrieval.serve.uploads import ClientGate, check_upload

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif"}
PAGE = Path(__file__).parent / "static" / "index.html"
log = logging.getLogger("lit_retrieval.serve")


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str | None = None
    events: list[str] | None = None  # a multi-event query, events in order (MELON Sec. 4.2: concatenated)
    instruction: str | None = None
    k: int = Field(10, ge=1)

    @model_validator(mode="after")
    def one_query(self) -> SearchRequest:
        if (self.text is None or not self.text.strip()) and not self.events:
            raise ValueError("give a query: 'text' or 'events'")
        if self.text is not None and self.events:
            raise ValueError("give 'text' or 'events', not both")
        return self


def _validation_message(errors) -> str:
    def where(error) -> str:
        return ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "request"

    return "; ".join(f"{where(e)}: {e['msg']}" for e in errors)


def display_name(path: str) -> str:
    """A file's name as text: its bytes decoded as UTF-8, undecodable bytes as U+FFFD."""
    return os.fsencode(Path(path).name).decode("utf-8", "replace")


def public_spec(spec: dict | None) -> dict | None:
    """A model spec without local folders: every path-like value by its last component."""
    if spec is None:
        return None
    return {k: display_name(v) if isinstance(v, str) and os.sep in v else v for k, v in spec.items()}


def turn_off_text_caches(embedder: ItemEmbedder) -> None:
    """Empty and switch off the per-text hidden-state caches of the embedder's text towers (unbounded
    in bytes); the service keeps its own cache of query vectors, bounded in bytes."""
    for owner in (getattr(embedder, "module", None), getattr(embedder, "embedder", None)):
        for module in owner.modules() if hasattr(owner, "modules") else ():
            if isinstance(module, AutoTextTower):
                module.cache_size = 0
                module._cache.clear()


class SearchService:
    """The loaded model and index, and what each route does with them."""

    def __init__(
        self,
        index: VideoIndex,
        embedder: ItemEmbedder,
        index_path: str | Path,
        cache_dir: str | Path,
        moment_segments: int = 4,
        limits: Limits | None = None,
    ) -> None:
        self.index = index
        self.ids = {path: i for i, path in enumerate(index.videos)}  # index id of each listed video
        self.embedder = embedder
        self.index_path = Path(index_path)
        self.limits = limits or Limits()
        self.lock = threading.Lock()  # one embedding at a time: the model is not shared between threads
        turn_off_text_caches(embedder)
        self.text_vectors: ByteBoundedLRU[np.ndarray] = ByteBoundedLRU(self.limits.text_cache_bytes)
        self.batcher = TextBatcher(embedder, self.lock, index.search, self.limits.batch_window_ms / 1000)
        self.uploads = ClientGate()
        self.thumbnails = ThumbnailCache(Path(cache_dir) / "thumbnails", self.limits.thumbnail_cache_bytes)
        self.moments = MomentFinder(embedder, moment_segments, cache_dir, self.lock)

    def info(self) -> dict:
        meta = self.index.meta
        return {
            "model": public_spec(meta.get("model")),
            "fingerprint": meta.get("fingerprint"),
            "count": len(self.index.videos),
            "dim": meta.get("dim"),
            "kind": (meta.get("settings") or {}).get("kind"),
            "modalities": sorted(self.embedder.modalities),
            "moment_segments": self.moments.segments,
            "limits": asdict(self.limits),
        }

    def video_path(self, video_id: str) -> str:
        """The file of index entry `video_id`, else 404: the listed path must still be (or link to) a
        regular file with a video suffix."""
        if not re.fullmatch(r"[0-9]{1,12}", video_id) or int(video_id) >= len(self.index.videos):
            raise HTTPException(404, f"no video {video_id!r} in this index (ids 0..{len(self.index.videos) - 1})")
        path = os.path.realpath(self.index.videos[int(video_id)])  # a symlink counts as what it points to
        if Path(path).suffix.lower() not in VIDEO_SUFFIXES or not os.path.isfile(path):
            raise HTTPException(404, f"video {video_id} is listed by the index but is no longer a video file there")
        return path

    def check_k(self, k: int) -> int:
        if not 1 <= k <= self.limits.max_k:
            raise HTTPException(422, f"k must be between 1 and {self.limits.max_k}, got {k}")
        return k

    def check_text(self, text: object, what: str = "text") -> None:
        if text is None:
            return
        if not isinstance(text, str):
            raise HTTPException(422, f"{what} must be a text field")
        if len(text) > self.limits.max_text_chars:
            raise HTTPException(422, f"{what} is longer than {self.limits.max_text_chars} characters")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise HTTPException(422, f"{what} is not valid Unicode (a lone surrogate escape)") from None

    def query_from_json(self, request: SearchRequest) -> MediaItem:
        self.check_text(request.text)
        self.check_text(request.instruction, "instruction")
        if request.events is not None:
            if len(request.events) > self.limits.max_events or not all(e.strip() for e in request.events):
                raise HTTPException(422, f"events must be 1 to {self.limits.max_events} non-empty sentences")
            for event in request.events:
                self.check_text(event, "an event")
            return MediaItem(text=concat_query(request.events))
        return MediaItem(text=request.text)

    def ranked(self, query: MediaItem, k: int, instruction: str | None) -> tuple[np.ndarray, list[tuple[str, float]]]:
        """The query's vector and its top k: a new text through the batcher, a cached text or any
        other query embedded on its own, then searched."""
        if query.modality not in self.embedder.modalities:
            accepted = sorted(self.embedder.modalities)
            raise HTTPException(422, f"this model embeds {accepted} queries, not {query.modality}")
        key = (instruction, query.text)
        vector = self.text_vectors.get(key) if query.modality == "T" else None
        if query.modality == "T" and vector is None:
            vector, hits = self.batcher.query(query.text, instruction, k)
            self.text_vectors.put(key, vector)
            return vector, hits
        if vector is None:
            with self.lock:
                vector = self.embedder.embed([query], instruction, 1).numpy()[0]
        return vector, self.index.search(vector[None], k)[0]

    def search(self, query: MediaItem, k: int, instruction: str | None, label: str) -> dict:
        started = time.perf_counter()
        vector, hits = self.ranked(query, k, instruction)
        results = []
        for rank, (path, score) in enumerate(hits, 1):
            video_id = self.ids[path]
            moment = self.moments.best(path, vector)
            thumbnail = f"/thumbnail/{video_id}" + (f"?t={moment.time:.1f}" if moment else "")
            results.append(
                {
                    "rank": rank,
                    "id": video_id,
                    "name": display_name(path),
                    "score": score,
                    "moment": None if moment is None else {**asdict(moment), "time": moment.time},
                    "thumbnail": thumbnail,
                    "video": f"/video/{video_id}",
                }
            )
        return {"query": label, "k": k, "results": results, "took_ms": round(1000 * (time.perf_counter() - started), 2)}

    def search_file(self, query: MediaItem, kind: str, k: int, instruction: str | None, label: str) -> dict:
        """An uploaded query: decoded within the limits first (outside the model lock), then searched."""
        check_upload(query.image or query.video, kind, self.limits.decode_bounds)
        folder = os.path.dirname(query.image or query.video)
        try:
            return self.search(query, k, instruction, label)
        except (VideoDecodeError, ItemError, OSError, ValueError) as err:
            reason = str(err).replace(folder + os.sep, "").replace(folder, "upload")
            raise HTTPException(422, f"the uploaded query could not be read: {reason}") from None

    async def search_upload(self, request: Request) -> dict:
        form = await request.form(max_files=1, max_fields=8)
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise HTTPException(422, "a multipart search needs a 'file' (an image or a video)")
        suffix = Path(upload.filename or "").suffix.lower()
        kind = "image" if suffix in IMAGE_SUFFIXES else "video" if suffix in VIDEO_SUFFIXES else None
        if kind is None:
            raise HTTPException(
                422,
                f"uploaded file {upload.filename!r}: not an image or video file name "
                f"({', '.join(sorted(IMAGE_SUFFIXES | VIDEO_SUFFIXES))})",
            )
        text = form.get("text") or None
        instruction = form.get("instruction") or None
        self.check_text(text)
        self.check_text(instruction, "instruction")
        k_field = form.get("k") or "10"
        if not isinstance(k_field, str) or not re.fullmatch(r"\s*[0-9]{1,6}\s*", k_field):
            raise HTTPException(422, "k must be an integer")
        k = self.check_k(int(k_field))
        client = request.client.host if request.client else "unknown"
        with self.uploads.hold(client), tempfile.TemporaryDirectory(prefix="lit-retrieval-upload-") as folder:
            path = os.path.join(folder, f"query{suffix}")
            with open(path, "wb") as handle:
                while chunk := await upload.read(1 << 20):
                    handle.write(chunk)
            query = MediaItem(text=text, **{kind: path})
            label = f"{upload.filename}" + (f" + {text}" if text else "")
            return await _in_thread(self.search_file, query, kind, k, instruction, label)


def create_app(service: SearchService, allowed_hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> FastAPI:
    """The routes over `service`, answering only requests whose `Host` is one of `allowed_hosts`."""
    app = FastAPI(title="lit-retrieval search", docs_url=None, redoc_url=None, openapi_url=None)
    limits = service.limits
    app.add_middleware(
        BodyGuard,
        max_json_bytes=limits.max_json_bytes,
        max_upload_bytes=limits.max_upload_bytes,
        timeout_s=limits.body_timeout_s,
    )
    app.add_middleware(HostGuard, allowed=allowed_hosts)
    page = PAGE.read_text(encoding="utf-8")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> JSONResponse:
        return error_response(err.status_code, str(err.detail), err.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, err: RequestValidationError) -> JSONResponse:
        return error_response(422, _validation_message(err.errors()))

    @app.exception_handler(ClientDisconnect)
    async def disconnected(request: Request, err: ClientDisconnect) -> Response:
        client = f"{request.client.host}:{request.client.port}" if request.client else "a client"
        log.warning("%s disconnected before its %s %s was read", client, request.method, request.url.path)
        return Response(status_code=400)  # never reaches the client

    @app.exception_handler(Exception)
    async def internal_error(request: Request, err: Exception) -> JSONResponse:
        log.error("%s %s failed: %s: %s", request.method, request.url.path, type(err).__name__, err)
        return error_response(500, f"internal error ({type(err).__name__}); the server's log has the details")

    @app.get("/", response_class=HTMLResponse)
    def index_page() -> HTMLResponse:
        return HTMLResponse(page)

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "count": len(service.index.videos)}

    @app.get("/info")
    def info() -> dict:
        return service.info()

    @app.post("/search")
    async def search(request: Request) -> dict:
        content_type = request.headers.get("content-type", "")
        if content_type.startswith("multipart/form-data"):
            return await service.search_upload(request)
        if not content_type.startswith("application/json"):
            raise HTTPException(415, "send JSON (application/json) or a multipart form with a 'file'")
        try:
            body = json.loads(await request.body())
        except (ValueError, RecursionError) as err:  # bad syntax or encoding, 4,300+ digit numbers, deep nesting
            raise HTTPException(400, f"the body is not valid JSON: {type(err).__name__}: {str(err)[:200]}") from None
        try:
            query = SearchRequest.model_validate(body)
        except ValidationError as err:
            raise HTTPException(422, _validation_message(err.errors(include_input=False))[:1000]) from None
        service.check_k(query.k)
        item = service.query_from_json(query)
        label = query.text if query.text is not None else " | ".join(query.events or [])
        return await _in_thread(service.search, item, query.k, query.instruction, label)

    @app.get("/thumbnail/{video_id}")
    async def thumbnail(video_id: str, t: float | None = None) -> FileResponse:
        if t is not None and not (0 <= t < 1e7):
            raise HTTPException(422, "t must be a time in seconds, 0 or more")
        path = service.video_path(video_id)
        try:
            image = await _in_thread(service.thumbnails.path, int(video_id), path, t)
        except VideoDecodeError as err:
            reason = str(err).replace(path, display_name(path))
            raise HTTPException(422, f"no thumbnail for video {video_id}: {reason}") from None
        return FileResponse(image, media_type="image/jpeg")

    @app.api_route("/video/{video_id}", methods=["GET", "HEAD"])
    def video(video_id: str, request: Request) -> FileResponse:
        path = service.video_path(video_id)
        ranged = check_range(request.headers.get("range"), os.path.getsize(path))
        response_class = FileResponse if ranged else WithoutRange
        return response_class(path, filename=display_name(path), content_disposition_type="inline")

    return app


async def _in_thread(function, *args):
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(function, *args)
