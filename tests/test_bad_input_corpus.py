"""A corpus of bad and awkward inputs across formats and ops (issue 6, part 1).

Each case either raises a ValueError/TypeError whose message names the argument and the problem
(`rejects`), or returns the correct result, checked against float64 dense math (`handles`).
Cases marked triton=True run a second time with backend="triton" (the interpreter on CPU) to
show the kernel path rejects or handles them the same way. These add to test_ops_bad_inputs.py.
The 'meta' device stands in for a second device: every device check compares devices before
touching data.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
import scipy.sparse
import torch

import sparsekernels as sk
from _helpers import (
    assert_close,
    dense_attention,
    dense_sddmm,
    dense_softmax,
    dense_spmm,
    randn,
    random_csr,
    random_nm,
    spmm_bound,
    stored_mask,
)

pytestmark = pytest.mark.filterwarnings(
    "ignore:Sparse (CSR tensor support|invariant checks)",
    "ignore:(invalid value|divide by zero) encountered:RuntimeWarning",  # the interpreter's NaNs
)

F64 = torch.float64
REJECTED: list = []  # pytest.param(call, error, pattern, backend)
HANDLED: list = []  # pytest.param(check, backend)


def _params(table: list, fn, triton: bool, *args) -> None:
    name = fn.__name__.replace("_", "-")
    table.append(pytest.param(fn, *args, None, id=name))
    if triton:
        table.append(pytest.param(fn, *args, "triton", id=f"{name}[triton]"))


def rejects(error: type[Exception], pattern: str, triton: bool = False):
    """Register a case `fn(g, backend)` that must raise `error` matching `pattern`."""

    def register(fn):
        _params(REJECTED, fn, triton, error, pattern)
        return fn

    return register


def handles(triton: bool = False):
    """Register a case `fn(g, backend)` that checks its own (correct) result."""

    def register(fn):
        _params(HANDLED, fn, triton)
        return fn

    return register


def csr(g, rows=6, cols=5, density=0.5, **kw):
    return random_csr(rows, cols, density, g, **kw)


def nm(g, rows=6, cols=8, n=2, m=4, **kw):
    return random_nm(rows, cols, n, m, g, **kw)


def qkv(g, b=1, h=2, lq=6, lk=5, d=4, dv=3):
    return randn(b, h, lq, d, gen=g), randn(b, h, lk, d, gen=g), randn(b, h, lk, dv, gen=g)


def raw_torch_csr(g, crow, col, shape):
    """A torch CSR tensor built without torch's invariant checks (as users can)."""
    values = randn(len(col), gen=g)
    return torch.sparse_csr_tensor(
        torch.tensor(crow), torch.tensor(col), values, shape, check_invariants=False
    )


def raw_scipy_csr(indptr, indices, shape):
    """A scipy CSR matrix as given: scipy checks its arrays only lazily (check_format)."""
    data = np.arange(1.0, len(indices) + 1)
    return scipy.sparse.csr_matrix((data, np.array(indices), np.array(indptr)), shape=shape)


# =============================================================================== rejected
# ------------------------------------------------------------ operands on two devices
@rejects(ValueError, r"operands must be on one device: A on cpu, B on meta", triton=True)
def spmm_csr_B_on_meta(g, be):
    return sk.spmm(csr(g), randn(5, 3, gen=g).to("meta"), backend=be)


@rejects(ValueError, r"one device: .*bias on meta", triton=True)
def spmm_csr_bias_on_meta(g, be):
    return sk.spmm(csr(g), randn(5, 3, gen=g), bias=randn(6, gen=g).to("meta"), backend=be)


@rejects(ValueError, r"one device: A on meta, B on cpu")
def spmm_csr_A_on_meta(g, be):
    return sk.spmm(csr(g).to("meta"), randn(5, 3, gen=g), backend=be)


@rejects(ValueError, r"one device: A on meta, B on cpu", triton=True)
def spmm_nm_W_on_meta(g, be):
    return sk.spmm(nm(g).to("meta"), randn(8, 3, gen=g), backend=be)


