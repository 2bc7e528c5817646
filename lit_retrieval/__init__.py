"""lit-retrieval: a PyTorch Lightning framework for text-to-video retrieval research."""

__version__ = "0.1.0"
