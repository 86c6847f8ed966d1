"""Public ops: one function per op; dispatch lives here, math in reference.py and kernels/."""

from . import _vmap_rules  # noqa: F401  (registers the ops' vmap rules)
from .attention import sparse_attention
from .attention_packed import sparse_attention_packed
from .depthwise import depthwise_conv2d
from .linear import linear
from .sddmm import sddmm
from .softmax import sparse_softmax
from .spmm import spmm

__all__ = [
    "spmm",
    "linear",
    "sddmm",
    "sparse_softmax",
    "sparse_attention",
    "sparse_attention_packed",
    "depthwise_conv2d",
]