@rejects(ValueError, r"one device: x on meta, W on cpu")
def linear_x_on_meta(g, be):
    return sk.linear(randn(3, 8, gen=g).to("meta"), nm(g), backend=be)


@rejects(ValueError, r"one device: .*bias on meta")
def linear_bias_on_meta(g, be):
    return sk.linear(randn(3, 8, gen=g), nm(g), randn(6, gen=g).to("meta"), backend=be)


@rejects(ValueError, r"one device: X on cpu, Y on meta, pattern on cpu", triton=True)
def sddmm_Y_on_meta(g, be):
    return sk.sddmm(randn(6, 2, gen=g), randn(5, 2, gen=g).to("meta"), csr(g), backend=be)


@rejects(ValueError, r"one device: .*pattern on meta")
def sddmm_pattern_on_meta(g, be):
    return sk.sddmm(randn(6, 2, gen=g), randn(5, 2, gen=g), csr(g).to("meta"))


@rejects(ValueError, r"one device: .*v on meta")
def attention_v_on_meta(g, be):
    q, k, v = qkv(g)
    return sk.sparse_attention(q, k, v.to("meta"), csr(g))


@rejects(ValueError, r"one device: .*pattern on meta", triton=True)
def attention_pattern_on_meta(g, be):
    return sk.sparse_attention(*qkv(g), csr(g).to("meta"), backend=be)


@rejects(ValueError, r"dense is on the meta device")
def csr_from_dense_on_meta(g, be):
    return sk.CSRMatrix.from_dense(randn(4, 5, gen=g).to("meta"))


@rejects(ValueError, r"row_offsets is on the meta device")
def csr_constructor_on_meta(g, be):
    return sk.CSRMatrix(
        torch.tensor([0, 1], device="meta"),
        torch.tensor([0], device="meta"),
        torch.randn(1, device="meta"),
        (1, 2),
    )


@rejects(ValueError, r"dense is on the meta device")
def nm_from_dense_on_meta(g, be):
    return sk.NMMatrix.from_dense(randn(4, 8, gen=g).to("meta"), 2, 4)


@rejects(ValueError, r"t is on the meta device")
def csr_from_torch_on_meta(g, be):
    return sk.CSRMatrix.from_torch(randn(3, 4, gen=g).to_sparse_csr().to("meta"))


# ------------------------------------------------------------ dtypes
@rejects(TypeError, r"share one dtype: .*bias is torch.int64", triton=True)
def spmm_csr_bias_int64(g, be):
    return sk.spmm(csr(g), randn(5, 3, gen=g), bias=torch.ones(6, dtype=torch.int64), backend=be)


@rejects(
    TypeError, r"share one dtype: A is torch.float64, B is torch.float64, bias is torch.float32"
)
def spmm_csr_bias_float32_with_float64(g, be):
    return sk.spmm(csr(g), randn(5, 3, gen=g), bias=randn(6, gen=g).float())


@rejects(TypeError, r"A is torch.float16, B is torch.bfloat16", triton=True)
def spmm_csr_fp16_A_bf16_B(g, be):
    return sk.spmm(
        csr(g, dtype=torch.float16), randn(5, 3, gen=g, dtype=torch.bfloat16), backend=be
    )


@rejects(TypeError, r"B must be float16, bfloat16, float32 or float64, got torch.bool")
def spmm_csr_B_bool(g, be):
    return sk.spmm(csr(g), torch.ones(5, 3, dtype=torch.bool))


@rejects(TypeError, r"B must be float.*got torch.complex128")
def spmm_csr_B_complex(g, be):
    return sk.spmm(csr(g), torch.ones(5, 3, dtype=torch.complex128))


@rejects(TypeError, r"A is torch.float32, B is torch.float64", triton=True)
def spmm_nm_fp32_W_fp64_B(g, be):
    return sk.spmm(nm(g, dtype=torch.float32), randn(8, 3, gen=g), backend=be)


@rejects(TypeError, r"share one dtype: .*bias is torch.int64")
def linear_bias_int64(g, be):
    return sk.linear(randn(2, 8, gen=g), nm(g), torch.ones(6, dtype=torch.int64))


