"""The bad-input corpus, rejected cases: each raises a ValueError/TypeError whose message names
the argument and the problem (registry and builders in _bad_input_corpus.py)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
import torch

import sparsekernels as sk
from _bad_input_corpus import (
    F64,
    QUIET,
    REJECTED,
    csr,
    image,
    nm,
    qkv,
    raw_scipy_csr,
    raw_torch_csr,
    rejects,
    seed_for,
)
from _helpers import randn

pytestmark = QUIET


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
@rejects(ValueError, r"dense breaks the 2:4 pattern .*rows 0\.\.0, columns 0\.\.3 hold 4 nonzero")
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


@rejects(
    ValueError, r"shape must be below 2\*\*62 in each dimension, got \(3, 18446744073709551616\)"
)
def csr_shape_past_int64(g, be):
    A = csr(g, rows=3)
    return sk.CSRMatrix(A.row_offsets, A.column_indices, A.values, (3, 2**64))


@rejects(ValueError, r"scale must be finite, got 1000000000000000000000000")
def softmax_scale_overflowing(g, be):
    return sk.sparse_softmax(csr(g), 10**400)


@rejects(ValueError, r"scale must be finite, got nan")
def attention_scale_nan(g, be):
    return sk.sparse_attention(*qkv(g), csr(g), scale=float("nan"))


@rejects(ValueError, r"t must have 2 sparse dimensions and no dense ones .*1 sparse and 1 dense")
def csr_from_hybrid_coo(g, be):
    t = torch.sparse_coo_tensor(torch.tensor([[0, 1]]), randn(2, 3, gen=g), (2, 3))
    return sk.CSRMatrix.from_torch(t)


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


# ------------------------------------------------------------ depthwise, packing, 2:4
@rejects(ValueError, r"weight must be a 3x3 kernel \(C, 1, 3, 3\), got \(4, 1, 5, 5\)", True)
def depthwise_5x5_kernel(g, be):
    return sk.ops.depthwise_conv2d(image(g), randn(4, 1, 5, 5, gen=g), backend=be)


@rejects(ValueError, r"stride must be 1 or 2, got 3", triton=True)
def depthwise_stride_3(g, be):
    return sk.ops.depthwise_conv2d(image(g), randn(4, 1, 3, 3, gen=g), stride=3, backend=be)


@rejects(ValueError, r"x must have 4 dimensions", triton=True)
def depthwise_3d_input(g, be):
    return sk.ops.depthwise_conv2d(image(g)[0], randn(4, 1, 3, 3, gen=g), backend=be)


@rejects(ValueError, r"one device: x on cpu, weight on meta", triton=True)
def depthwise_weight_on_meta(g, be):
    weight = randn(4, 1, 3, 3, gen=g).to("meta")
    return sk.ops.depthwise_conv2d(image(g), weight, backend=be)


@rejects(TypeError, r"one dtype: x is torch.float64, weight is torch.float32", triton=True)
def depthwise_mixed_dtypes(g, be):
    return sk.ops.depthwise_conv2d(image(g), randn(4, 1, 3, 3, gen=g).float(), backend=be)


@rejects(ValueError, r"bits must be an int from 3 to 8, got 2")
def nm_packed_bits_too_few(g, be):
    return nm(g, 6, 16, 2, 8).packed_indices(bits=2)


@rejects(ValueError, r"pattern 2:8 is not 2:4")
def nm_2_8_to_semi_structured(g, be):
    return nm(g, 6, 16, 2, 8).to_semi_structured()


@pytest.mark.parametrize("call, error, pattern, backend", REJECTED)
def test_rejected(call, error, pattern, backend, request):
    g = torch.Generator().manual_seed(seed_for(request.node.callspec.id))
    with pytest.raises(error, match=pattern):
        call(g, backend)
