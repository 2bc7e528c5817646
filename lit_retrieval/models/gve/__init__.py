"""GVE: Qwen2.5-VL as a universal video embedder (GVE Sec. 3.3, A.7-A.8)."""

from lit_retrieval.models.gve.embedder import GVEEmbedder, AdapterConfig, last_token_pool
from lit_retrieval.models.gve.processing import GVEProcessing, InputConfig

__all__ = ["GVEEmbedder", "GVEProcessing", "InputConfig", "AdapterConfig", "last_token_pool"]
