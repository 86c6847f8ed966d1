"""SparseLinear: a drop-in nn.Linear whose weight is a CSRMatrix or NMMatrix."""

from __future__ import annotations

import torch
from torch import fx, nn

from ..formats import CSRMatrix, NMMatrix
from ..ops import _eager_plans, linear
from . import _repeat_calls
from ._fx_leaf import traced_call
from ._weight import SparseWeightModule, compress_weight


class SparseLinear(SparseWeightModule):
    """y = x @ W^T + bias with W (out_features, in_features) sparse; trains W's kept values only.

    Example:
        >>> layer = SparseLinear.from_dense(nn.Linear(64, 32), pattern="2:8")
        >>> layer(torch.randn(5, 64)).shape
        torch.Size([5, 32])
    """

    def __init__(self, weight: CSRMatrix | NMMatrix, bias: torch.Tensor | None = None):
        super().__init__()
        self._init_sparse_weight(weight, bias)

    @classmethod
    def from_dense(
        cls,
        linear: nn.Linear,
        sparsity: float | str | None = None,
        *,
        pattern=None,
        vector: int | None = None,
        block: int | None = None,
        format: str | None = None,
        mask: torch.Tensor | None = None,
    ) -> SparseLinear:
        """Prune an nn.Linear by magnitude: `sparsity=0.9` (CSR) or `pattern="2:8"` (N:M, with
        `vector=` rows sharing a choice and `block=` columns moving together); `format="csr"`
        stores an N:M mask as CSR; `mask=` gives the kept positions instead of magnitude.
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear must be an nn.Linear, got {type(linear).__name__}")
        W = compress_weight(linear.weight, sparsity, pattern, vector, block, format, mask)
        layer = cls(W, linear.bias)
        layer.values.requires_grad_(linear.weight.requires_grad)
        if linear.bias is not None:  # (sparsify_ must not unfreeze what a user froze)
            layer.bias.requires_grad_(linear.bias.requires_grad)
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(x, fx.Proxy):  # (torch.fx records the layer whole)
            return traced_call(self, x)
        call_key = _repeat_calls.linear_key(self, x)
        bias = self._parameters.get("bias")  # (the key's bias where it is one)
        out = _repeat_calls.replay(self, call_key, x, bias)  # a repeat call: its plan at once
        if out is not None:
            return out
        W = self.weight
        out = linear(x, W, self.bias)
        _repeat_calls.remember(self, call_key, lambda: _eager_plans.replayer(x, W, bias))
        return out

    def to_dense(self) -> torch.Tensor:
        """The dense weight (out_features, in_features) an nn.Linear would hold."""
        return self.dense_weight()

    def to_linear(self) -> nn.Linear:
        """An nn.Linear with the same (pruned) weight and bias."""
        return self._filled(
            nn.Linear(
                self.in_features,
                self.out_features,
                bias=self.bias is not None,
                device=self.values.device,
                dtype=self.values.dtype,
            )
        )

    def extra_repr(self) -> str:
        return self._sparse_repr()
