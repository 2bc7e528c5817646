"""The search service: FastAPI routes over one loaded model and faiss index.

Routes: `POST /search` (JSON `{"text"} | {"events": [...]}` with optional `k` and `instruction`, or a
multipart form with an image/video `file`, optional `text`, `k`, `instruction`), `GET /thumbnail/{id}`
(`?t=seconds`), `GET /video/{id}` (HTTP range requests, so the page's player can seek), `GET /health`,
`GET /info` and the page at `/`. Videos are named by their index id (position in `videos.json`),
never by a path, so a URL can reach only files the index lists. Every error is JSON
`{"error": message, "status": code}`. Request bodies are bounded (`Limits`); the index folder is
only read.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from lit_retrieval.data.media import ItemError, MediaItem
from lit_retrieval.data.queries import concat_query
from lit_retrieval.data.video import VideoDecodeError
from lit_retrieval.search.embedders import ItemEmbedder
from lit_retrieval.search.index import VIDEO_SUFFIXES, VideoIndex
from lit_retrieval.serve.moments import MomentFinder
from lit_retrieval.serve.thumbnails import ThumbnailCache

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif"}
PAGE = Path(__file__).parent / "static" / "index.html"


@dataclass(frozen=True)
class Limits:
    max_json_bytes: int = 64 * 1024  # a JSON search request
    max_upload_bytes: int = 64 * 1024 * 1024  # an uploaded query image or video
    max_k: int = 100
    max_text_chars: int = 2000
    max_events: int = 32


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


class BodyLimit:
    """ASGI middleware: refuses a body longer than the route's limit (declared or actually sent)."""

    def __init__(self, app, limits: Limits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        upload = headers.get(b"content-type", b"").startswith(b"multipart/form-data")
        limit = self.limits.max_upload_bytes + 64 * 1024 if upload else self.limits.max_json_bytes
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            response = error_response(413, f"request body over the limit of {limit} bytes")
            return await response(scope, receive, send)
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise HTTPException(413, f"request body over the limit of {limit} bytes")
            return message

        return await self.app(scope, limited_receive, send)


def error_response(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message, "status": status}, status_code=status)


def _validation_message(errors) -> str:
    def where(error) -> str:
        return ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "request"

    return "; ".join(f"{where(e)}: {e['msg']}" for e in errors)


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
        self.thumbnails = ThumbnailCache(Path(cache_dir) / "thumbnails")
        self.moments = MomentFinder(embedder, moment_segments, cache_dir, self.lock)

    def info(self) -> dict:
        meta = self.index.meta
        return {
            "model": meta.get("model"),
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

    def check_text(self, text: str | None, what: str = "text") -> None:
        if text is not None and len(text) > self.limits.max_text_chars:
            raise HTTPException(422, f"{what} is longer than {self.limits.max_text_chars} characters")

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

    def search(self, query: MediaItem, k: int, instruction: str | None, label: str) -> dict:
        started = time.perf_counter()
        if query.modality not in self.embedder.modalities:
            accepted = sorted(self.embedder.modalities)
            raise HTTPException(422, f"this model embeds {accepted} queries, not {query.modality}")
        try:
            with self.lock:
                vector = self.embedder.embed([query], instruction, 1).numpy()[0]
        except (VideoDecodeError, ItemError, OSError, ValueError) as err:
            raise HTTPException(422, f"the uploaded query could not be read: {err}") from None
        hits = self.index.search(vector[None], k)[0]
        results = []
        for rank, (path, score) in enumerate(hits, 1):
            video_id = self.ids[path]
            moment = self.moments.best(path, vector)
            thumbnail = f"/thumbnail/{video_id}" + (f"?t={moment.time:.1f}" if moment else "")
            results.append(
                {
                    "rank": rank,
                    "id": video_id,
                    "name": Path(path).name,
                    "score": score,
                    "moment": None if moment is None else {**asdict(moment), "time": moment.time},
                    "thumbnail": thumbnail,
                    "video": f"/video/{video_id}",
                }
            )
        return {"query": label, "k": k, "results": results, "took_ms": round(1000 * (time.perf_counter() - started), 2)}

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
        try:
            k = self.check_k(int(form.get("k") or 10))
        except ValueError:
            raise HTTPException(422, "k must be an integer") from None
        with tempfile.TemporaryDirectory(prefix="lit-retrieval-upload-") as folder:
            path = os.path.join(folder, f"query{suffix}")
            with open(path, "wb") as handle:
                while chunk := await upload.read(1 << 20):
                    handle.write(chunk)
            query = MediaItem(text=text, **{kind: path})
            label = f"{upload.filename}" + (f" + {text}" if text else "")
            result = await _in_thread(self.search, query, k, instruction, label)
        return result


def create_app(service: SearchService) -> FastAPI:
    app = FastAPI(title="lit-retrieval search", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(BodyLimit, limits=service.limits)
    page = PAGE.read_text(encoding="utf-8")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> JSONResponse:
        return error_response(err.status_code, str(err.detail))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, err: RequestValidationError) -> JSONResponse:
        return error_response(422, _validation_message(err.errors()))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, err: Exception) -> JSONResponse:
        return error_response(500, f"internal error: {type(err).__name__}: {err}")

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
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise HTTPException(400, f"the body is not valid JSON: {err}") from None
        try:
            query = SearchRequest.model_validate(body)
        except ValidationError as err:
            raise HTTPException(422, _validation_message(err.errors())) from None
        service.check_k(query.k)
        label = query.text if query.text is not None else " | ".join(query.events or [])
        return await _in_thread(service.search, service.query_from_json(query), query.k, query.instruction, label)

    @app.get("/thumbnail/{video_id}")
    async def thumbnail(video_id: str, t: float | None = None) -> FileResponse:
        if t is not None and not (0 <= t < 1e7):
            raise HTTPException(422, "t must be a time in seconds, 0 or more")
        path = service.video_path(video_id)
        try:
            image = await _in_thread(service.thumbnails.path, int(video_id), path, t)
        except VideoDecodeError as err:
            raise HTTPException(422, f"no thumbnail for video {video_id}: {err}") from None
        return FileResponse(image, media_type="image/jpeg")

    @app.get("/video/{video_id}")
    def video(video_id: str) -> FileResponse:
        path = service.video_path(video_id)
        return FileResponse(path, filename=Path(path).name, content_disposition_type="inline")

    return app


async def _in_thread(function, *args):
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(function, *args)
