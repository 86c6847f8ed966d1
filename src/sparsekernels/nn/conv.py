"""SparseConv2d: a 1x1 convolution (MobileNet's pointwise layer) with a sparse weight.

The convolution is the sparse weight (out_channels, in_channels) times the pixels as tokens, with
bias and activation fused into spmm's epilogue.
"""

from __future__ import annotations

import torch
from torch import fx, nn

from .. import _checks
from ..formats import CSRMatrix, NMMatrix
from ..ops import _autocast, spmm
from ._fx_leaf import traced_call
from ._weight import SparseWeightModule, compress_weight


def conv1x1_unsupported_reason(conv: nn.Conv2d) -> str | None:
    """Why `conv` is not a plain 1x1 convolution SparseConv2d can replace, or None."""
    if tuple(conv.kernel_size) != (1, 1):
        return f"kernel {tuple(conv.kernel_size)} is not 1x1"
    if tuple(conv.stride) != (1, 1):
        return f"stride {tuple(conv.stride)} is not 1"
    padding = conv.padding  # "same" is no padding for a 1x1 kernel at stride 1
    if not isinstance(padding, str) and tuple(padding) != (0, 0):
        return f"padding {tuple(padding)} is not 0"
    if conv.groups != 1:
        return f"groups={conv.groups} (grouped or depthwise)"
    return None


class SparseConv2d(SparseWeightModule):
    """act(conv1x1(x) + bias) on NCHW input with a sparse (out_channels, in_channels) weight.

    Example:
        >>> conv = SparseConv2d.from_dense(nn.Conv2d(64, 32, 1), sparsity=0.9, activation="relu")
        >>> conv(torch.randn(2, 64, 7, 7)).shape
        torch.Size([2, 32, 7, 7])
    """

    def __init__(
        self,
        weight: CSRMatrix | NMMatrix,
        bias: torch.Tensor | None = None,
        activation: str | None = None,
    ):
        super().__init__()
        self._init_sparse_weight(weight, bias)
        name = _checks.activation(activation)
        self.activation = None if name == "none" else name

    @property
    def in_channels(self) -> int:
        return self.in_features

    @property
    def out_channels(self) -> int:
        return self.out_features

    @classmethod
    def from_dense(
        cls,
        conv: nn.Conv2d,
        sparsity: float | str | None = None,
        *,
        pattern=None,
        vector: int | None = None,
        block: int | None = None,
        format: str | None = None,
        mask: torch.Tensor | None = None,
        activation: str | None = None,
    ) -> SparseConv2d:
        """Prune a 1x1 nn.Conv2d by magnitude, as SparseLinear.from_dense; `activation` ("relu",
        "gelu") is fused after the bias. A mask may be (out, in) or (out, in, 1, 1)."""
        if not isinstance(conv, nn.Conv2d):
            raise TypeError(f"conv must be an nn.Conv2d, got {type(conv).__name__}")
        reason = conv1x1_unsupported_reason(conv)
        if reason is not None:
            raise ValueError(f"conv must be a 1x1 convolution with stride 1, no padding: {reason}")
        weight = conv.weight.reshape(conv.out_channels, conv.in_channels)
        if mask is not None:
            _checks.tensor("mask", mask)
            shapes = ((conv.out_channels, conv.in_channels), tuple(conv.weight.shape))
            if tuple(mask.shape) not in shapes:
                raise ValueError(
                    f"mask must have shape {shapes[0]} or {shapes[1]}, got {tuple(mask.shape)}"
                )
            mask = mask.reshape(shapes[0])
        W = compress_weight(weight, sparsity, pattern, vector, block, format, mask)
        layer = cls(W, conv.bias, activation)
        layer.values.requires_grad_(conv.weight.requires_grad)
        if conv.bias is not None:  # (sparsify_ must not unfreeze what a user froze)
            layer.bias.requires_grad_(conv.bias.requires_grad)
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(x, fx.Proxy):  # (torch.fx records the layer whole)
            return traced_call(self, x)
        _checks.tensor("x", x)
        _checks.ndim("x", x, [3, 4])
        _checks.float_dtype("x", x)
        operands = {"x": x, "weight": self.values, "bias": self.bias}
        _checks.same_device(operands)  # (named here: spmm would name its A and B)
        if _autocast.target(x) is None:  # (under autocast spmm casts them as matmul does)
            _checks.same_dtype(operands)
        if x.shape[-3] != self.in_features:
            raise ValueError(
                f"x must have {self.in_features} channels (dimension -3), "
                f"got shape {tuple(x.shape)}"
            )
        unbatched = x.dim() == 3
        if unbatched:
            x = x.unsqueeze(0)
        batch, channels, height, width = x.shape
        W = self.weight
        if batch == 1:  # the pixels of one image are already the tokens (columns) of spmm's B
            out = spmm(W, x.reshape(channels, height * width), self.bias, self.activation)
        elif isinstance(W, CSRMatrix):  # batched B: (batch, C, H*W), no copy
            out = spmm(W, x.reshape(batch, channels, height * width), self.bias, self.activation)
        else:  # every pixel of every image as one token
            tokens = x.transpose(0, 1).reshape(channels, batch * height * width)
            out = spmm(W, tokens, self.bias, self.activation)
            out = out.view(self.out_features, batch, height * width).transpose(0, 1)
        out = out.reshape(batch, self.out_features, height, width)
        return out[0] if unbatched else out

    def to_dense(self) -> torch.Tensor:
        """The dense weight (out_channels, in_channels, 1, 1) an nn.Conv2d would hold."""
        return self.dense_weight()[:, :, None, None]

    def to_conv(self) -> nn.Conv2d:
        """An nn.Conv2d with the same (pruned) weight and bias (the activation is not included)."""
        return self._filled(
            nn.Conv2d(
                self.in_features,
                self.out_features,
                1,
                bias=self.bias is not None,
                device=self.values.device,
                dtype=self.values.dtype,
            )
        )

    def extra_repr(self) -> str:
        act = f", activation={self.activation}" if self.activation else ""
        return self._sparse_repr().replace("_features", "_channels") + act
