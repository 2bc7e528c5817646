"""The LightningModules and what they are made of:

- `dual_encoder.py` (`DualEncoderRetrieval`: an encoder + a similarity head, MELON's baselines and
  MEA), `sali.py` (`SALIRetrieval`), `gve.py` (`GVERetrieval`: Qwen2.5-VL + LoRA);
- training: `objectives.py` (which losses combine, one text forward), `query_encoding.py`,
  `multi_event.py` (`MEAConfig`), `optim.py`, `grad_cache.py`, `initialization.py`, `nonfinite.py`,
  `rng.py`, `checkpoint_head.py`;
- evaluation: `evaluation.py` (collect, gather, rank, report), `analyses.py` (MELON's),
  `rescoring.py` and `reranking.py` (test-time options);
- `item_embedders.py`: what a trained module gives search, UVRB and MTEB.

YAML configs name the classes exported here (`lit_retrieval.modules.DualEncoderRetrieval`, ...).
"""

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
