"""Shot boundaries with PySceneDetect, cached per video, and frames regrouped into shots (SALI Sec. 3).

`detect_shots` runs one PySceneDetect detector (AdaptiveDetector by default, the best documented
choice for movie shots in PySceneDetect's documentation) over a video and returns its shots as `(start, end)`
seconds; a video without a detectable cut is one shot. `detect_many` runs it over many videos in
parallel processes with a progress bar and a `ShotCache`: one JSON file per (video, settings),
written atomically by the worker that finished the video, so a crash loses no finished video. A
cache entry is used only while the file's identity (resolved path, size, modification time) and
the detector settings are unchanged. A video that fails is cached the same way, as its reason: it
is not detected again while the file is unchanged (size and mtime), so a rerun retries exactly the
files that were repaired since; `retry_failed` retries every failed one.

`frame_shot_index` assigns sampled frames to shots by timestamp (SALI: "regroups those frames by
the shot their timestamp falls in"): shots that received no sampled frame are left out and the
rest renumbered 0..S-1 in temporal order, so S varies per video and never exceeds T.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from lit_retrieval.data.media.identity import file_identity, file_path
from lit_retrieval.data.media.video import VideoDecodeError
from lit_retrieval.errors import ConfigError
from lit_retrieval.progress import Progress

log = logging.getLogger(__name__)

Shots = list[tuple[float, float]]


@dataclass(frozen=True)
class ShotDetectorConfig:
    """PySceneDetect settings.

    Args:
        detector: `adaptive` (AdaptiveDetector) or `content` (ContentDetector).
        threshold: the detector's threshold (`adaptive_threshold`, default 3.0, or ContentDetector's
            `threshold`, default 27.0); `None` keeps PySceneDetect's default.
        min_scene_len: shortest shot in seconds (PySceneDetect's best mean-F1 setting is 0.6 s).
        downscale: frame-width divisor before detection; `None` lets PySceneDetect pick one so that
            frames are processed at about 256 px width (its auto-downscale), 1 keeps full size.
        backend: PySceneDetect video backend (`pyav` decodes what our sampler decodes).
    """

    detector: Literal["adaptive", "content"] = "adaptive"
    threshold: float | None = None
    min_scene_len: float = 0.6
    downscale: int | None = None
    backend: str = "pyav"

    def __post_init__(self) -> None:
        if self.detector not in ("adaptive", "content"):
            raise ConfigError(f"shot detector must be 'adaptive' or 'content', got {self.detector!r}")
        if self.downscale is not None and self.downscale < 1:
            raise ConfigError(f"downscale must be >= 1 or None (auto), got {self.downscale}")
        if self.min_scene_len < 0:
            raise ConfigError(f"min_scene_len must be >= 0 seconds, got {self.min_scene_len}")

    def key(self) -> str:
        """A short digest of the settings, part of every cache entry's name."""
        return hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]

    def build_detector(self):
        from scenedetect import AdaptiveDetector, ContentDetector

        length = f"{self.min_scene_len}s"
        if self.detector == "adaptive":
            extra = {} if self.threshold is None else {"adaptive_threshold": self.threshold}
            return AdaptiveDetector(min_scene_len=length, **extra)
        extra = {} if self.threshold is None else {"threshold": self.threshold}
        return ContentDetector(min_scene_len=length, **extra)


