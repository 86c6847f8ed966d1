"""A training step's linear on the dense route, kept densified from its forward to its backward.

Where linear takes the `dense` backend with a gradient (the Sparse Transformer's linears at
8192 tokens: densify, then cuBLAS), its backward densified the weight a second time for x's
gradient and decided its routes again. A repeat eager call (ops/_eager_plans.py) whose weight
is no larger than x instead runs one autograd.Function: forward densifies W and multiplies,
keeping the dense W beside x; backward multiplies the output's gradient by it (x's gradient),
takes the whole product G^T x at the stored positions (the values' gradient, as the `dense`
SDDMM does) and the bias's as bias_grad does. The same products, one densify and one backend
choice less a step, for at most x's size more memory held to the backward (nothing more where
W is larger: then the twin's path, which keeps only the sparse weight).
"""

from __future__ import annotations

import torch

from .._fill_streams import before_launch
from . import _dense, _launch_plans
from ._autocast import backward_without_autocast
from ._bias_grad import bias_grad
from ._identity_cache import version

# Kept densified where W has at most this many elements per element of x (x is kept anyway).
KEPT_WEIGHT_PER_INPUT = 1.0


def takes(x: torch.Tensor, W) -> bool:
    """Whether this call keeps W dense to its backward: not larger than x, and not where the
    dense backend widens half precision (the CPU's)."""
    return W.shape[0] * W.shape[1] <= KEPT_WEIGHT_PER_INPUT * x.numel() and not (
        _dense.widens_on_cpu(x)
    )


MOST_STREAMS = 4  # densify launch plans a call's plan records, one a stream


def linear(
    x: torch.Tensor, W, columns: torch.Tensor, bias: torch.Tensor | None, launches=None
) -> torch.Tensor:
    """x @ W^T + bias for a CSRMatrix W whose column indices as the dense backend reads them are
    `columns`: (..., out_features), contiguous. `launches` (a dict an eager plan keeps): with
    _launch_plans.TRAINING, the densify's launch recorded there and replayed, the values
    followed as an input (an optimizer step changes them in place every step)."""
    tokens = x.reshape(-1, W.shape[1])
    out = _DensifiedLinear.apply(tokens, W.values, bias, W.row_offsets, columns, launches)
    return out.view(*x.shape[:-1], W.shape[0])


class _DensifiedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, values, bias, row_offsets, columns, launches=None):
        before_launch(x.device)  # (after fills of the pattern's caches on other streams)

        def densify():
            return _dense.densify_csr(row_offsets, columns, values, x.shape[1])

        if launches is None or not _launch_plans.TRAINING:
            weight = densify()
        else:
            state = ((id(row_offsets), version(row_offsets)), (id(columns), version(columns)))
            weight = _launch_plans.replayed(launches, (values,), state, densify, MOST_STREAMS)
        out = x @ weight.t() if bias is None else torch.addmm(bias, x, weight.t())
        ctx.save_for_backward(x, weight, values, row_offsets, columns)
        return out

    @staticmethod
    @backward_without_autocast
    def backward(ctx, grad):
        x, weight, values, row_offsets, columns = ctx.saved_tensors
        before_launch(x.device)
        if torch.is_grad_enabled():  # (create_graph: x's gradient depends on the values too)
            weight = _DensifyCsr.apply(values, row_offsets, columns, x.shape[1])
        d_x = d_values = d_bias = None
        if ctx.needs_input_grad[0]:
            d_x = grad @ weight
        if ctx.needs_input_grad[1]:
            d_values = _at_stored(grad.t() @ x, row_offsets, columns)
        if ctx.needs_input_grad[2]:
            d_bias = bias_grad(grad.t())
        return d_x, d_values, d_bias, None, None, None


class _DensifyCsr(torch.autograd.Function):
    """The dense weight as a function of its values, for a gradient of the gradient."""

    @staticmethod
    def forward(ctx, values, row_offsets, columns, cols):
        ctx.save_for_backward(row_offsets, columns)
        return _dense.densify_csr(row_offsets, columns, values, cols)

    @staticmethod
    def backward(ctx, grad):
        row_offsets, columns = ctx.saved_tensors
        return _at_stored(grad, row_offsets, columns), None, None, None


def _at_stored(dense: torch.Tensor, row_offsets, columns) -> torch.Tensor:
    """A dense (M, K) gradient at the pattern's stored positions, in the values' order (the
    dense SDDMM's gather)."""
    flat = _dense.flat_positions(row_offsets, columns, dense.shape[1])
    return dense.flatten().index_select(0, flat)
