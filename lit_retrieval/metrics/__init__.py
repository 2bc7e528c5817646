from lit_retrieval.metrics.ranking import retrieval_metrics, text_to_video_ranks, video_to_text_ranks
from lit_retrieval.metrics.retrieval import RetrievalMetrics

__all__ = ["RetrievalMetrics", "retrieval_metrics", "text_to_video_ranks", "video_to_text_ranks"]
