"""Pruning: magnitude and Wanda masks (unstructured and N:M), sparsity configs and sparsify_."""

from .config import METHODS, SparsityConfig
from .masks import magnitude_mask, nm_mask, nm_select, topk_mask
from .sparsify import SparsifySummary, sparsify_
from .wanda import wanda_mask, wanda_scores

__all__ = [
    "METHODS",
    "magnitude_mask",
    "nm_mask",
    "nm_select",
    "topk_mask",
    "wanda_mask",
    "wanda_scores",
    "SparsityConfig",
    "SparsifySummary",
    "sparsify_",
]
