from lit_retrieval.data.annotations import load_annotations, save_annotations
from lit_retrieval.data.datamodule import MultiEventDataModule, MultiEventDataset, VideoTextDataModule
from lit_retrieval.data.datamodules import (
    ActivityNetDataModule, CondensedMoviesDataModule, DiDeMoDataModule, MELONDataModule, MSRVTTDataModule,
)
from lit_retrieval.data.melon import MelonFields
from lit_retrieval.data.multitask import MultiTaskDataModule
from lit_retrieval.data.records import AnnotationError, Event, VideoRecord
from lit_retrieval.data.shots import ShotDetectorConfig, ShotConfig
from lit_retrieval.data.spans import SpanSplitter
from lit_retrieval.data.synthetic import SynthConfig
from lit_retrieval.data.tasks import TaskSpec
from lit_retrieval.data.video import FrameSample, VideoDecodeError, sample_frames

__all__ = [
    "ActivityNetDataModule", "AnnotationError", "CondensedMoviesDataModule", "DiDeMoDataModule", "MSRVTTDataModule",
    "ShotDetectorConfig", "ShotConfig", "SpanSplitter", "Event", "FrameSample", "MELONDataModule",
    "MelonFields", "MultiEventDataModule", "MultiTaskDataModule", "TaskSpec", "MultiEventDataset", "SynthConfig", "VideoDecodeError", "VideoRecord",
    "VideoTextDataModule", "load_annotations", "sample_frames", "save_annotations",
]
