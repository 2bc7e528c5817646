from lit_retrieval.callbacks.metrics_report import MetricsReport

__all__ = ["MetricsReport"]
