"""The canonical multi-event format (`lit_retrieval.data.annotations`): one JSON file for all
splits, read by `MultiEventDataModule`, which can also write the synthetic corpus
(`lit_retrieval.data.datasets.synthetic`) where the file does not exist yet.
"""

from __future__ import annotations

import logging
from pathlib import Path

from lit_retrieval.data.annotations import load_annotations
from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.batching.datamodule import VideoTextDataModule
from lit_retrieval.data.datasets.synthetic import SynthConfig, generate_corpus, settings_differences
from lit_retrieval.data.records import VideoRecord

log = logging.getLogger(__name__)


class MultiEventDataModule(VideoTextDataModule):
    """The canonical multi-event format (`lit_retrieval.data.annotations`), one file for all splits.

    Args:
        annotation: the canonical JSON file.
        synthetic: generate the synthetic corpus with these settings if `annotation` does not exist.
        **kwargs: the common options of `VideoTextDataModule`.
    """

    def __init__(self, annotation: str, synthetic: SynthConfig | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.annotation = Path(annotation)
        self.synthetic = synthetic

    @property
    def source(self) -> str:
        return str(self.annotation)

    def default_video_root(self) -> Path:
        return self.annotation.parent

    def prepare_data(self) -> None:
        if self.synthetic is not None and self.annotation.exists():  # read as it is; say so if made otherwise
            differences = settings_differences(self.annotation.parent, self.synthetic)
            if differences:
                log.warning("%s; %s is read as it is (delete its folder to rewrite it)", differences, self.annotation)
        elif self.synthetic is not None:
            log.info("creating the synthetic corpus in %s", self.annotation.parent)
            written = generate_corpus(self.annotation.parent, self.synthetic)
            if written != self.annotation:
                written.replace(self.annotation)
        super().prepare_data()

    def load_records(self, collector: RecordCollector) -> list[VideoRecord]:
        return load_annotations(self.annotation, collector)
