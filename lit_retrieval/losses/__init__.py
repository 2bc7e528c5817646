from lit_retrieval.losses.infonce import SymmetricInfoNCE

__all__ = ["SymmetricInfoNCE"]
