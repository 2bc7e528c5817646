"""The frame-cache plan of GVE's `MultiTaskDataModule` (`lit-retrieval cache-frames`): every video
item of its tasks, sampled as the model's input processing samples a clip."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformers import AutoProcessor

from lit_retrieval.data.gve.tasks import read_task
from lit_retrieval.data.media.cache_plan import Plan, sorted_unique
from lit_retrieval.data.media.frame_cache import CacheJob
from lit_retrieval.data.media.identity import file_path
from lit_retrieval.data.media.video import FrameSample
from lit_retrieval.models.gve.processing import InputConfig, clip_cache_params, sample_clip


@dataclass(frozen=True)
class ClipSampler:
    """GVE's clip sampling (`models.gve.processing.sample_clip`)."""

    config: InputConfig
    temporal_patch: int

    def __call__(self, job: CacheJob) -> FrameSample:
        return sample_clip(job.video, job.start, job.end, self.config, self.temporal_patch)


def gve_plan(datamodule: Any, embedder: Any, splits: list[str]) -> Plan:
    """The clips of every video item of the training (`train`) and validation (`val`) tasks, as
    `embedder.inputs` samples them (`embedder`: the config's `model.init_args.embedder`)."""
    inputs = InputConfig(**(embedder.inputs.as_dict() if embedder.get("inputs") else {}))
    temporal_patch = int(AutoProcessor.from_pretrained(str(embedder.model_path)).video_processor.temporal_patch_size)
    specs = (datamodule.specs if "train" in splits else []) + (datamodule.val_specs if "val" in splits else [])
    jobs = []
    for spec in specs:
        for record in read_task(spec, datamodule.on_bad_record, datamodule.seed):
            for item in (record.query, record.positive, *record.negatives):
                if item.video is not None:
                    jobs.append(CacheJob(file_path(item.video), item.start, item.end))
    on_bad_video = "raise" if datamodule.on_bad_video == "raise" else "skip"
    sampler = ClipSampler(inputs, temporal_patch)
    return Plan(
        clip_cache_params(inputs, temporal_patch), sampler, sorted_unique(jobs), on_bad_video, datamodule.frame_cache
    )