@rejects(
    TypeError, r"Y must be float16, bfloat16, float32 or float64, got torch.int32", triton=True
)
def sddmm_Y_int32(g, be):
    return sk.sddmm(randn(6, 2, gen=g), torch.ones(5, 2, dtype=torch.int32), csr(g), backend=be)


@rejects(TypeError, r"q must be float16")
def attention_q_int64(g, be):
    q, k, v = qkv(g)
    return sk.sparse_attention(q.long(), k, v, csr(g))


@rejects(TypeError, r"q is torch.float64, k is torch.float32, v is torch.float64")
def attention_k_float32(g, be):
    q, k, v = qkv(g)
    return sk.sparse_attention(q, k.float(), v, csr(g))


@rejects(TypeError, r"values must be float16, bfloat16, float32 or float64, got torch.complex128")
def csr_values_complex(g, be):
    A = csr(g)
    return sk.CSRMatrix(A.row_offsets, A.column_indices, A.values.to(torch.complex128), A.shape)


@rejects(TypeError, r"row_offsets must be int16, int32 or int64, got torch.int8")
def csr_row_offsets_int8(g, be):
    A = csr(g)
    return sk.CSRMatrix(A.row_offsets.to(torch.int8), A.column_indices, A.values, A.shape)


@rejects(TypeError, r"indices must be uint8, got torch.int8")
def nm_indices_int8(g, be):
    W = nm(g)
    return sk.NMMatrix(W.values, W.indices.to(torch.int8), W.shape, 2, 4)


@rejects(TypeError, r"dtype must be a floating dtype, got torch.int32")
def csr_to_integer_dtype(g, be):
    return csr(g).to(dtype=torch.int32)


@rejects(TypeError, r"dtype must be a floating dtype, got torch.int64")
def nm_to_integer_dtype(g, be):
    return nm(g).to(dtype=torch.int64)


@rejects(TypeError, r"values must be float.*got torch.int64")
def csr_from_scipy_integer_values(g, be):
    return sk.CSRMatrix.from_scipy(scipy.sparse.csr_matrix(np.eye(3, dtype=np.int64)))


# ------------------------------------------------------------ ranks and shapes
@rejects(ValueError, r"B must have 2 or 3 dimensions, got shape \(1, 2, 5, 3\)", triton=True)
def spmm_csr_B_4d(g, be):
    return sk.spmm(csr(g), randn(1, 2, 5, 3, gen=g), backend=be)


@rejects(ValueError, r"B must have 2 or 3 dimensions, got shape \(\)")
def spmm_csr_B_0d(g, be):
    return sk.spmm(csr(g), torch.tensor(1.0, dtype=F64))


@rejects(ValueError, r"bias must have shape \(6,\), got \(6, 1\)", triton=True)
def spmm_csr_bias_column_vector(g, be):
    return sk.spmm(csr(g), randn(5, 3, gen=g), bias=randn(6, 1, gen=g), backend=be)


@rejects(ValueError, r"bias must have shape \(6,\), got \(5,\)")
def spmm_nm_bias_too_short(g, be):
    return sk.spmm(nm(g), randn(8, 3, gen=g), bias=randn(5, gen=g))


@rejects(ValueError, r"x must have at least one dimension")
def linear_x_0d(g, be):
    return sk.linear(torch.tensor(1.0, dtype=F64), nm(g))


@rejects(ValueError, r"bias must have shape \(6,\), got \(8,\)")
def linear_bias_wrong_length(g, be):
    return sk.linear(randn(2, 8, gen=g), nm(g), randn(8, gen=g))


@rejects(TypeError, r"bias must be a torch.Tensor, got list")
def linear_bias_list(g, be):
    return sk.linear(randn(2, 8, gen=g), nm(g), [0.0] * 6)


@rejects(ValueError, r"X must have 2 or 3 dimensions, got shape \(6,\)")
def sddmm_X_1d(g, be):
    return sk.sddmm(randn(6, gen=g), randn(5, 2, gen=g), csr(g))


@rejects(ValueError, r"Y must have 2 or 3 dimensions")
def sddmm_Y_4d(g, be):
    return sk.sddmm(randn(6, 2, gen=g), randn(1, 1, 5, 2, gen=g), csr(g))


