"""The data layer (docs/architecture.md, "The data layer"): shared record types at this level,
`datasets/` (one file per dataset), `media/`, `batching/`, `gve/` and `text/`.

The classes YAML configs name (`lit_retrieval.data.<X>DataModule`) are exported here.
`lit_retrieval.data.spans` stays an alias of `lit_retrieval.data.text.spans`: checkpoints written
before the data layer had rooms pickled `SpanSplitter` under that module path.
"""

import sys

from lit_retrieval.data.annotations import load_annotations, save_annotations
from lit_retrieval.data.batching.datamodule import VideoTextDataModule
from lit_retrieval.data.batching.dataset import MultiEventDataset
from lit_retrieval.data.datasets.activitynet import ActivityNetDataModule
from lit_retrieval.data.datasets.canonical import MultiEventDataModule
from lit_retrieval.data.datasets.condensed_movies import CondensedMoviesDataModule
from lit_retrieval.data.datasets.didemo import DiDeMoDataModule
from lit_retrieval.data.datasets.melon import MELONDataModule, MelonFields
from lit_retrieval.data.datasets.msrvtt import MSRVTTDataModule
from lit_retrieval.data.datasets.synthetic import SynthConfig
from lit_retrieval.data.gve.multitask import MultiTaskDataModule
from lit_retrieval.data.gve.tasks import TaskSpec
from lit_retrieval.data.media.shots import ShotConfig, ShotDetectorConfig
from lit_retrieval.data.media.video import FrameSample, VideoDecodeError, sample_frames
from lit_retrieval.data.records import AnnotationError, Event, VideoRecord
from lit_retrieval.data.text import spans
from lit_retrieval.data.text.spans import SpanSplitter

sys.modules[f"{__name__}.spans"] = spans  # the pre-rooms path of pickled `SpanSplitter`s

__all__ = [
    "ActivityNetDataModule",
    "AnnotationError",
    "CondensedMoviesDataModule",
    "DiDeMoDataModule",
    "MSRVTTDataModule",
    "ShotDetectorConfig",
    "ShotConfig",
    "SpanSplitter",
    "Event",
    "FrameSample",
    "MELONDataModule",
    "MelonFields",
    "MultiEventDataModule",
    "MultiTaskDataModule",
    "TaskSpec",
    "MultiEventDataset",
    "SynthConfig",
    "VideoDecodeError",
    "VideoRecord",
    "VideoTextDataModule",
    "load_annotations",
    "sample_frames",
    "save_annotations",
]
