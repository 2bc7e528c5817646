from lit_retrieval.models.heads.base import SimilarityHead
from lit_retrieval.models.heads.meanp import MeanPHead

__all__ = ["MeanPHead", "SimilarityHead"]
