"""The bad-input corpus, handled cases: each returns the correct result, checked against
float64 dense math (registry and builders in _bad_input_corpus.py)."""

from __future__ import annotations

import math

import pytest
import torch

import sparsekernels as sk
from _bad_input_corpus import F64, HANDLED, QUIET, REJECTED, csr, handles, image, nm, qkv, seed_for
from _helpers import (
    assert_close,
    dense_attention,
    dense_sddmm,
    dense_softmax,
    dense_spmm,
    randn,
    spmm_bound,
    stored_mask,
)

pytestmark = QUIET


# =============================================================================== handled
def check_spmm(A, B, bias=None, activation=None, backend=None) -> torch.Tensor:
    got = sk.spmm(A, B, bias, activation, backend=backend)
    A_dense = A.to_dense()
    bound = spmm_bound(A_dense, B)
    if bias is not None:
        bound = bound + bias.double().abs()[:, None]
    assert got.shape == (A.shape[0], B.shape[-1]) and got.dtype == B.dtype
    assert_close(got, dense_spmm(A_dense, B, bias, activation), bound, B.dtype)
    return got


def check_sddmm(X, Y, P, backend=None) -> sk.CSRMatrix:
    got = sk.sddmm(X, Y, P, backend=backend)
    assert got.pattern is P.pattern
    assert_close(got.values, *dense_sddmm(X, Y, P), X.dtype)
    return got


def check_attention(q, k, v, P, scale=None, backend=None) -> torch.Tensor:
    got = sk.sparse_attention(q, k, v, P, scale, backend=backend)
    d = q.shape[-1]
    s = scale if scale is not None else (1 / math.sqrt(d) if d else 1.0)
    want = dense_attention(q, k, v, stored_mask(P), s)
    torch.testing.assert_close(got.double(), want, rtol=1e-12, atol=1e-12)
    return got


# ------------------------------------------------------------ strided, transposed, expanded
@handles(triton=True)
def spmm_csr_B_transposed(g, be):
    check_spmm(csr(g, 9, 7), randn(4, 7, gen=g).t(), backend=be)


@handles(triton=True)
def spmm_csr_B_expanded(g, be):
    B = randn(7, 1, gen=g).expand(7, 5)  # stride 0 along N
    check_spmm(csr(g, 9, 7), B, randn(9, gen=g), "gelu", backend=be)


@handles()
def spmm_csr_B_column_slice(g, be):
    check_spmm(csr(g, 9, 7), randn(7, 10, gen=g)[:, 1::2], backend=be)


@handles()
def spmm_csr_B_batch_transposed(g, be):
    A = csr(g, 9, 7)
    B = randn(2, 4, 7, gen=g).transpose(1, 2)
    got = sk.spmm(A, B, backend=be)
    assert_close(got, A.to_dense() @ B, A.to_dense().abs() @ B.abs(), F64)


@handles(triton=True)
def spmm_csr_values_strided(g, be):
    A = csr(g, 9, 7)
    check_spmm(A.with_values(randn(2 * A.nnz, gen=g)[::2]), randn(7, 3, gen=g), backend=be)


@handles()
def spmm_csr_batched_values_transposed(g, be):
    A = csr(g, 9, 7)
    V = A.with_values(randn(A.nnz, 3, gen=g).t())  # (3, nnz) with stride (1, 3)
    B = randn(7, 4, gen=g)
    got = sk.spmm(V, B, backend=be)
    assert_close(got, V.to_dense() @ B, V.to_dense().abs() @ B.abs(), F64)


@handles()
def csr_indices_strided(g, be):
    A = csr(g, 9, 7)
    ro = torch.stack([A.row_offsets, -A.row_offsets], 1)[:, 0]
    ci = torch.stack([A.column_indices, -A.column_indices], 1)[:, 0]
    assert not ro.is_contiguous() and not ci.is_contiguous()
    B = sk.CSRMatrix(ro, ci, A.values, A.shape)
    assert torch.equal(B.to_dense(), A.to_dense())
    check_spmm(B, randn(7, 3, gen=g), backend=be)


@handles()
def csr_from_dense_transposed_and_expanded(g, be):
    dense = randn(5, 8, gen=g) * (torch.rand(5, 8, generator=g) < 0.5)
    assert torch.equal(sk.CSRMatrix.from_dense(dense.t()).to_dense(), dense.t())
    row = randn(1, 8, gen=g)
    assert torch.equal(sk.CSRMatrix.from_dense(row.expand(4, 8)).to_dense(), row.expand(4, 8))


