from lit_retrieval.metrics.analyses import AnalysesConfig
from lit_retrieval.metrics.relational import RelationalConfig
from lit_retrieval.modules.dual_encoder import DualEncoderRetrieval
from lit_retrieval.modules.evaluation import EvaluationConfig
from lit_retrieval.modules.gve import EmbedderConfig, GVERetrieval
from lit_retrieval.modules.multi_event import MEAConfig
from lit_retrieval.modules.optim import OptimConfig
from lit_retrieval.modules.sali import SALIRetrieval

__all__ = [
    "DualEncoderRetrieval",
    "EmbedderConfig",
    "EvaluationConfig",
    "AnalysesConfig",
    "GVERetrieval",
    "MEAConfig",
    "OptimConfig",
    "RelationalConfig",
    "SALIRetrieval",
]
