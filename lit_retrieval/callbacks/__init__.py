"""Lightning callbacks: the metrics report, GVE's Modality Pyramid curriculum and hard-negative
mining, resume checkpoints (interval, on-signal, Slurm requeue) and the training curves (theta_t, ...)."""

from lit_retrieval.callbacks.metrics_report import MetricsReport
from lit_retrieval.callbacks.modality_pyramid import ModalityPyramid
from lit_retrieval.callbacks.negative_mining import HardNegativeMining
from lit_retrieval.callbacks.resume_checkpoint import ResumeCheckpoint
from lit_retrieval.callbacks.training_curves import TrainingCurves, plot_training_curves

__all__ = [
    "HardNegativeMining",
    "MetricsReport",
    "ModalityPyramid",
    "ResumeCheckpoint",
    "TrainingCurves",
    "plot_training_curves",
]