@handles(triton=True)
def spmm_nm_values_transposed_layout(g, be):
    W = nm(g, 8, 16, 2, 8, vector=2)
    V = sk.NMMatrix(W.values.t().contiguous().t(), W.indices, W.shape, 2, 8, 2)
    assert not V.values.is_contiguous()
    check_spmm(V, randn(16, 5, gen=g), randn(8, gen=g), "relu", backend=be)


@handles(triton=True)
def spmm_nm_B_transposed(g, be):
    check_spmm(nm(g, 8, 16, 2, 8), randn(5, 16, gen=g).t(), backend=be)


@handles()
def linear_x_expanded(g, be):
    W = nm(g, 6, 8)
    x = randn(1, 8, gen=g).expand(4, 8)
    got = sk.linear(x, W, backend=be)
    assert_close(got, x @ W.to_dense().t(), x.abs() @ W.to_dense().abs().t(), F64)


@handles()
def linear_x_permuted_3d(g, be):
    W, bias = csr(g, 6, 8), randn(6, gen=g)
    x = randn(8, 3, 2, gen=g).permute(2, 1, 0)  # (2, 3, 8) with strides (1, 2, 6)
    got = sk.linear(x, W, bias, backend=be)
    want = x @ W.to_dense().t() + bias
    assert_close(got, want, x.abs() @ W.to_dense().abs().t() + bias.abs(), F64)


@handles(triton=True)
def sddmm_transposed_and_sliced(g, be):
    check_sddmm(randn(3, 9, gen=g).t(), randn(7, 6, gen=g)[:, ::2], csr(g, 9, 7), backend=be)


@handles()
def sddmm_X_expanded_batch(g, be):
    X = randn(1, 9, 3, gen=g).expand(4, 9, 3)
    check_sddmm(X, randn(7, 3, gen=g), csr(g, 9, 7), backend=be)


@handles(triton=True)
def softmax_values_strided(g, be):
    S = csr(g, 9, 7)
    S = S.with_values(randn(S.nnz, 2, gen=g)[:, 1])
    got = sk.sparse_softmax(S, 0.7, backend=be)
    torch.testing.assert_close(got.values, dense_softmax(S, 0.7), rtol=1e-12, atol=1e-12)


@handles()
def attention_transposed_q_expanded_k(g, be):
    q = randn(1, 2, 4, 6, gen=g).transpose(-1, -2)
    k = randn(1, 1, 5, 4, gen=g).expand(1, 2, 5, 4)
    check_attention(q, k, randn(1, 2, 5, 3, gen=g), csr(g), backend=be)


# ------------------------------------------------------------ empty and zero-sized
@handles()
def spmm_csr_zero_rows(g, be):
    check_spmm(csr(g, 0, 5), randn(5, 3, gen=g), randn(0, gen=g), "relu", backend=be)


@handles(triton=True)
def spmm_csr_zero_K_bias_gelu(g, be):
    bias = randn(4, gen=g)
    got = check_spmm(csr(g, 4, 0), randn(0, 3, gen=g), bias, "gelu", backend=be)
    assert torch.equal(got, torch.nn.functional.gelu(bias)[:, None].expand(4, 3))


@handles(triton=True)
def spmm_csr_zero_N(g, be):
    check_spmm(csr(g, 4, 5), randn(5, 0, gen=g), randn(4, gen=g), backend=be)


@handles(triton=True)
def spmm_csr_no_stored_entries(g, be):
    bias = randn(6, gen=g)
    got = check_spmm(csr(g, 6, 5, 0.0), randn(5, 3, gen=g), bias, "relu", backend=be)
    assert torch.equal(got, bias.relu()[:, None].expand(6, 3))


@handles()
def spmm_csr_batch_of_zero(g, be):
    A = csr(g, 6, 5)
    got = sk.spmm(A.with_values(randn(0, A.nnz, gen=g)), randn(5, 3, gen=g), backend=be)
    assert got.shape == (0, 6, 3)


@handles(triton=True)
def spmm_nm_zero_rows_K_N(g, be):
    for rows, cols, N in [(0, 8, 3), (4, 0, 3), (4, 8, 0)]:
        W = sk.NMMatrix.from_dense(torch.zeros(rows, cols, dtype=F64), 2, 4)
        check_spmm(W, randn(cols, N, gen=g), randn(rows, gen=g), "gelu", backend=be)


@handles()
def linear_no_tokens(g, be):
    W = nm(g, 6, 8)
    for x in (randn(0, 8, gen=g), randn(2, 0, 8, gen=g)):
        assert sk.linear(x, W, randn(6, gen=g), backend=be).shape == (*x.shape[:-1], 6)


@handles(triton=True)
def sddmm_zero_K(g, be):
    got = check_sddmm(randn(6, 0, gen=g), randn(5, 0, gen=g), csr(g), backend=be)
    assert torch.equal(got.values, torch.zeros_like(got.values))


