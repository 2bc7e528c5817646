"""Frame cache: every video's sampled frames decoded once (`lit-retrieval cache-frames`) and read
back by the data modules instead of decoding (`data.init_args.frame_cache: DIR`).

Layout of DIR (every writer its own files, so Slurm array shards never share one; a reader globs
them all, no merge step):

    cache.json                              format version, frame format, sampling parameters
    shard-00003-of-00016.frames             frame bytes of shard 3, appended video after video
    shard-00003-of-00016.index.jsonl        one line per video: its key and where its frames are
    shard-00003-of-00016.failed.txt         videos that failed to decode, with the reason

A video's key is (absolute path, window start, window end); its line also records the file's size
and mtime (ns) when it was decoded, the frame times, mask and sampled rate (`FrameSample`), and
either the frames' byte offset and shape or the decode error. `cache.json` records the consumer's
sampling parameters (frames, size, targets, key-frame or exact sampling, window rule): a reader
with other parameters is refused with a `FrameCacheMismatch` naming the difference; a cache is
never used silently for other frames.

Files are checked when read, and a bad one is named in one line (`lit-retrieval COMMAND: FILE[:
line N]: reason`): a `cache.json` that is not the object `cache-frames` writes, or an index line that
is not valid JSON or lacks a field or whose fields disagree (`CorruptFrameCache`). An entry that no
longer holds its video's frames, because the video changed since (size or mtime) or the shard's
frame file was cut short, is a `StaleCacheEntry` naming the video when read (a `VideoDecodeError`:
skipped and counted under `on_bad_video: skip`), never read as empty or other frames; the next
`cache-frames` run names it and decodes it again (and drops unreadable index lines the same way).

Frame formats (measured in docs/datasets.md):
- `raw`: the uint8 frames `[T, H, W, 3]` as they are; read through one `numpy.memmap` per shard
  (no decode, no copy until the batch), exactly the frames the sampler returns.
- `jpeg`: each frame a JPEG (Pillow, `quality`, 4:4:4 chroma); ~20x smaller, lossy (PSNR in the docs).

Writing is resumable: a writer appends frames first and the index line after, so after an
interruption (a crash, a full disk) a rerun truncates the frame file to the last indexed video and
continues in the same order, giving the same bytes as an uninterrupted run.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from PIL import Image

from lit_retrieval.data.records import AnnotationError
from lit_retrieval.data.reading import loads_strict, read_json
from lit_retrieval.data.media.identity import file_path, file_version
from lit_retrieval.data.media.video import FrameSample, VideoDecodeError
from lit_retrieval.errors import ConfigError, InputError

log = logging.getLogger(__name__)

CACHE_FORMAT_VERSION = 1
FrameFormat = Literal["raw", "jpeg"]
Window = tuple[float | None, float | None]


class FrameCacheMismatch(ConfigError):
    """The cache was built for other frames (sampling parameters, format version, frame format)."""


class CorruptFrameCache(InputError, ValueError):
    """A cache file that is not what `cache-frames` writes; the message names the file (and line)."""


class StaleCacheEntry(VideoDecodeError):
    """A cache entry that no longer holds its video's frames (the video changed since it was
    cached, or its shard's frame file was cut short). A `VideoDecodeError`, so `on_bad_video: skip`
    skips and counts it; `cache-frames` decodes it again."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(path, f"{reason}; rerun lit-retrieval cache-frames to decode it again")


@dataclass(frozen=True)
class CacheJob:
    """One video window to cache: the key (`video`, `start`, `end`) and the header duration the
    sampler falls back on for truncation checks."""

    video: str
    start: float | None = None
    end: float | None = None
    duration: float | None = None

    @property
    def key(self) -> tuple[str, float | None, float | None]:
        return (self.video, self.start, self.end)


def _header(params: dict[str, Any], frame_format: FrameFormat, quality: int | None) -> dict[str, Any]:
    return {"version": CACHE_FORMAT_VERSION, "format": frame_format, "quality": quality, "sampling": params}


def _canonical(value: Any) -> Any:
    """`value` as it reads back from JSON (tuples become lists)."""
    return json.loads(json.dumps(value))