def detect_shots(path: str | Path, config: ShotDetectorConfig = ShotDetectorConfig()) -> Shots:
    """Shots of one video as `(start, end)` seconds, in order, covering the video.

    Raises `VideoDecodeError` when the file is missing or cannot be decoded.
    """
    from scenedetect import SceneManager, open_video

    path = Path(path)
    if not path.is_file():
        raise VideoDecodeError(path, "file not found")
    try:
        # PyAV backend: keep FFmpeg's log level as it is (PySceneDetect would turn its stderr
        # logging back on for the whole process).
        quiet = {"suppress_output": True} if config.backend == "pyav" else {}
        video = open_video(str(path), backend=config.backend, **quiet)
        manager = SceneManager()
        if config.downscale is not None:
            manager.auto_downscale = False
            manager.downscale = config.downscale
        manager.add_detector(config.build_detector())
        frames = manager.detect_scenes(video)
        scenes = manager.get_scene_list(start_in_scene=True)
    except VideoDecodeError:
        raise
    except Exception as err:  # PySceneDetect and its backends raise many types on bad input
        raise VideoDecodeError(path, f"shot detection failed ({type(err).__name__}: {err})") from None
    if frames == 0 or not scenes:
        raise VideoDecodeError(path, "no decodable frame for shot detection")
    return [(float(start.get_seconds()), float(end.get_seconds())) for start, end in scenes]


class ShotCache:
    """One JSON file per (video, detector settings) under `root`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def entry(self, path: Path, config: ShotDetectorConfig) -> Path:
        digest = hashlib.sha1(file_path(path).encode()).hexdigest()[:16]
        return self.root / f"{path.stem}-{digest}-{config.key()}.json"

    def _read(self, path: Path, config: ShotDetectorConfig) -> dict | None:
        """The entry of this file version and these settings, or None (absent, unreadable, stale)."""
        try:
            data = json.loads(self.entry(path, config).read_text())
            if data["file"] != file_identity(path) or data["settings"] != asdict(config):
                return None
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return data

    def get(self, path: str | Path, config: ShotDetectorConfig) -> Shots | None:
        """Cached shots, or None when absent, unreadable, a failure or made for another file version."""
        data = self._read(Path(path), config)
        try:
            return [(float(s), float(e)) for s, e in data["shots"]] if data else None
        except (KeyError, TypeError, ValueError):
            return None

    def failure(self, path: str | Path, config: ShotDetectorConfig) -> str | None:
        """Why detection failed on this very file version (same size and mtime), else None."""
        data = self._read(Path(path), config)
        reason = data.get("failed") if data else None
        return reason if isinstance(reason, str) else None

    def put(self, path: str | Path, config: ShotDetectorConfig, shots: Shots) -> None:
        self._write(Path(path), config, {"shots": [list(s) for s in shots]})

    def put_failure(self, path: str | Path, config: ShotDetectorConfig, reason: str) -> None:
        """Record that this version of the file failed (a missing file is not recorded)."""
        if Path(path).is_file():
            self._write(Path(path), config, {"failed": reason})

    def _write(self, path: Path, config: ShotDetectorConfig, content: dict) -> None:
        entry = self.entry(path, config)
        self.root.mkdir(parents=True, exist_ok=True)
        data = {"file": file_identity(path), "settings": asdict(config), **content}
        tmp = entry.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, entry)


@dataclass
class ShotConfig:
    """Shots for a DataModule: detector settings, cache folder and detection processes."""

    cache_dir: str = "cache/shots"
    detector: ShotDetectorConfig = ShotDetectorConfig()
    workers: int = 1
    progress: bool = True


def _detect_and_store(path: str, config: ShotDetectorConfig, cache_root: str) -> tuple[str, Shots | None, str | None]:
    try:
        shots = detect_shots(path, config)
    except VideoDecodeError as err:
        ShotCache(cache_root).put_failure(path, config, err.reason)
        return path, None, err.reason
    ShotCache(cache_root).put(path, config, shots)
    return path, shots, None


@dataclass
class ShotResults:
    """Shots per video path, and the videos that failed with their reasons (`known_failures` of
    them failed in an earlier run on the same, unchanged file and were not tried again)."""

    shots: dict[str, Shots]
    failed: dict[str, str]
    cached: int
    known_failures: int = 0


def detect_many(
    paths: Sequence[str | Path],
    config: ShotDetectorConfig,
    cache_root: str | Path,
    workers: int = 1,
    on_error: Literal["raise", "skip"] = "raise",
    progress: bool = True,
    retry_failed: bool = False,
) -> ShotResults:
    """Shots of every video: cached ones are read, the rest detected in `workers` processes.

    A video that fails to decode raises `VideoDecodeError` under `on_error="raise"` (after the
    other videos finished and were cached) or is listed in `failed` under `"skip"`. A failure of
    an unchanged file is taken from the cache (counted in `known_failures`) unless `retry_failed`.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    results, todo = _cached(paths, config, cache_root, retry_failed)
    known = results.cached + results.known_failures
    counts = {"cached": results.cached, "detected": 0, "failed": results.known_failures}
    with Progress("detecting shots", known + len(todo), completed=known, counts=counts, enabled=progress) as bar:
        if workers <= 1:
            outcomes = (_detect_and_store(p, config, str(cache_root)) for p in todo)
            for path, shots, error in outcomes:
                bar.advance(**_record(results, path, shots, error))
        else:
            with ProcessPoolExecutor(workers) as executor:
                futures = [executor.submit(_detect_and_store, p, config, str(cache_root)) for p in todo]
                for future in as_completed(futures):
                    bar.advance(**_record(results, *future.result()))
    if results.failed:
        for path, reason in results.failed.items():
            log.warning("shot detection failed for %s: %s", path, reason)
        if on_error == "raise":
            path, reason = next(iter(results.failed.items()))
            raise VideoDecodeError(
                path, reason + f" ({len(results.failed)} video(s) failed; on_bad_video: skip drops them)"
            )
    return results