@handles()
def sddmm_empty_pattern_and_rows(g, be):
    check_sddmm(randn(6, 3, gen=g), randn(5, 3, gen=g), csr(g, density=0.0), backend=be)
    check_sddmm(randn(0, 3, gen=g), randn(5, 3, gen=g), csr(g, 0, 5), backend=be)


@handles(triton=True)
def softmax_empty(g, be):
    for S in (csr(g, 0, 0), csr(g, 4, 5, 0.0), csr(g, 3, 0)):
        got = sk.sparse_softmax(S, backend=be)
        assert got.values.shape == (0,) and got.pattern is S.pattern


@handles(triton=True)
def attention_zero_sizes(g, be):
    check_attention(*qkv(g, lq=0, lk=0), csr(g, 0, 0), backend=be)  # no queries or keys
    check_attention(*qkv(g, d=0), csr(g), backend=be)  # D = 0: uniform over stored keys
    check_attention(*qkv(g, b=0), csr(g), backend=be)  # no batch
    check_attention(*qkv(g, dv=0), csr(g), backend=be)  # Dv = 0


@handles()
def csr_empty_conversions(g, be):
    for shape in [(0, 0), (0, 4), (3, 0)]:
        A = sk.CSRMatrix.from_dense(torch.zeros(shape, dtype=F64))
        assert A.t().shape == shape[::-1] and A.t().to_dense().shape == shape[::-1]
        assert sk.CSRMatrix.from_torch(A.to_torch()).shape == shape
        assert sk.CSRMatrix.from_scipy(A.to_scipy()).shape == shape


