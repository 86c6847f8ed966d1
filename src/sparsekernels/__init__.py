"""sparsekernels: fast sparse neural networks on NVIDIA GPUs, with the same semantics on CPU.

Importing registers the ops with torch.library and does nothing else (no device work).
"""

from . import nn, prune
from .formats import (
    CSRMatrix,
    NMMatrix,
    load_safetensors,
    load_smtx,
    save_safetensors,
    save_smtx,
)
from .ops import linear, sddmm, sparse_attention, sparse_attention_packed, sparse_softmax, spmm
from .prune import SparsityConfig, densify_, sparsify_

__version__ = "0.1.0"

__all__ = [
    "CSRMatrix",
    "NMMatrix",
    "load_smtx",
    "save_smtx",
    "load_safetensors",
    "save_safetensors",
    "spmm",
    "linear",
    "sddmm",
    "sparse_softmax",
    "sparse_attention",
    "sparse_attention_packed",
    "prune",
    "nn",
    "SparsityConfig",
    "sparsify_",
    "densify_",
]
