"""`faiss`, imported once for `index`, `search`, `serve` and `mine-negatives`, with a one-line error saying how
to install it when it is missing or broken.

faiss is an extra, not a main dependency (pyproject.toml): `cpu` installs faiss-cpu, `gpu` faiss-gpu-cu12. Both
write the same `faiss/` folder, so with the two installed `import faiss` fails (e.g. "module 'faiss._swigfaiss'
has no attribute 'delete_GpuResourcesVector'"); the error then names the distributions found.
"""

from __future__ import annotations

from importlib.metadata import packages_distributions

from lit_retrieval.errors import UsageError

INSTALL_HINT = "pip install 'lit-retrieval[cpu]' (faiss-cpu) or 'lit-retrieval[gpu]' (faiss-gpu-cu12), not both"

try:
    import faiss
except (ImportError, AttributeError) as err:
    found = sorted(set(packages_distributions().get("faiss", [])))
    if len(found) > 1:
        raise UsageError(
            "faiss",
            f"{' and '.join(found)} are installed into one faiss/ folder ({err}); uninstall both, then "
            f"install one: {INSTALL_HINT}",
        ) from None
    raise UsageError("faiss", f"cannot be imported ({err}): {INSTALL_HINT}") from None

__all__ = ["faiss"]
