"""sddmm(X, Y, pattern) = (X @ Y^T) at pattern's positions, forward and backward."""

import pytest
import torch

import sparsekernels as sk
from _helpers import ALL_DTYPES, assert_close, randn, random_csr, random_nm


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(37, 29, 45), (1, 9, 1), (20, 1, 30), (5, 700, 6)])
@pytest.mark.parametrize("backend", [None, "dense"])
def test_forward(dtype, shape, backend, gen):
    M, K, N = shape
    P = random_csr(M, N, 0.3, gen, dtype)
    X, Y = randn(M, K, gen=gen, dtype=dtype), randn(N, K, gen=gen, dtype=dtype)
    S = sk.sddmm(X, Y, P, backend=backend)
    assert isinstance(S, sk.CSRMatrix) and S.dtype == dtype and S.nnz == P.nnz
    rows, cols = P.pattern.row_indices(), P.column_indices.long()
    want = (X.double() @ Y.double().t())[rows, cols]
    bound = (X.double().abs() @ Y.double().abs().t())[rows, cols]
    assert_close(S.values, want, bound, dtype)


@pytest.mark.parametrize("backend", [None, "dense"])
def test_batched(backend, gen):
    P = random_csr(12, 10, 0.4, gen)
    X, Y = randn(3, 12, 8, gen=gen), randn(3, 10, 8, gen=gen)
    S = sk.sddmm(X, Y, P, backend=backend)
    assert S.batch == 3
    torch.testing.assert_close(S.to_dense(), (X @ Y.transpose(1, 2)) * (P.to_dense() != 0))


def test_backward(gen):
    P = random_csr(9, 7, 0.4, gen)
    X, Y = randn(9, 5, gen=gen).requires_grad_(), randn(7, 5, gen=gen).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, y: sk.sddmm(x, y, P).values, (X, Y))
    Xb, Yb = randn(2, 9, 5, gen=gen).requires_grad_(), randn(7, 5, gen=gen).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, y: sk.sddmm(x, y, P).values, (Xb, Yb))


def test_dense_backend_rule():
    """The whole product on cuBLAS for a weight gradient's shapes (half precision from 8%
    stored at K < 128 and 2% from 128, fp32 from 25%, K >= 64); never for many attention-sized
    products or short K; one matrix, a weight's gradient, up to 2^30 cells."""
    from sparsekernels.ops import _dispatch

    def chosen(dtype, k, density, cells, batch=1):
        facts = {"k": k, "batch": batch, "rows": 512, "density": density, "cells": cells}
        return _dispatch.choose("sddmm_csr", _dispatch.Problem(torch.device("cuda"), dtype, facts))

    bf16, fp32 = torch.bfloat16, torch.float32
    assert chosen(bf16, 8192, 0.1, 512 * 2048) == "dense"
    assert chosen(bf16, 8192, 0.01, 512 * 2048) == "triton"
    assert chosen(bf16, 64, 0.05, 512 * 2048) == "triton"  # short K: from 8%
    assert chosen(bf16, 64, 0.1, 512 * 2048) == "dense"
    assert chosen(fp32, 8192, 0.1, 512 * 2048) == "triton"
    assert chosen(fp32, 8192, 0.3, 512 * 2048) == "dense"
    assert chosen(bf16, 32, 0.1, 512 * 2048) == "triton"
    assert chosen(bf16, 64, 0.1, 8 * 8192 * 8192, batch=8) == "triton"  # attention scores
    assert chosen(bf16, 2048, 0.25, 28672 * 8192) == "dense"  # one large weight's gradient
    assert chosen(bf16, 2048, 0.25, 2**31) == "triton"  # past 2^30 cells


def test_dense_backend_on_cpu():
    """On the CPU the only sparse SDDMM is the float64 reference, whose gathers cost seconds
    for a 2:4 weight gradient: the BLAS product takes it from 2% stored, while it fits."""
    from sparsekernels.ops import _dispatch

    def chosen(op, density, cells, **facts):
        facts = {"k": 640, "batch": 1, "rows": 512, "density": density, "cells": cells, **facts}
        return _dispatch.choose(op, _dispatch.Problem(torch.device("cpu"), torch.float32, facts))

    assert chosen("sddmm_csr", 0.1, 512 * 384) == "dense"
    assert chosen("sddmm_csr", 0.01, 512 * 384) == "reference"
    assert chosen("sddmm_csr", 0.5, 2**28) == "reference"  # the whole product would not fit
    assert chosen("sddmm_nm", 0.5, 512 * 384, pattern=(2, 4, 1, 1)) == "dense"


@pytest.mark.parametrize("pattern", [(2, 8, 1, 1), (1, 4, 4, 1), (4, 16, 2, 2), (3, 8, 1, 1)])
def test_nm_kept_positions_dense_and_reference(pattern, gen):
    """sddmm_nm (the N:M weight gradient) at every kept position, both backends."""
    from sparsekernels.ops.sddmm import sddmm_nm_raw

    n, m, vector, block = pattern
    W = random_nm(2 * vector + 1, 3 * m, n, m, gen, vector, block)
    x, y = randn(W.shape[0], 7, gen=gen), randn(W.shape[1], 7, gen=gen)
    want = (x @ y.t()) * (W.to_dense() != 0)
    for backend in ("reference", "dense"):
        got = sddmm_nm_raw(W.indices, x, y, n, m, vector, block, backend=backend)
        dense = W.with_values(got).to_dense()
        torch.testing.assert_close(dense, want, rtol=1e-12, atol=1e-12, msg=backend)


def test_dense_positions_cached_per_pattern(gen):
    from sparsekernels.ops import _dense

    P = random_csr(9, 7, 0.4, gen)
    first = _dense.flat_positions(P.row_offsets, P.column_indices, 7)
    assert _dense.flat_positions(P.row_offsets, P.column_indices, 7) is first
    rows = P.pattern.row_indices()
    assert torch.equal(first, rows * 7 + P.column_indices.long())
    P.column_indices.add_(0)  # an in-place edit: recomputed
    second = _dense.flat_positions(P.row_offsets, P.column_indices, 7)
    assert second is not first
    assert _dense.flat_positions(P.row_offsets.clone(), P.column_indices, 7) is not second
