"""The data layer (docs/architecture.md, "The data layer"): shared record types at this level,
`datasets/` (one file per dataset), `media/`, `batching/`, `gve/` and `text/`.

The classes YAML configs name (`lit_retrieval.data.<X>DataModule`) are exported here, each module
imported on first use.
`lit_retrieval.data.spans` stays an alias of `lit_retrieval.data.text.spans`: checkpoints written
before the data layer had rooms pickled `SpanSplitter` under that module path.
"""

import importlib
import sys
from typing import Any

from lit_retrieval.data.text import spans

sys.modules[f"{__name__}.spans"] = spans  # the pre-rooms path of pickled `SpanSplitter`s

# exported name -> its module, imported on first use (PEP 562), so the commands that read annotations
# (`validate-melon`, `sali-stats`) do not import Lightning through the data modules
_EXPORTS = {
    "load_annotations": "annotations",
    "save_annotations": "annotations",
    "VideoTextDataModule": "batching.datamodule",
    "MultiEventDataset": "batching.dataset",
    "ActivityNetDataModule": "datasets.activitynet",
    "MultiEventDataModule": "datasets.canonical",
    "CondensedMoviesDataModule": "datasets.condensed_movies",
    "DiDeMoDataModule": "datasets.didemo",
    "MELONDataModule": "datasets.melon",
    "MelonFields": "formats.melon",
    "MSRVTTDataModule": "datasets.msrvtt",
    "SynthConfig": "datasets.synthetic",
    "ShardedDataModule": "streaming.datamodule",
    "WebDatasetTarsDataModule": "datasets.webdataset_tars",
    "MultiTaskDataModule": "gve.multitask",
    "TaskSpec": "gve.tasks",
    "ShotConfig": "media.shots",
    "ShotDetectorConfig": "media.shots",
    "FrameSample": "media.video",
    "VideoDecodeError": "media.decoding",
    "sample_frames": "media.video",
    "AnnotationError": "records",
    "Event": "records",
    "VideoRecord": "records",
    "SpanSplitter": "text.spans",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "ActivityNetDataModule",
    "AnnotationError",
    "CondensedMoviesDataModule",
    "DiDeMoDataModule",
    "MSRVTTDataModule",
    "ShotDetectorConfig",
    "ShardedDataModule",
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
    "WebDatasetTarsDataModule",
    "load_annotations",
    "sample_frames",
    "save_annotations",
]