@rejects(ValueError, r"Y its 5 columns as rows.*Y \(4, 2\)", triton=True)
def sddmm_Y_wrong_rows(g, be):
    return sk.sddmm(randn(6, 2, gen=g), randn(4, 2, gen=g), csr(g), backend=be)


@rejects(ValueError, r"v must have 4 dimensions")
def attention_v_3d(g, be):
    q, k, v = qkv(g)
    return sk.sparse_attention(q, k, v[0], csr(g))


@rejects(ValueError, r"q, k and v must share \(batch, heads\)", triton=True)
def attention_batch_mismatch(g, be):
    return sk.sparse_attention(randn(1, 2, 6, 4, gen=g), *qkv(g, b=2)[1:], csr(g), backend=be)


@rejects(ValueError, r"q, k and v must share \(batch, heads\)")
def attention_heads_mismatch(g, be):
    return sk.sparse_attention(randn(1, 3, 6, 4, gen=g), *qkv(g)[1:], csr(g))


@rejects(ValueError, r"shape must be a pair of ints \(rows, cols\), got \(6.5, 5\)")
def csr_shape_non_integer(g, be):
    A = csr(g)
    return sk.CSRMatrix(A.row_offsets, A.column_indices, A.values, (6.5, 5))


@rejects(ValueError, r"shape must be a pair of ints")
def csr_shape_bool(g, be):
    return sk.CSRMatrix(torch.tensor([0, 1]), torch.tensor([0]), randn(1, gen=g), (True, 5))


@rejects(ValueError, r"values must have shape \(6, 4\) for 2:4 and shape \(6, 8\), got \(24,\)")
def nm_values_flattened(g, be):
    W = nm(g)
    return sk.NMMatrix(W.values.reshape(-1), W.indices, W.shape, 2, 4)


@rejects(ValueError, r"to_torch supports a single matrix")
def csr_to_torch_batched(g, be):
    A = csr(g)
    return A.with_values(randn(2, A.nnz, gen=g)).to_torch()


@rejects(ValueError, r"to_scipy supports a single matrix")
def csr_to_scipy_batched(g, be):
    A = csr(g)
    return A.with_values(randn(3, A.nnz, gen=g)).to_scipy()


# ------------------------------------------- indices, row offsets, nnz mismatches
@rejects(ValueError, r"row_offsets must be non-decreasing")
def csr_row_offsets_negative_entry(g, be):
    return sk.CSRMatrix(torch.tensor([0, -1, 2]), torch.tensor([0, 1]), randn(2, gen=g), (2, 3))


@rejects(ValueError, r"row_offsets must (be non-decreasing|end at nnz)")
def csr_row_offsets_wrapped_int16(g, be):
    return sk.CSRMatrix(
        torch.tensor([0, 40000]).to(torch.int16),
        torch.arange(40000),
        randn(40000, gen=g),
        (1, 40000),
    )


@rejects(ValueError, r"row_offsets must be non-decreasing")
def csr_from_torch_decreasing_crow(g, be):
    return sk.CSRMatrix.from_torch(raw_torch_csr(g, [0, 3, 1, 4], [0, 1, 2, 3], (3, 4)))


@rejects(ValueError, r"row_offsets must end at nnz = len\(column_indices\) = 4, got 5")
def csr_from_torch_crow_past_nnz(g, be):
    return sk.CSRMatrix.from_torch(raw_torch_csr(g, [0, 2, 5], [0, 1, 1, 2], (2, 4)))


@rejects(ValueError, r"column_indices must lie in \[0, 4\)")
def csr_from_torch_column_out_of_range(g, be):
    return sk.CSRMatrix.from_torch(raw_torch_csr(g, [0, 2, 4], [0, 5, 1, 2], (2, 4)))


@rejects(ValueError, r"column_indices must lie in \[0, 4\)")
def csr_from_torch_negative_column(g, be):
    return sk.CSRMatrix.from_torch(raw_torch_csr(g, [0, 2, 4], [0, -1, 1, 2], (2, 4)))