def _differences(found: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    keys = sorted(set(found) | set(wanted))
    return [f"{k}={found.get(k)!r} (wanted {wanted.get(k)!r})" for k in keys if found.get(k) != wanted.get(k)]


def read_header(root: Path) -> dict[str, Any]:
    """`cache.json`, checked to be the object `cache-frames` writes (`CorruptFrameCache` naming the
    file otherwise; `FrameCacheMismatch` for another format version)."""
    path = root / "cache.json"
    if not path.is_file():
        raise FrameCacheMismatch(f"{root}: not a frame cache (no cache.json); build it with lit-retrieval cache-frames")
    try:
        header = read_json(path)
    except AnnotationError as err:
        raise CorruptFrameCache(f"{path}: {err.reason}; rebuild the cache into a new folder") from None
    if not isinstance(header, dict):
        raise CorruptFrameCache(f"{path}: expected a JSON object, got {type(header).__name__}; rebuild the cache")
    if header.get("version") != CACHE_FORMAT_VERSION:
        raise FrameCacheMismatch(
            f"{root}: cache format version {header.get('version')!r}, "
            f"this version reads {CACHE_FORMAT_VERSION}; rebuild it"
        )
    problem = _header_problem(header)
    if problem:
        raise CorruptFrameCache(f"{path}: {problem}, not what lit-retrieval cache-frames writes; rebuild the cache")
    return header


def _header_problem(header: dict[str, Any]) -> str | None:
    if not isinstance(header.get("sampling"), dict):
        return f"'sampling' must be an object, got {header.get('sampling', 'nothing')!r}"
    if header.get("format") not in ("raw", "jpeg"):
        return f"'format' must be 'raw' or 'jpeg', got {header.get('format', 'nothing')!r}"
    quality = header.get("quality", "nothing")
    if header["format"] == "raw" and quality is not None:
        return f"'quality' must be null for raw frames, got {quality!r}"
    if header["format"] == "jpeg" and not (_is_int(quality) and 1 <= quality <= 100):
        return f"'quality' must be an integer in 1..100 for JPEG frames, got {quality!r}"
    return None


def _is_int(value: Any, least: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _entry_problem(entry: Any, frame_format: FrameFormat) -> str | None:
    """What makes an index line not an entry `CacheWriter.add` writes, None if nothing."""
    if not isinstance(entry, dict):
        return f"expected a JSON object, got {type(entry).__name__}"
    video = entry.get("video")
    if not (isinstance(video, str) and os.path.isabs(video) and "\0" not in video):
        return f"'video' must be an absolute path, got {entry.get('video', 'nothing')!r}"
    for key in ("start", "end"):
        value = entry.get(key, "nothing")
        if value is not None and not (_is_number(value) and math.isfinite(value)):
            return f"{key!r} must be a finite number or null, got {value!r}"
    for key in ("size", "mtime_ns"):
        if not _is_int(entry.get(key)):
            return f"{key!r} must be an integer >= 0, got {entry.get(key, 'nothing')!r}"
    if "error" in entry:
        return None if isinstance(entry["error"], str) else f"'error' must be a string, got {entry['error']!r}"
    shape, lengths = entry.get("shape"), entry.get("lengths")
    if not (isinstance(shape, list) and len(shape) == 4 and all(_is_int(n, 1) for n in shape) and shape[3] == 3):
        return f"'shape' must be [frames, height, width, 3], got {shape if 'shape' in entry else 'nothing'!r}"
    if not (isinstance(lengths, list) and lengths and all(_is_int(n, 1) for n in lengths)):
        return f"'lengths' must be a list of positive byte counts, got {lengths if 'lengths' in entry else 'nothing'!r}"
    wanted = [math.prod(shape)] if frame_format == "raw" else None
    if (wanted is not None and lengths != wanted) or (wanted is None and len(lengths) != shape[0]):
        return f"'lengths' {lengths} do not fit {frame_format} frames of shape {shape}"
    if not _is_int(entry.get("offset")):
        return f"'offset' must be an integer >= 0, got {entry.get('offset', 'nothing')!r}"
    times, mask = entry.get("times"), entry.get("mask")
    if not (isinstance(times, list) and len(times) == shape[0]):
        return f"'times' must list one time per frame ({shape[0]}), got {times if 'times' in entry else 'nothing'!r}"
    if not all(t is None or (_is_number(t) and math.isfinite(t)) for t in times):
        return f"'times' must be finite numbers or null, got {times!r}"
    if not (isinstance(mask, list) and len(mask) == shape[0] and all(isinstance(m, bool) for m in mask)):
        return f"'mask' must list one true/false per frame ({shape[0]}), got {mask if 'mask' in entry else 'nothing'!r}"
    if not _is_number(entry.get("sampled_fps")):
        return f"'sampled_fps' must be a number, got {entry.get('sampled_fps', 'nothing')!r}"
    return None


def check_params(root: Path, header: dict[str, Any], params: dict[str, Any]) -> None:
    """Refuse a cache whose sampling parameters are not `params`, naming each difference."""
    diff = _differences(header["sampling"], _canonical(params))
    if diff:
        raise FrameCacheMismatch(f"{root}: frame cache built with other sampling parameters: {', '.join(diff)}")


def encode_jpeg(frame: np.ndarray, quality: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(frame).save(buffer, format="JPEG", quality=quality, subsampling=0)
    return buffer.getvalue()


def decode_jpeg(data: bytes | memoryview) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def frame_chunks(frames: np.ndarray, frame_format: FrameFormat, quality: int | None) -> list[bytes]:
    """The bytes a shard stores for `frames` [T, H, W, 3]: one raw block, or one JPEG per frame."""
    if frame_format == "raw":
        return [np.ascontiguousarray(frames).tobytes()]
    assert quality is not None
    return [encode_jpeg(frame, quality) for frame in frames]


def _stem(shard: int, num_shards: int) -> str:
    return f"shard-{shard:05d}-of-{num_shards:05d}"


class FrameCache:
    """Read side: `get(video, start, end)` -> the cached `FrameSample`, None when absent; raises
    `VideoDecodeError` for a video recorded as undecodable, `StaleCacheEntry` for a video that
    changed since or frames cut short, `FrameCacheMismatch` for a cache of other parameters and
    `CorruptFrameCache` for unreadable cache files. Safe in DataLoader workers (files open lazily)."""

    def __init__(self, root: str | Path, params: dict[str, Any]) -> None:
        self.root = Path(root)
        header = read_header(self.root)
        check_params(self.root, header, params)
        self.format: FrameFormat = header["format"]
        self.quality: int | None = header["quality"]
        # key -> (index file, byte offset of its line): lines are parsed on use, so 10^5 videos cost
        # a few MB per worker, not their frame times
        self.entries: dict[tuple[str, float | None, float | None], tuple[str, int]] = {}
        for index in sorted(self.root.glob("shard-*.index.jsonl")):
            for offset, entry in read_index(index, self.format):
                self.entries.setdefault((entry["video"], entry["start"], entry["end"]), (index.name, offset))
        self._files: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def __getstate__(self) -> dict[str, Any]:  # files and memory maps are reopened in each worker
        return {**self.__dict__, "_files": {}}

    def _open(self, name: str) -> Any:
        if name not in self._files:
            path = self.root / name
            if name.endswith(".frames"):
                self._files[name] = (
                    np.memmap(path, dtype=np.uint8, mode="r") if path.stat().st_size else np.zeros(0, np.uint8)
                )
            else:
                self._files[name] = open(path, "rb")  # noqa: SIM115 (kept open for the process's lifetime)
        return self._files[name]

    def _entry(self, index_file: str, offset: int) -> dict[str, Any]:
        handle = self._open(index_file)
        handle.seek(offset)
        return json.loads(handle.readline())

    def get(self, video: str | Path, start: float | None = None, end: float | None = None) -> FrameSample | None:
        key = file_path(video)
        found = self.entries.get((key, start, end))
        if found is None:
            return None
        index_file, line = found
        entry = self._entry(index_file, line)
        changed = stale_reason(entry, self.root)
        if changed:
            raise StaleCacheEntry(key, changed)
        if "error" in entry:
            raise VideoDecodeError(key, entry["error"])
        return self._sample(index_file[: -len(".index.jsonl")] + ".frames", entry)

    def _sample(self, data_file: str, entry: dict[str, Any]) -> FrameSample:
        blob = self._open(data_file)
        offset, lengths, shape = entry["offset"], entry["lengths"], tuple(entry["shape"])
        if offset + sum(lengths) > blob.size:
            raise StaleCacheEntry(entry["video"], cut_short(self.root / data_file, blob.size, offset + sum(lengths)))
        if self.format == "raw":
            frames = np.array(blob[offset : offset + lengths[0]]).reshape(shape)
        else:
            frames = np.zeros(shape, dtype=np.uint8)
            for i, length in enumerate(lengths):
                try:
                    frames[i] = decode_jpeg(memoryview(blob[offset : offset + length]))
                except (OSError, ValueError) as err:  # PIL: not a JPEG, or one of another size
                    raise StaleCacheEntry(
                        entry["video"], f"frame {i} in {self.root / data_file} is unreadable ({err})"
                    ) from None
                offset += length
        times = np.array([math.nan if t is None else t for t in entry["times"]], dtype=np.float64)
        return FrameSample(frames, times, np.array(entry["mask"], dtype=bool), entry["sampled_fps"])


def stale_reason(entry: dict[str, Any], root: Path) -> str | None:
    """Why `entry` no longer describes its video file (size or mtime changed), None if it does or
    the file is gone (then the cached frames are all there is)."""
    stamp = file_version(entry["video"])
    if stamp is None or stamp == (entry["size"], entry["mtime_ns"]):
        return None
    return (
        f"changed since it was cached in {root} (size {entry['size']} -> {stamp[0]}, "
        f"mtime_ns {entry['mtime_ns']} -> {stamp[1]})"
    )


def cut_short(data_path: Path, size: int, end: int) -> str:
    return f"its frames in {data_path} are cut short (the file holds {size} bytes, the entry ends at byte {end})"


def read_index(
    path: Path, frame_format: FrameFormat, on_bad_line: Callable[[str], None] | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(byte offset, entry) of the complete lines of an index file (a torn last line, from an
    interrupted writer, is not one). A line that is not an entry raises `CorruptFrameCache` naming
    the file and line, or, given `on_bad_line`, is passed to it (as that message) and left out."""
    offset = 0
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.endswith(b"\n"):
                return
            try:
                entry = loads_strict(line.decode("utf-8"), constants=True)
                problem = _entry_problem(entry, frame_format)
            except ValueError as err:  # UnicodeDecodeError included
                problem = f"not valid JSON ({err})"
            if problem is None:
                yield offset, entry
            else:
                message = f"{path}: line {number}: {problem}"
                if on_bad_line is None:
                    raise CorruptFrameCache(f"{message}; rerun lit-retrieval cache-frames to repair the cache")
                on_bad_line(message)
            offset += len(line)


def open_cache(root: str | Path | None, params: dict[str, Any]) -> FrameCache | None:
    """The cache at `root` for frames sampled with `params` (None when `root` is None)."""
    return None if root is None else FrameCache(root, params)


def cached_or_sampled(
    cache: FrameCache | None,
    video: str | Path,
    start: float | None,
    end: float | None,
    sample: Callable[[], FrameSample],
) -> FrameSample:
    """The cached frames of (video, start, end), else `sample()` with a warning naming the video."""
    if cache is not None:
        found = cache.get(video, start, end)
        if found is not None:
            return found
        log.warning("frame cache %s has no entry for %s (window %s-%s): decoding it", cache.root, video, start, end)
    return sample()


class CacheWriter:
    """Write side of one shard: `pending(jobs)` lists what is not cached yet (after repairing an
    interrupted run, and with every stale entry dropped), `add(job, sample | error)` appends one
    video. `repairs` holds one line per index line or entry dropped, naming it and why."""

    def __init__(
        self,
        root: str | Path,
        params: dict[str, Any],
        frame_format: FrameFormat = "raw",
        quality: int | None = None,
        shard: int = 0,
        num_shards: int = 1,
    ) -> None:
        if frame_format not in ("raw", "jpeg"):
            raise ConfigError(f"frame cache format must be 'raw' or 'jpeg', got {frame_format!r}")
        if frame_format == "jpeg" and not (quality and 1 <= quality <= 100):
            raise ConfigError(f"a jpeg frame cache needs a quality in [1, 100], got {quality!r}")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.format = frame_format
        self.quality = quality if frame_format == "jpeg" else None
        self._write_header(params)
        stem = _stem(shard, num_shards)
        self.data_path = self.root / f"{stem}.frames"
        self.index_path = self.root / f"{stem}.index.jsonl"
        self.failed_path = self.root / f"{stem}.failed.txt"
        self.done: dict[tuple[str, float | None, float | None], dict[str, Any]] = {}
        self.repairs: list[str] = []
        self._repair()

    def _write_header(self, params: dict[str, Any]) -> None:
        header = _header(_canonical(params), self.format, self.quality)
        path = self.root / "cache.json"
        if path.exists():
            found = read_header(self.root)
            check_params(self.root, found, params)
            diff = _differences(
                {k: found[k] for k in ("format", "quality")}, {"format": self.format, "quality": self.quality}
            )
            if diff:
                raise FrameCacheMismatch(f"{self.root}: frame cache written in another frame format: {', '.join(diff)}")
            return
        tmp = path.with_name(f".cache.json.{os.getpid()}")
        tmp.write_text(json.dumps(header, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)  # shards writing at once write the same header

    def _repair(self) -> None:
        """Keep the valid index lines whose frames are all in the frame file, and the frame bytes
        they cover; drop a torn tail, unreadable lines and entries cut short (naming each)."""
        size = self.data_path.stat().st_size if self.data_path.exists() else 0
        if self.index_path.exists():
            for _, entry in read_index(self.index_path, self.format, self.repairs.append):
                end = 0 if "error" in entry else entry["offset"] + sum(entry["lengths"])
                if end > size:
                    self.repairs.append(f"{entry['video']}: {cut_short(self.data_path, size, end)}")
                else:
                    self.done[(entry["video"], entry["start"], entry["end"])] = entry
            if self.repairs or self.index_path.stat().st_size != sum(len(_line(e)) for e in self.done.values()):
                self._rewrite_index()
        end = max((e["offset"] + sum(e["lengths"]) for e in self.done.values() if "error" not in e), default=0)
        if size > end:
            with open(self.data_path, "r+b") as handle:
                handle.truncate(end)

    def _rewrite_index(self) -> None:
        """The index file as `done` lists it, replaced atomically."""
        kept = b"".join(_line(e) for e in self.done.values())
        tmp = self.index_path.with_name(f".{self.index_path.name}.{os.getpid()}")
        tmp.write_bytes(kept)
        os.replace(tmp, self.index_path)

    def pending(self, jobs: Iterable[CacheJob]) -> list[CacheJob]:
        """`jobs` not cached yet; a cached video whose file changed since is dropped from the index
        (named in `repairs`) and decoded again."""
        todo, dropped = [], False
        for job in jobs:
            entry = self.done.get(job.key)
            changed = entry is not None and stale_reason(entry, self.root)
            if changed:
                self.repairs.append(f"{job.video}: {changed}")
                del self.done[job.key]
                dropped = True
            if entry is None or changed:
                todo.append(job)
        if dropped:
            self._rewrite_index()
        return todo

    def add(
        self, job: CacheJob, stamp: tuple[int, int], result: FrameSample | str, chunks: list[bytes] | None = None
    ) -> None:
        """Append one video's frames (or, given a string, its decode error) to this shard; `chunks`:
        the frames already encoded by `frame_chunks` (e.g. in a worker process)."""
        entry: dict[str, Any] = {
            "video": job.video,
            "start": job.start,
            "end": job.end,
            "size": stamp[0],
            "mtime_ns": stamp[1],
        }
        if isinstance(result, str):
            entry["error"] = result
        else:
            chunks = chunks if chunks is not None else frame_chunks(result.frames, self.format, self.quality)
            offset = self.data_path.stat().st_size if self.data_path.exists() else 0
            with open(self.data_path, "ab") as handle:
                for chunk in chunks:
                    handle.write(chunk)
                handle.flush()
                os.fsync(handle.fileno())
            entry.update(
                offset=offset,
                lengths=[len(c) for c in chunks],
                shape=list(result.frames.shape),
                times=[None if math.isnan(t) else float(t) for t in result.times],
                mask=[bool(m) for m in result.mask],
                sampled_fps=float(result.sampled_fps),
            )
        with open(self.index_path, "ab") as handle:
            handle.write(_line(entry))
        self.done[job.key] = entry

    def write_failures(self) -> list[tuple[str, str]]:
        """List this shard's undecodable videos in its `.failed.txt` (path TAB reason); returns them."""
        failed = sorted((e["video"], e["error"]) for e in self.done.values() if "error" in e)
        self.failed_path.write_text("".join(f"{video}\t{reason}\n" for video, reason in failed))
        return failed


def _line(entry: dict[str, Any]) -> bytes:
    return (json.dumps(entry, sort_keys=True) + "\n").encode()
