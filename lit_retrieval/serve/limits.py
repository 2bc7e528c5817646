"""The service's limits: request sizes, decode work of uploads, timeouts and cache sizes. A module
without heavy imports, so `lit-retrieval serve` parses its options and takes its port before
torch, faiss or the web stack are imported."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DecodeBounds:
    max_pixels: int = 1920 * 1088  # per frame or image
    max_frames: int = 3600  # decoded frames of a video (2 min at 30 fps)
    timeout_s: float = 10.0


@dataclass(frozen=True)
class Limits:
    max_json_bytes: int = 64 * 1024  # a JSON search request
    max_upload_bytes: int = 64 * 1024 * 1024  # an uploaded query image or video
    max_k: int = 100
    max_text_chars: int = 2000
    max_events: int = 32
    max_upload_pixels: int = DecodeBounds.max_pixels  # per decoded frame or image of an upload
    max_upload_frames: int = DecodeBounds.max_frames  # decoded frames of an uploaded video
    decode_timeout_s: float = DecodeBounds.timeout_s  # decoding one upload
    header_timeout_s: float = 10.0  # request line and headers, from connect (or the last answer)
    body_timeout_s: float = 60.0  # a whole request body, from its headers
    text_cache_bytes: int = 16 * 2**20  # query vectors kept in memory
    thumbnail_cache_bytes: int = 64 * 2**20  # thumbnails kept on disk
    batch_window_ms: float = 2.0  # how long the batcher waits for more concurrent text queries

    @property
    def decode_bounds(self) -> DecodeBounds:
        return DecodeBounds(self.max_upload_pixels, self.max_upload_frames, self.decode_timeout_s)