@rejects(ValueError, r"column_indices must lie in")
def csr_from_torch_coo_negative_index(g, be):
    return sk.CSRMatrix.from_torch(
        torch.sparse_coo_tensor(
            torch.tensor([[0, 1], [0, -1]]), randn(2, gen=g), (2, 4), check_invariants=False
        )
    )


@rejects(ValueError, r"m is not a valid scipy.sparse matrix: indices must be < 4")
def csr_from_scipy_index_out_of_range(g, be):
    return sk.CSRMatrix.from_scipy(raw_scipy_csr([0, 1, 2], [0, 9], (2, 4)))


@rejects(ValueError, r"m is not a valid scipy.sparse matrix: indptr")
def csr_from_scipy_decreasing_indptr(g, be):
    return sk.CSRMatrix.from_scipy(raw_scipy_csr([0, 3, 2], [0, 1], (2, 4)))


@rejects(TypeError, r"m must be a scipy.sparse matrix or array, got ndarray")
def csr_from_scipy_not_sparse(g, be):
    return sk.CSRMatrix.from_scipy(np.eye(3))


@rejects(ValueError, r"indices must be block offsets below m / block = 4")
def nm_indices_offset_255(g, be):
    W = nm(g)
    return sk.NMMatrix(W.values, W.indices.index_fill(1, torch.tensor([0]), 255), W.shape, 2, 4)


# ------------------------------------------- N:M: violations, n >= m, K % m != 0
@rejects(ValueError, r"dense breaks the 2:4 pattern .*rows 0\.\.0, columns 0\.\.3 hold 4 nonzeros")
def nm_from_dense_unpruned(g, be):
    return sk.NMMatrix.from_dense(randn(4, 8, gen=g) + 10.0, 2, 4)


@rejects(ValueError, r"n must be smaller than m, got n=4, m=4")
def nm_constructor_n_equals_m(g, be):
    return sk.NMMatrix(randn(2, 8, gen=g), torch.zeros(2, 8, dtype=torch.uint8), (2, 8), 4, 4)


@rejects(ValueError, r"n must be smaller than m, got n=5, m=4")
def nm_constructor_n_above_m(g, be):
    W = nm(g)
    return sk.NMMatrix(W.values, W.indices, W.shape, 5, 4)


@rejects(ValueError, r"\(columns, in_features\) 10 must be a multiple of m=4")
def nm_constructor_K_not_multiple_of_m(g, be):
    W = nm(g)
    return sk.NMMatrix(W.values, W.indices, (6, 10), 2, 4)


@rejects(ValueError, r"block must divide both n and m, got block=4 for 2:4")
def nm_constructor_block_not_dividing(g, be):
    W = nm(g)
    return sk.NMMatrix(W.values, W.indices, W.shape, 2, 4, block=4)


@rejects(ValueError, r"10 must be a multiple of m=4")
def nm_prune_mask_K_not_multiple_of_m(g, be):
    return sk.prune.nm_mask(randn(4, 10, gen=g), 2, 4)


# ------------------------------------------------------------ other arguments
@rejects(TypeError, r"scale must be a number, got NoneType", triton=True)
def softmax_scale_none(g, be):
    return sk.sparse_softmax(csr(g), None, backend=be)


@rejects(TypeError, r"scale must be a number, got Tensor")
def softmax_scale_tensor(g, be):
    return sk.sparse_softmax(csr(g), torch.tensor(2.0))


@rejects(TypeError, r"scale must be a number, got bool")
def attention_scale_bool(g, be):
    return sk.sparse_attention(*qkv(g), csr(g), scale=True)


@rejects(ValueError, r"activation must be None, 'relu' or 'gelu', got 'RELU'", triton=True)
def spmm_activation_uppercase(g, be):
    return sk.spmm(nm(g), randn(8, 3, gen=g), activation="RELU", backend=be)


@rejects(ValueError, r"backend must be one of \[.*'reference'.*\] for spmm_csr, got 3")
def spmm_backend_not_a_string(g, be):
    return sk.spmm(csr(g), randn(5, 3, gen=g), backend=3)


