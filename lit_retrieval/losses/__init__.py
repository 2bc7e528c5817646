from lit_retrieval.losses.infonce import SymmetricInfoNCE
from lit_retrieval.losses.mea import MEALoss, MEAOutput

__all__ = ["MEALoss", "MEAOutput", "SymmetricInfoNCE"]
