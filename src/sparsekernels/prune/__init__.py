"""Pruning: magnitude and Wanda masks and SparseGPT (unstructured and N:M) with the kept weights
refit exactly, sparsity configs, sparsify_ and its inverse densify_, and distill_ to recover
quality with the masks fixed."""

from .config import METHODS, SparsityConfig
from .dense_target import dense_output_target
from .densify import DensifySummary, densify_
from .distill import distill_, every_layer, norms_and_biases, sparse_values
from .masks import magnitude_mask, nm_mask, nm_select, topk_mask
from .refit import refit_kept
from .sparsegpt import sparsegpt_prune
from .sparsify import SparsifySummary, sparsify_
from .wanda import wanda_mask, wanda_scores

__all__ = [
    "distill_",
    "every_layer",
    "norms_and_biases",
    "sparse_values",
    "METHODS",
    "magnitude_mask",
    "nm_mask",
    "nm_select",
    "topk_mask",
    "wanda_mask",
    "wanda_scores",
    "sparsegpt_prune",
    "refit_kept",
    "dense_output_target",
    "SparsityConfig",
    "SparsifySummary",
    "sparsify_",
    "DensifySummary",
    "densify_",
]
