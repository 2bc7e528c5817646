"""Training objectives: symmetric InfoNCE, SigLIP's pairwise sigmoid loss, MELON's MEA loss (Sec. 4.2,
Eq. 3-6), MeVTR's loss."""

from lit_retrieval.losses.infonce import SymmetricInfoNCE
from lit_retrieval.losses.mea import MEALoss, MEAOutput
from lit_retrieval.losses.mevtr import MeVTRLoss
from lit_retrieval.losses.sigmoid import PairwiseSigmoidLoss

__all__ = ["MEALoss", "MEAOutput", "MeVTRLoss", "PairwiseSigmoidLoss", "SymmetricInfoNCE"]