def _cached(
    paths: Sequence[str | Path], config: ShotDetectorConfig, cache_root: str | Path, retry_failed: bool = False
) -> tuple[ShotResults, list[str]]:
    """What the cache knows of `paths` (shots, and failures of unchanged files unless `retry_failed`),
    and the paths it does not know, in order and without repeats."""
    cache = ShotCache(cache_root)
    results = ShotResults({}, {}, 0)
    todo = []
    for path in dict.fromkeys(str(p) for p in paths):
        hit = cache.get(path, config) if Path(path).is_file() else None
        known = None if retry_failed or hit is not None or not Path(path).is_file() else cache.failure(path, config)
        if known is not None:
            results.failed[path] = known
            results.known_failures += 1
        elif hit is None:
            todo.append(path)
        else:
            results.shots[path] = hit
            results.cached += 1
    return results, todo


def uncached(paths: Sequence[str | Path], config: ShotDetectorConfig, cache_root: str | Path) -> list[str]:
    """The videos of `paths` whose shots (or failure) the cache does not hold: what `detect_many` would detect."""
    return _cached(paths, config, cache_root)[1]


def _record(results: ShotResults, path: str, shots: Shots | None, error: str | None) -> dict[str, int]:
    """Adds one video's outcome to `results`; the progress count it adds to."""
    if shots is None:
        results.failed[path] = error or "unknown error"
        return {"failed": 1}
    results.shots[path] = shots
    return {"detected": 1}


def frame_shot_index(frame_times: np.ndarray, shots: Shots) -> np.ndarray:
    """Shot of each sampled frame `[T]` (int64; -1 where the frame is padded, i.e. time NaN).

    A frame at time t belongs to the shot with start <= t < end (times before the first shot go
    to the first, after the last to the last). Shots without a sampled frame are dropped and the
    others renumbered 0..S-1 in temporal order.
    """
    if not shots:
        raise ValueError("a video needs at least one shot")
    starts = np.asarray([start for start, _ in shots], dtype=np.float64)
    valid = ~np.isnan(frame_times)
    raw = np.clip(np.searchsorted(starts, frame_times[valid], side="right") - 1, 0, len(shots) - 1)
    out = np.full(frame_times.shape, -1, dtype=np.int64)
    out[valid] = np.unique(raw, return_inverse=True)[1].reshape(-1)
    return out
