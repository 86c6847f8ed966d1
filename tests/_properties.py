"""Shared strategies, data and checks of the property tests (test_properties.py: the ops and
formats through the reference backend; test_properties_kernels.py: the Triton kernels in the
interpreter and on the GPU). Examples are derandomized; each draws fresh random data from its
own seed, never zero."""

from __future__ import annotations

import math

import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import sparsekernels as sk
from _helpers import (
    ALL_DTYPES,
    assert_close,
    dense_attention,
    dense_softmax,
    dense_spmm,
    spmm_bound,
    stored_mask,
)

PROPERTY_WARNINGS = (
    "ignore:Sparse (CSR tensor support|invariant checks)",
    "ignore:(invalid value|divide by zero) encountered:RuntimeWarning",
)


def examples(count: int):
    """Hypothesis settings: `count` derandomized examples, no deadline."""
    return settings(
        max_examples=count,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )


F64 = torch.float64
dims = st.one_of(st.sampled_from([0, 1]), st.integers(2, 12))
small = st.integers(0, 4)
densities = st.one_of(st.sampled_from([0.0, 0.02, 1.0]), st.floats(0.0, 1.0))
dtypes = st.sampled_from(ALL_DTYPES)
seeds = st.integers(0, 2**32 - 1)
activations = st.sampled_from([None, "relu", "gelu"])


@st.composite
def nm_patterns(draw, max_m: int = 32):
    """(n, m, vector, block) with block | m, block | n and 1 <= n < m."""
    m = draw(st.sampled_from([v for v in (2, 4, 8, 16, 32) if v <= max_m]))
    block = draw(st.sampled_from([b for b in (1, 2, 4, 8) if m % b == 0 and m // b >= 2]))
    n = block * draw(st.integers(1, m // block - 1))
    vector = draw(st.sampled_from([1, 2, 3, 4, 8]))
    return n, m, vector, block


# --------------------------------------------------------------------------- data
def seeded(seed: int) -> torch.Generator:
    """A CPU generator from an example's seed."""
    return torch.Generator().manual_seed(seed)


def fresh(*shape, g, dtype=F64) -> torch.Tensor:
    """Standard normal values pushed away from zero: never zero, even in half precision."""
    x = torch.randn(*shape, generator=g, dtype=F64)
    return (x + 0.1 * x.sign()).to(dtype)


def make_csr(rows, cols, density, g, dtype=F64, batch=None) -> sk.CSRMatrix:
    mask = torch.rand(rows, cols, generator=g) < density
    A = sk.CSRMatrix.from_dense(fresh(rows, cols, g=g, dtype=dtype), mask=mask)
    return A if batch is None else A.with_values(fresh(batch, A.nnz, g=g, dtype=dtype))


def make_nm(rows, groups, pattern, g, dtype=F64) -> tuple[sk.NMMatrix, torch.Tensor]:
    """An N:M matrix and its dense float64 twin (pruned with the library's magnitude mask)."""
    n, m, vector, block = pattern
    w = fresh(rows, groups * m, g=g)
    mask = sk.prune.nm_mask(w, n, m, vector=vector, block=block)
    W = sk.NMMatrix.from_dense((w * mask).to(dtype), n, m, vector, block, mask=mask)
    return W, mask


def act_bound(bound: torch.Tensor, activation) -> torch.Tensor:
    """GELU's slope reaches 1.13: errors before it grow by at most that (x2 for its rounding)."""
    return bound * 2 if activation == "gelu" else bound


def check_spmm(A, B, bias, activation, backend=None):
    """sk.spmm against float64 dense math (batched A or B too)."""
    got = sk.spmm(A, B, bias, activation, backend=backend)
    A_dense = A.to_dense()
    if A_dense.dim() == 3 or B.dim() == 3:
        want = sk.reference.apply_activation(A_dense.double() @ B.double(), activation or "none")
        bound = A_dense.double().abs() @ B.double().abs()
    else:
        want = dense_spmm(A_dense, B, bias, activation)
        bound = spmm_bound(A_dense, B)
        if bias is not None:
            bound = bound + bias.double().abs()[:, None]
    assert got.dtype == B.dtype and got.shape == want.shape
    assert_close(got, want, act_bound(bound, activation), B.dtype)


def check_softmax(S, scale, backend=None):
    """sk.sparse_softmax against float64 dense math over the stored entries."""
    got = sk.sparse_softmax(S, scale, backend=backend)
    want = dense_softmax(S, scale)
    floor = torch.finfo(S.dtype).smallest_normal  # half-precision subnormals round coarsely
    assert got.pattern is S.pattern and got.dtype == S.dtype
    assert_close(got.values, want, want + floor, S.dtype)


def check_attention(q, k, v, P, scale, backend=None):
    """sk.sparse_attention against float64 dense attention masked by P."""
    got = sk.sparse_attention(q, k, v, P, scale, backend=backend)
    d = q.shape[-1]
    s = scale if scale is not None else (1 / math.sqrt(d) if d else 1.0)
    keep = stored_mask(P)
    want = dense_attention(q, k, v, keep, s)
    # Rounding the scores moves each probability by ~ u * |s| * sum_d |q_d k_d|, the
    # probabilities and the output by ~ u each: bound = sum_j p_j |v_j| * (3 + 2 z_max).
    zmax = (abs(s) * q.double().abs() @ k.double().abs().transpose(-1, -2)).masked_fill(~keep, 0)
    zmax = zmax.amax(-1, keepdim=True) if zmax.shape[-1] else zmax.sum(-1, keepdim=True)
    probs = dense_attention(q, k, torch.eye(k.shape[-2], dtype=F64, device=k.device), keep, s)
    bound = (probs @ v.double().abs()) * (3 + 2 * zmax)
    assert got.shape == want.shape and got.dtype == q.dtype
    assert_close(got, want, bound, q.dtype)
