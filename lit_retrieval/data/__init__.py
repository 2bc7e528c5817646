from lit_retrieval.data.annotations import load_annotations, save_annotations
from lit_retrieval.data.datamodule import MultiEventDataModule, MultiEventDataset, SyntheticSpec
from lit_retrieval.data.records import AnnotationError, Event, VideoRecord
from lit_retrieval.data.video import FrameSample, VideoDecodeError, sample_frames

__all__ = [
    "AnnotationError", "Event", "FrameSample", "MultiEventDataModule", "MultiEventDataset", "SyntheticSpec",
    "VideoDecodeError", "VideoRecord", "load_annotations", "sample_frames", "save_annotations",
]
