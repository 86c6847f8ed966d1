"""PyTorch layers that own sparse weights or patterns: SparseLinear, SparseConv2d (1x1) and
SparseAttention; and DepthwiseConv2d (3x3, dense), MobileNet's other layer."""

from .attention import SparseAttention
from .caches import release_caches, set_weight_copies
from .conv import SparseConv2d
from .depthwise import DepthwiseConv2d
from .distributed import index_buffer_names
from .linear import SparseLinear

__all__ = [
    "SparseLinear",
    "SparseConv2d",
    "SparseAttention",
    "DepthwiseConv2d",
    "index_buffer_names",
    "release_caches",
    "set_weight_copies",
]
