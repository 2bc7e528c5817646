"""What `lit-retrieval cache-frames` does, as a library: a `Plan` (the cache's parameters, the
sampler that decodes each `CacheJob` as the consumer samples it, the jobs, the bad-video policy)
and `write_jobs`, which decodes the jobs (in processes) and appends each to a shard in order, so an
interrupted run resumes. The plans come from their consumers: `VideoTextDataModule.cache_plan`
(`WindowSampler`) and `lit_retrieval.models.gve.cache_plan` (GVE's clips)."""

from __future__ import annotations

import gc
import multiprocessing
from dataclasses import dataclass
from typing import Any, Protocol

from lit_retrieval.data.media.frame_cache import CacheJob, CacheWriter, FrameFormat, frame_chunks
from lit_retrieval.data.media.identity import file_version
from lit_retrieval.data.media.video import FrameSample, SamplingSpec, VideoDecodeError, sample_video
from lit_retrieval.progress import Progress


class FrameSampler(Protocol):
    """Decodes one job's frames as the cache's consumer samples them (picklable: it runs in workers)."""

    def __call__(self, job: CacheJob) -> FrameSample: ...


@dataclass(frozen=True)
class WindowSampler:
    """A video-text data module's sampling (`MultiEventDataset`)."""

    spec: SamplingSpec
    seek_threshold: float

    def __call__(self, job: CacheJob) -> FrameSample:
        return sample_video(
            job.video, self.spec, job.start, job.end, seek_threshold=self.seek_threshold, duration=job.duration
        )


@dataclass
class Plan:
    """What to cache: the cache's parameters, how to sample, the jobs, and the bad-video policy."""

    params: dict[str, Any]
    sampler: FrameSampler
    jobs: list[CacheJob]
    on_bad_video: str
    default_out: str | None


def sorted_unique(jobs: list[CacheJob]) -> list[CacheJob]:
    """One job per key (the first wins), in the order of video, start and end."""
    unique = {job.key: job for job in reversed(jobs)}  # the first job of each key wins
    return sorted(
        unique.values(), key=lambda j: (j.video, j.start is not None, j.start or 0.0, j.end is not None, j.end or 0.0)
    )


def _decode(task: tuple[FrameSampler, CacheJob, FrameFormat, int | None]) -> tuple:
    """In a worker: one job's file stamp, then its frames encoded for the shard (or the error)."""
    sampler, job, frame_format, quality = task
    stamp = file_version(job.video) or (0, 0)
    try:
        sample = sampler(job)
    except VideoDecodeError as err:
        return job, stamp, err.reason, None
    return job, stamp, sample, frame_chunks(sample.frames, frame_format, quality)


def write_jobs(
    writer: CacheWriter,
    sampler: FrameSampler,
    todo: list[CacheJob],
    frame_format: FrameFormat,
    quality: int | None,
    workers: int,
    bar: Progress,
) -> None:
    """Decode `todo` (in `workers` processes) and append each video to the shard, in order."""
    tasks = ((sampler, job, frame_format, quality) for job in todo)
    if workers == 1:
        for job, stamp, result, chunks in map(_decode, tasks):
            writer.add(job, stamp, result, chunks)
            bar.advance(**{"failed" if isinstance(result, str) else "decoded": 1})
        return
    gc.collect()  # PyAV objects of earlier decoding freed by a forked child's collector can hang it
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        for job, stamp, result, chunks in pool.imap(_decode, tasks, chunksize=1):  # in order: resumable
            writer.add(job, stamp, result, chunks)
            bar.advance(**{"failed" if isinstance(result, str) else "decoded": 1})
