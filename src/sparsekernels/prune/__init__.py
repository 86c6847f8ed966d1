"""Pruning: magnitude and Wanda masks and SparseGPT (unstructured and N:M), sparsity configs
and sparsify_."""

from .config import METHODS, SparsityConfig
from .masks import magnitude_mask, nm_mask, nm_select, topk_mask
from .sparsegpt import sparsegpt_prune
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
    "sparsegpt_prune",
    "SparsityConfig",
    "SparsifySummary",
    "sparsify_",
]
