"""DepthwiseConv2d: MobileNet's depthwise 3x3 convolution with bias and activation fused.

A dense layer (the weight has 9 values per channel; nothing to prune) that runs through
`sparsekernels.ops.depthwise_conv2d`, so dispatch picks our kernel where it beats cuDNN.
"""

from __future__ import annotations

import math

import torch
from torch import fx, nn

from .. import _checks
from ..ops.depthwise import depthwise_conv2d
from ._fx_leaf import traced_call


def depthwise_unsupported_reason(conv: nn.Conv2d) -> str | None:
    """Why `conv` is not a depthwise 3x3 convolution DepthwiseConv2d can replace, or None."""
    if conv.groups != conv.in_channels or conv.out_channels != conv.in_channels:
        return (
            f"groups={conv.groups} with {conv.in_channels} -> {conv.out_channels} channels "
            "is not depthwise (groups = in = out channels)"
        )
    if tuple(conv.kernel_size) != (3, 3):
        return f"kernel {tuple(conv.kernel_size)} is not 3x3"
    if isinstance(conv.padding, str) or tuple(conv.padding) != (1, 1):
        return f"padding {conv.padding} is not 1"
    if conv.padding_mode != "zeros":
        return f"padding_mode {conv.padding_mode!r} is not 'zeros'"
    if tuple(conv.dilation) != (1, 1):
        return f"dilation {tuple(conv.dilation)} is not 1"
    if tuple(conv.stride) not in ((1, 1), (2, 2)):
        return f"stride {tuple(conv.stride)} is not 1 or 2"
    return None


class DepthwiseConv2d(nn.Module):
    """act(conv2d(x, weight, bias, stride, padding=1, groups=channels)) on (N, C, H, W) input.

    Example:
        >>> layer = DepthwiseConv2d(32, stride=2, activation="relu")
        >>> layer(torch.randn(2, 32, 15, 15)).shape
        torch.Size([2, 32, 8, 8])
    """

    def __init__(
        self,
        channels: int,
        stride: int = 1,
        bias: bool = True,
        activation: str | None = None,
        *,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.channels = _checks.positive_int("channels", channels)
        if not _checks.is_int(stride):
            raise TypeError(f"stride must be an int, got {type(stride).__name__}")
        if stride not in (1, 2):
            raise ValueError(f"stride must be 1 or 2, got {stride!r}")
        self.stride = int(stride)  # (a NumPy integer kept as a Python int: repr, state)
        name = _checks.activation(activation)
        self.activation = None if name == "none" else name
        kw = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(self.channels, 1, 3, 3, **kw))
        self.bias = nn.Parameter(torch.empty(self.channels, **kw)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """nn.Conv2d's initialisation (fan-in 9)."""
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            nn.init.uniform_(self.bias, -1 / 3, 1 / 3)

    @classmethod
    def from_conv(cls, conv: nn.Conv2d, activation: str | None = None) -> DepthwiseConv2d:
        """A copy of a depthwise 3x3 nn.Conv2d (padding 1, stride 1 or 2), with `activation`
        ("relu", "gelu") fused after the bias."""
        if not isinstance(conv, nn.Conv2d):
            raise TypeError(f"conv must be an nn.Conv2d, got {type(conv).__name__}")
        reason = depthwise_unsupported_reason(conv)
        if reason is not None:
            raise ValueError(f"conv must be a depthwise 3x3 convolution, padding 1: {reason}")
        w = conv.weight
        layer = cls(
            conv.in_channels,
            conv.stride[0],
            conv.bias is not None,
            activation,
            device=w.device,
            dtype=w.dtype,
        )
        with torch.no_grad():
            layer.weight.copy_(w)
            if conv.bias is not None:
                layer.bias.copy_(conv.bias)
        layer.weight.requires_grad_(w.requires_grad)
        if conv.bias is not None:
            layer.bias.requires_grad_(conv.bias.requires_grad)
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(x, fx.Proxy):  # (torch.fx records the layer whole)
            return traced_call(self, x)
        _checks.tensor("x", x)
        _checks.ndim("x", x, [3, 4])
        if x.shape[-3] != self.channels:
            raise ValueError(
                f"x must have {self.channels} channels (dimension -3), got shape {tuple(x.shape)}"
            )
        if x.dim() == 3:
            return self.forward(x.unsqueeze(0))[0]
        return depthwise_conv2d(x, self.weight, self.bias, self.stride, self.activation)

    def to_conv(self) -> nn.Conv2d:
        """An nn.Conv2d with the same weight and bias (the activation is not included)."""
        conv = nn.Conv2d(
            self.channels,
            self.channels,
            3,
            self.stride,
            1,
            groups=self.channels,
            bias=self.bias is not None,
            device=self.weight.device,
            dtype=self.weight.dtype,
        )
        with torch.no_grad():
            conv.weight.copy_(self.weight)
            if self.bias is not None:
                conv.bias.copy_(self.bias)
        return conv

    def extra_repr(self) -> str:
        act = f", activation={self.activation}" if self.activation else ""
        return f"{self.channels}, stride={self.stride}, bias={self.bias is not None}{act}"
