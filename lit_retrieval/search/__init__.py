"""Embedding any media item with any of the project's models, faiss indexes and search."""
