from lit_retrieval.modules.dual_encoder import DualEncoderRetrieval
from lit_retrieval.modules.optim import OptimConfig

__all__ = ["DualEncoderRetrieval", "OptimConfig"]
