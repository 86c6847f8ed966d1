"""Forward-mode rules (torch.func.jvp, jacfwd, hessian) for the ops' torch.func twins
(ops/_library._func_twin), from the tensors their backward saved. An SpMM is linear in the
weight's values, in B and in the bias, and an SDDMM in each of X and Y, so a tangent is the
same product of the tangents (through the activation's derivative, as backward applies it);
the row softmax's is p * (s dv - the row's sum of p * s dv); the depthwise convolution is
linear in x, its weight and its bias too."""

from __future__ import annotations

import torch

from .. import reference

Tensor = torch.Tensor


def _sum(terms: list, zeros) -> Tensor:
    if not terms:
        return zeros()
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def spmm_csr_jvp(ctx, *tangents) -> Tensor:
    from ._library import _activation_grad, _batch
    from .spmm import spmm_csr_raw

    ro, ci, values, b, bias, order, _, _, _, out = ctx.saved_tensors
    d_values, d_b, d_bias = tangents[2:5]
    shape = (*_batch(values.shape[:-1], b.shape[:-2]), ro.shape[0] - 1, b.shape[-1])

    def product(v, x, with_bias=None):
        return spmm_csr_raw(ro, ci, v, x, with_bias, order, "none", ctx.backend)

    terms = [product(d_values, b)] if d_values is not None else []
    if d_b is not None:
        terms.append(product(values, d_b))
    if d_bias is not None:
        terms.append(d_bias[:, None].expand(shape))
    total = _sum(terms, lambda: b.new_zeros(shape))
    return _activation_grad(total, out, lambda: product(values, b, bias), ctx.activation)


def spmm_nm_jvp(ctx, *tangents) -> Tensor:
    from ._library import _activation_grad
    from .spmm import spmm_nm_raw

    values, indices, b, bias, out = ctx.saved_tensors
    d_values, _, d_b, d_bias = tangents[:4]
    n, m = ctx.args[:2]
    rows = values.shape[1] // n * m if ctx.transpose else values.shape[0]

    def product(v, x, with_bias=None):
        return spmm_nm_raw(v, indices, x, with_bias, "none", *ctx.args, ctx.transpose, ctx.backend)

    terms = [product(d_values, b)] if d_values is not None else []
    if d_b is not None:
        terms.append(product(values, d_b))
    if d_bias is not None:
        terms.append(d_bias[:, None].expand(rows, b.shape[-1]))
    total = _sum(terms, lambda: b.new_zeros(rows, b.shape[-1]))
    return _activation_grad(total, out, lambda: product(values, b, bias), ctx.activation)


def sddmm_csr_jvp(ctx, *tangents) -> Tensor:
    from ._library import _batch
    from .sddmm import sddmm_csr_raw

    ro, ci, x, y = ctx.saved_tensors[:4]
    d_x, d_y = tangents[2:4]
    terms = [sddmm_csr_raw(ro, ci, d_x, y, hint=ctx.backend)] if d_x is not None else []
    if d_y is not None:
        terms.append(sddmm_csr_raw(ro, ci, x, d_y, hint=ctx.backend))
    shape = (*_batch(x.shape[:-2], y.shape[:-2]), ci.shape[0])
    return _sum(terms, lambda: x.new_zeros(shape))


def sddmm_nm_jvp(ctx, *tangents) -> Tensor:
    from .sddmm import sddmm_nm_raw

    indices, x, y = ctx.saved_tensors
    d_x, d_y = tangents[1:3]
    terms = [sddmm_nm_raw(indices, d_x, y, *ctx.args, hint=ctx.backend)] if d_x is not None else []
    if d_y is not None:
        terms.append(sddmm_nm_raw(indices, x, d_y, *ctx.args, hint=ctx.backend))
    n, m = ctx.args[:2]
    return _sum(terms, lambda: x.new_zeros(x.shape[0], y.shape[0] // m * n))


def softmax_jvp(ctx, *tangents) -> Tensor:
    row_offsets, probs = ctx.saved_tensors
    d_values = tangents[1]
    if d_values is None:
        return torch.zeros_like(probs)
    acc = reference.accumulate_dtype(probs.dtype)
    p, dv = probs.to(acc), d_values.to(acc) * ctx.scale
    return (p * (dv - reference.row_sums_at_entries(row_offsets, p * dv))).to(probs.dtype)


def softmax_backward_jvp(ctx, *tangents) -> Tensor:
    """The row softmax's backward, s p (g - S(p g)) with S the row sums at the entries, is
    bilinear in p and g: its tangent s (dp (g - S(p g)) + p (dg - S(dp g + p dg)))."""
    row_offsets, probs, grad = ctx.saved_tensors
    d_probs, d_grad = tangents[1:3]
    if d_probs is None and d_grad is None:
        return torch.zeros_like(probs)
    acc = reference.accumulate_dtype(probs.dtype)
    p, g = probs.to(acc), grad.to(acc)
    dp = torch.zeros_like(p) if d_probs is None else d_probs.to(acc)
    dg = torch.zeros_like(g) if d_grad is None else d_grad.to(acc)
    sums = reference.row_sums_at_entries
    tangent = dp * (g - sums(row_offsets, p * g)) + p * (dg - sums(row_offsets, dp * g + p * dg))
    return (ctx.scale * tangent).to(probs.dtype)


def depthwise_jvp(ctx, *tangents) -> Tensor:
    from ._library import _activation_grad, call
    from .depthwise import _depthwise_op

    x, weight, bias, out = ctx.saved_tensors
    d_x, d_weight, d_bias = tangents[:3]

    def conv(a, w, with_bias=None):
        return call(_depthwise_op, a, w, with_bias, ctx.stride, "none", ctx.backend)

    terms = [conv(d_x, weight)] if d_x is not None else []
    if d_weight is not None:
        terms.append(conv(x, d_weight))
    if d_bias is not None:
        terms.append(d_bias[:, None, None].expand(out.shape))
    total = _sum(terms, lambda: torch.zeros_like(out))
    return _activation_grad(total, out, lambda: conv(x, weight, bias), ctx.activation)
