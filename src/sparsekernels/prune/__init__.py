"""Pruning: magnitude masks (unstructured and N:M), sparsity configs and sparsify_."""

from .config import SparsityConfig
from .masks import magnitude_mask, nm_mask
from .sparsify import SparsifySummary, sparsify_

__all__ = ["magnitude_mask", "nm_mask", "SparsityConfig", "SparsifySummary", "sparsify_"]
