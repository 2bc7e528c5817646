from lit_retrieval.callbacks.metrics_report import MetricsReport
from lit_retrieval.callbacks.training_curves import TrainingCurves, plot_training_curves

__all__ = ["MetricsReport", "TrainingCurves", "plot_training_curves"]
