"""PyTorch layers that own sparse weights or patterns: SparseLinear, SparseConv2d (1x1) and
SparseAttention."""

from .attention import SparseAttention
from .conv import SparseConv2d
from .linear import SparseLinear

__all__ = ["SparseLinear", "SparseConv2d", "SparseAttention"]
