"""MobileNetV1 (Howard et al. 2017) with a width multiplier, and its 90%-sparse twin.

Depthwise 3x3 convolutions are nn.Conv2d(groups=channels) + BatchNorm + ReLU; pointwise 1x1
convolutions + BatchNorm + ReLU are what `sparsify_` turns into SparseConv2d. For inference,
`mobilenet_pair` calibrates BatchNorm statistics on random images, folds every BatchNorm into
the convolution before it (the sparse model after pruning, with its own statistics) and fuses
the ReLU after each sparse pointwise convolution into the kernel's epilogue. In the sparse model
each depthwise convolution + ReLU also becomes one DepthwiseConv2d (bias and ReLU fused), which
runs `sparsekernels.ops.depthwise_conv2d`: our kernel where kernels/tuning.py says it beats cuDNN,
cuDNN otherwise. The dense model stays plain PyTorch (the baseline).

Example:
    >>> sparse, dense = mobilenet_pair(width=0.25, sparsity=0.9, resolution=32)
    >>> sparse(torch.randn(2, 3, 32, 32)).shape
    torch.Size([2, 1000])
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..nn import DepthwiseConv2d, SparseConv2d
from ..prune import sparsify_

# (output channels, stride) of the 13 depthwise-separable blocks, before the width multiplier.
BLOCKS = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)]
BLOCKS += [(512, 1)] * 5 + [(1024, 2), (1024, 1)]


def channels(c: int, width: float) -> int:
    """c * width rounded to a multiple of 8 (as the reference implementations do)."""
    return max(8, int(c * width + 4) // 8 * 8)


class Separable(nn.Module):
    """Depthwise 3x3 + BN + ReLU, then pointwise 1x1 + BN + ReLU."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.dw = nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False)
        self.bn1, self.act1 = nn.BatchNorm2d(cin, momentum=None), nn.ReLU()
        self.pw = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn2, self.act2 = nn.BatchNorm2d(cout, momentum=None), nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act1(self.bn1(self.dw(x)))
        return self.act2(self.bn2(self.pw(x)))


class MobileNetV1(nn.Module):
    def __init__(self, width: float = 1.0, classes: int = 1000):
        super().__init__()
        cin = channels(32, width)
        stem = [nn.Conv2d(3, cin, 3, 2, 1, bias=False), nn.BatchNorm2d(cin, momentum=None)]
        self.stem = nn.Sequential(*stem, nn.ReLU())
        blocks = []
        for c, stride in BLOCKS:
            blocks.append(Separable(cin, channels(c, width), stride))
            cin = channels(c, width)
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.head(x.mean((2, 3)))


@torch.no_grad()
def calibrate_(model: nn.Module, images: torch.Tensor) -> None:
    """Set every BatchNorm's running statistics to those of `images` (one pass, momentum=None)."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
    model.train()
    model(images)
    model.eval()


@torch.no_grad()
def fold_(model: nn.Module, *, depthwise: bool = False) -> None:
    """Fold each BatchNorm into the convolution before it (eval semantics) and drop it; fuse
    the ReLU after a SparseConv2d into its epilogue. With `depthwise`, also replace each
    block's depthwise convolution + ReLU by a DepthwiseConv2d with the ReLU fused."""
    pairs = []  # every (parent, conv, BatchNorm's name), checked before anything changes
    for parent in list(model.modules()):
        names = list(parent._modules)
        for conv_name, bn_name in zip(names, names[1:], strict=False):
            conv, bn = parent._modules[conv_name], parent._modules[bn_name]
            if isinstance(bn, nn.BatchNorm2d) and isinstance(conv, (nn.Conv2d, SparseConv2d)):
                if isinstance(conv, SparseConv2d) and conv.format != "csr":
                    raise ValueError(
                        f"folding BatchNorm into an N:M SparseConv2d is not supported "
                        f"({conv_name} before {bn_name}); nothing was folded"
                    )
                pairs.append((parent, conv, bn_name))
    for parent, conv, bn_name in pairs:
        _fold(conv, parent._modules[bn_name])
        parent._modules[bn_name] = _in_mode_of(nn.Identity(), parent._modules[bn_name])
    for parent in list(model.modules()):
        if isinstance(parent, Separable) and isinstance(parent.pw, SparseConv2d):
            parent.pw.activation, parent.act2 = "relu", _in_mode_of(nn.Identity(), parent.act2)
        if depthwise and isinstance(parent, Separable) and isinstance(parent.dw, nn.Conv2d):
            fused = DepthwiseConv2d.from_conv(parent.dw, "relu")
            parent.dw = _in_mode_of(fused, parent.dw)
            parent.act1 = _in_mode_of(nn.Identity(), parent.act1)


def _in_mode_of(new: nn.Module, old: nn.Module) -> nn.Module:
    """`new` in the training mode of the module it replaces."""
    return new.train(old.training)


def _fold(conv: nn.Module, bn: nn.BatchNorm2d) -> None:
    scale = bn.weight / (bn.running_var + bn.eps).sqrt()
    bias = conv.bias if conv.bias is not None else torch.zeros_like(bn.running_mean)
    shift = bn.bias + (bias - bn.running_mean) * scale
    if isinstance(conv, SparseConv2d):  # scale each stored value by its row's factor
        rows = torch.repeat_interleave(
            torch.arange(conv.out_features, device=scale.device), conv.row_offsets.diff()
        )
        conv.values.mul_(scale[rows].to(conv.values.dtype))
    else:
        conv.weight.mul_(scale.view(-1, 1, 1, 1).to(conv.weight.dtype))
    conv.bias = nn.Parameter(shift.to(bias.dtype if conv.bias is not None else scale.dtype))


def mobilenet_pair(
    width: float = 1.0,
    sparsity: float = 0.9,
    *,
    resolution: int = 224,
    calibration_batch: int = 8,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    device=None,
) -> tuple[MobileNetV1, MobileNetV1]:
    """(sparse, dense) inference models from one initialisation, BatchNorm folded: the sparse
    one has its pointwise convolutions pruned to `sparsity` (stem, depthwise and head dense) and
    its depthwise convolutions as DepthwiseConv2d (see fold_)."""
    torch.manual_seed(seed)
    dense = MobileNetV1(width).to(device)
    images = torch.randn(calibration_batch, 3, resolution, resolution, device=device)
    calibrate_(dense, images)
    sparse = copy.deepcopy(dense)
    sparsify_(sparse, sparsity, filter_fn=lambda m, name: isinstance(m, nn.Conv2d))
    calibrate_(sparse, images)  # pruning shrinks activations: the pruned model's own statistics
    for model in (dense, sparse):
        fold_(model, depthwise=model is sparse)
        model.to(dtype)
    return sparse, dense