# ------------------------------------------------------------ NaN and Inf
@handles(triton=True)
def spmm_csr_stored_nan_inf(g, be):
    A = csr(g, 8, 9, empty_rows=False)
    values = A.values.clone()
    values[[0, A.nnz // 2]] = float("nan")
    values[-1] = float("-inf")
    A = A.with_values(values)
    B = randn(9, 4, gen=g)
    got = sk.spmm(A, B, randn(8, gen=g), "relu", backend=be)
    want = dense_spmm(A.to_dense(), B, None, "relu")  # a finite bias moves no NaN or Inf
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    assert torch.isnan(got).any() and torch.isinf(got).any() and torch.isfinite(got).any()


@handles(triton=True)
def spmm_nm_nan_only_where_connected(g, be):
    W = nm(g, 4, 8, 1, 4, vector=4)  # vector = rows: all rows keep the same columns
    unused = sorted(set(range(8)) - set(W.column_indices()[0].tolist()))
    B = randn(8, 3, gen=g)
    B[unused, :] = float("nan")
    B[unused[0], 1] = float("inf")
    got = sk.spmm(W, B, backend=be)
    clean = B.clone()
    clean[unused] = 0.0
    assert_close(got, W.to_dense() @ clean, spmm_bound(W.to_dense(), clean), F64)


@handles()
def spmm_nm_stored_inf(g, be):
    W = nm(g, 4, 8, 2, 4)
    values = W.values.clone()
    values[1, 0] = float("inf")
    got = sk.spmm(W.with_values(values), randn(8, 3, gen=g), randn(4, gen=g), backend=be)
    assert torch.isinf(got[1]).all() and torch.isfinite(got[[0, 2, 3]]).all()


@handles(triton=True)
def sddmm_nan_rows(g, be):
    P = csr(g, 6, 5, 0.5, empty_rows=False)
    X, Y = randn(6, 3, gen=g), randn(5, 3, gen=g)
    X[2, 1] = float("nan")
    Y[(~stored_mask(P)).all(0)] = float("nan")  # rows of Y (columns) no entry samples
    got = sk.sddmm(X, Y, P, backend=be).values
    assert torch.equal(torch.isnan(got), P.pattern.row_indices() == 2)


@handles(triton=True)
def softmax_nan_and_inf(g, be):
    S = csr(g, 5, 6, 0.7, empty_rows=False)
    values, ro = S.values.clone(), S.row_offsets.tolist()
    values[ro[1]] = float("nan")  # row 1: all NaN
    values[ro[3]] = float("inf")  # row 3: +inf as dense softmax treats it
    values[ro[4] : ro[5]] = float("-inf")  # row 4 fully -inf: 0/0 = NaN as dense
    S = S.with_values(values)
    got, want = sk.sparse_softmax(S, backend=be).values, dense_softmax(S)
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    ok = ~torch.isnan(want)
    torch.testing.assert_close(got[ok], want[ok], rtol=1e-12, atol=1e-12)
    assert torch.isnan(got[ro[1] : ro[2]]).all() and torch.isfinite(got[: ro[1]]).all()


@handles()
def attention_nan_in_unattended_key(g, be):
    P = sk.CSRMatrix.from_dense(torch.ones(4, 5, dtype=F64).tril())  # key 4: nobody
    q, k, v = qkv(g, lq=4, lk=5)
    v[..., 4, :] = float("nan")
    k[..., 4, :] = float("inf")
    got = sk.sparse_attention(q, k, v, P, backend=be)
    clean_k, clean_v = k.clone(), v.clone()
    clean_k[..., 4, :], clean_v[..., 4, :] = 0.0, 0.0
    want = dense_attention(q, clean_k, clean_v, stored_mask(P), 0.5)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    v[..., 0, 0] = float("nan")  # key 0 is attended by every query: dim 0 of every output
    got = sk.sparse_attention(q, k, v, P, backend=be)
    assert torch.isnan(got[..., 0]).all() and torch.isfinite(got[..., 1:]).all()


@handles()
def linear_nan_token(g, be):
    W = csr(g, 6, 8, 0.5, empty_rows=False)
    x = randn(3, 8, gen=g)
    x[1, 0] = float("nan")
    got = sk.linear(x, W, backend=be)
    assert torch.equal(torch.isnan(got[1]), W.to_dense()[:, 0] != 0)
    assert torch.isfinite(got[[0, 2]]).all()


# ------------------------------------------------------------ index-type boundaries
def _boundary_csr(g, K):
    """Two rows with entries at the first, middle and last columns of K."""
    dense = torch.zeros(2, K, dtype=F64)
    dense.scatter_(1, torch.tensor([[0, K - 2, K - 1], [1, K // 2, K - 1]]), randn(2, 3, gen=g))
    return sk.CSRMatrix.from_dense(dense)


@handles()
def spmm_K_32768_int16_columns(g, be):
    A = _boundary_csr(g, 32768)  # the largest K whose columns fit int16
    assert A.pattern.column_indices_int16() is not None
    check_spmm(A, randn(32768, 3, gen=g), backend=be)


@handles(triton=True)
def spmm_K_32769_int32_columns(g, be):
    A = _boundary_csr(g, 32769)  # column 32768 needs int32
    assert A.pattern.column_indices_int16() is None
    check_spmm(A, randn(32769, 3, gen=g), backend=be)


@handles(triton=True)
def spmm_K_beyond_int32_expanded_B(g, be):
    K = 2**34
    A = sk.CSRMatrix(
        torch.tensor([0, 0, 3]), torch.tensor([5, 2**31, K - 1]), randn(3, gen=g), (2, K)
    )
    assert A.column_indices.dtype == torch.int64
    row = randn(1, 4, gen=g)
    got = sk.spmm(A, row.expand(K, 4), backend=be)  # B (K, 4) with stride 0 along K
    want = torch.cat([torch.zeros(1, 4, dtype=F64), A.values.sum() * row])
    bound = torch.cat([torch.zeros(1, 4, dtype=F64), A.values.abs().sum() * row.abs()])
    assert_close(got, want, bound, F64)


# ------------------------------------------------------------ depthwise, packing, 2:4, decode
@handles(triton=True)
def linear_nm_decode_strided_x(g, be):
    """Tokens as a transposed view (strides (1, 3)): the decode kernel reads any strides."""
    W = nm(g, 5, 16, 2, 8)
    x = randn(16, 3, gen=g).t()
    got = sk.linear(x, W, randn(5, gen=g) * 0, backend=be)
    assert_close(got, x @ W.to_dense().t(), spmm_bound(x, W.to_dense().t()), F64)


@handles(triton=True)
def depthwise_channels_last_input(g, be):
    x = image(g, (2, 3, 6, 7)).contiguous(memory_format=torch.channels_last)
    w, b = randn(3, 1, 3, 3, gen=g), randn(3, gen=g)
    got = sk.ops.depthwise_conv2d(x, w, b, 2, "relu", backend=be)
    want = torch.relu(torch.nn.functional.conv2d(x, w, b, 2, 1, 1, 3))
    bound = torch.nn.functional.conv2d(x.abs(), w.abs(), b.abs(), 2, 1, 1, 3)
    assert_close(got, want, bound, F64)


@pytest.mark.parametrize("check, backend", HANDLED)
def test_handled(check, backend, request):
    g = torch.Generator().manual_seed(seed_for(request.node.callspec.id))
    check(g, backend)


def test_corpus_size():
    import test_bad_input_corpus_rejected  # noqa: F401  (fills REJECTED)

    cases = {p.id.removesuffix("[triton]") for p in REJECTED + HANDLED}
    assert len(cases) >= 50
    assert len({p.id for p in REJECTED + HANDLED}) == len(REJECTED) + len(HANDLED)