@rejects(ValueError, r"backend must be one of .* for sparse_softmax, got 'cuda'")
def softmax_backend_unknown(g, be):
    return sk.sparse_softmax(csr(g), backend="cuda")


@rejects(TypeError, r"A must be a CSRMatrix or NMMatrix, got NoneType")
def spmm_A_none(g, be):
    return sk.spmm(None, randn(5, 3, gen=g))


def _seed(case_id: str) -> int:
    return zlib.crc32(case_id.encode())


@pytest.mark.parametrize("call, error, pattern, backend", REJECTED)
def test_rejected(call, error, pattern, backend, request):
    g = torch.Generator().manual_seed(_seed(request.node.callspec.id))
    with pytest.raises(error, match=pattern):
        call(g, backend)


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
def _image(g, shape=(1, 4, 5, 5)):
    return randn(*shape, gen=g)


@rejects(ValueError, r"weight must be a 3x3 kernel \(C, 1, 3, 3\), got \(4, 1, 5, 5\)", True)
def depthwise_5x5_kernel(g, be):
    return sk.ops.depthwise_conv2d(_image(g), randn(4, 1, 5, 5, gen=g), backend=be)


@rejects(ValueError, r"stride must be 1 or 2, got 3", triton=True)
def depthwise_stride_3(g, be):
    return sk.ops.depthwise_conv2d(_image(g), randn(4, 1, 3, 3, gen=g), stride=3, backend=be)


@rejects(ValueError, r"x must have 4 dimensions", triton=True)
def depthwise_3d_input(g, be):
    return sk.ops.depthwise_conv2d(_image(g)[0], randn(4, 1, 3, 3, gen=g), backend=be)


@rejects(ValueError, r"one device: x on cpu, weight on meta", triton=True)
def depthwise_weight_on_meta(g, be):
    weight = randn(4, 1, 3, 3, gen=g).to("meta")
    return sk.ops.depthwise_conv2d(_image(g), weight, backend=be)


@rejects(TypeError, r"one dtype: x is torch.float64, weight is torch.float32", triton=True)
def depthwise_mixed_dtypes(g, be):
    return sk.ops.depthwise_conv2d(_image(g), randn(4, 1, 3, 3, gen=g).float(), backend=be)


@rejects(ValueError, r"bits must be an int from 3 to 8, got 2")
def nm_packed_bits_too_few(g, be):
    return nm(g, 6, 16, 2, 8).packed_indices(bits=2)


@rejects(ValueError, r"pattern 2:8 is not 2:4")
def nm_2_8_to_semi_structured(g, be):
    return nm(g, 6, 16, 2, 8).to_semi_structured()


@handles(triton=True)
def linear_nm_decode_strided_x(g, be):
    """Tokens as a transposed view (strides (1, 3)): the decode kernel reads any strides."""
    W = nm(g, 5, 16, 2, 8)
    x = randn(16, 3, gen=g).t()
    got = sk.linear(x, W, randn(5, gen=g) * 0, backend=be)
    assert_close(got, x @ W.to_dense().t(), spmm_bound(x, W.to_dense().t()), F64)


@handles(triton=True)
def depthwise_channels_last_input(g, be):
    x = _image(g, (2, 3, 6, 7)).contiguous(memory_format=torch.channels_last)
    w, b = randn(3, 1, 3, 3, gen=g), randn(3, gen=g)
    got = sk.ops.depthwise_conv2d(x, w, b, 2, "relu", backend=be)
    want = torch.relu(torch.nn.functional.conv2d(x, w, b, 2, 1, 1, 3))
    bound = torch.nn.functional.conv2d(x.abs(), w.abs(), b.abs(), 2, 1, 1, 3)
    assert_close(got, want, bound, F64)


@pytest.mark.parametrize("check, backend", HANDLED)
def test_handled(check, backend, request):
    g = torch.Generator().manual_seed(_seed(request.node.callspec.id))
    check(g, backend)


def test_corpus_size():
    cases = {p.id.removesuffix("[triton]") for p in REJECTED + HANDLED}
    assert len(cases) >= 50
    assert len({p.id for p in REJECTED + HANDLED}) == len(REJECTED) + len(HANDLED)
