"""Property tests of the Triton kernels (hypothesis): each op by the triton backend against
float64 dense math, in the interpreter on tiny shapes (CPU machines) and compiled on the GPU
with shapes across the kernels' tiles (decode and batched N). Strategies, data and checks:
_properties.py; the reference backend's examples: test_properties.py.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import sparsekernels as sk
from _helpers import assert_close, dense_sddmm
from _properties import (
    F64,
    PROPERTY_WARNINGS,
    activations,
    check_attention,
    check_softmax,
    check_spmm,
    densities,
    dtypes,
    examples,
    fresh,
    make_csr,
    make_nm,
    nm_patterns,
    seeded,
    seeds,
)

pytestmark = pytest.mark.filterwarnings(*PROPERTY_WARNINGS)


# --------------------------------------------------------------------------- triton
TRITON_OPS = [
    "spmm_csr",
    "spmm_nm",
    "spmm_nm_expand",
    "spmm_nm_unpack",
    "spmm_nm_transposed",
    "sddmm",
    "softmax",
    "attention",
    "attention_flash",
    "depthwise",
]


@pytest.mark.parametrize("op", TRITON_OPS)
@examples(10)
@given(
    M=st.integers(0, 6),
    K=st.integers(0, 6),
    N=st.integers(0, 5),
    density=densities,
    dtype=dtypes,
    pattern=nm_patterns(max_m=8),
    activation=activations,
    seed=seeds,
)
def test_triton_interpreter(op, M, K, N, density, dtype, pattern, activation, seed):
    """The Triton kernels in the interpreter (tiny shapes) against float64 dense math."""
    if torch.cuda.is_available():
        pytest.skip("the interpreter runs only on machines without CUDA")
    _triton_example(op, M, K % 3, K, N, density, dtype, pattern, activation, seed, "cpu")


GPU_SHAPES = dict(
    M=st.one_of(st.sampled_from([0, 1, 127, 129]), st.integers(2, 300)),
    K=st.one_of(st.sampled_from([0, 1, 255, 257]), st.integers(2, 300)),
    N=st.one_of(st.sampled_from([1, 4, 5, 16, 17]), st.integers(0, 70)),
    groups=st.integers(0, 40),
    density=densities,
    dtype=dtypes,
    activation=activations,
    seed=seeds,
)


@pytest.mark.gpu
@pytest.mark.parametrize("op", [op for op in TRITON_OPS if op != "spmm_nm_expand"])
@examples(25)
@given(pattern=nm_patterns(max_m=32), **GPU_SHAPES)
def test_triton_gpu(op, M, K, N, groups, density, dtype, pattern, activation, seed):
    """The compiled kernels on the GPU, shapes across their tiles (decode and batched N), against
    float64 dense math."""
    _triton_example(op, M, groups, K, N, density, dtype, pattern, activation, seed, "cuda")


@pytest.mark.gpu
@examples(12)
@given(pattern=nm_patterns(max_m=16), **GPU_SHAPES)
def test_triton_gpu_expand(M, K, N, groups, density, dtype, pattern, activation, seed):
    """The one-hot kernel compiles anew for each pattern, dtype and epilogue, twice where few
    rows split K (seconds each, 10-15 s at m = 32-64): fewer examples, m to 16 (the kernel
    tests cover m = 32 and 64), so the GPU suite stays in its time limit."""
    args = (M, groups, K, N, density, dtype, pattern, activation, seed, "cuda")
    _triton_example("spmm_nm_expand", *args)


def _nm_product(M, groups, N, pattern, g, dtype, device):
    """An N:M weight (M rows, `groups` groups), B (its columns x N) and a bias, on `device`."""
    W, _ = make_nm(M, groups, pattern, g, dtype)
    W = W.to(device)
    bias = fresh(M, g=g, dtype=dtype).to(device)
    return W, fresh(W.shape[1], N, g=g, dtype=dtype).to(device), bias


def _triton_example(op, M, groups, K, N, density, dtype, pattern, activation, seed, device):
    """One example of `op` by the triton backend on `device` (data drawn on the CPU first, so
    an example is the same on either)."""
    g = seeded(seed)
    backend = "triton"
    if op == "spmm_csr":
        A = make_csr(M, K, density, g, dtype).to(device)
        bias = fresh(M, g=g, dtype=dtype).to(device)
        check_spmm(A, fresh(K, N, g=g, dtype=dtype).to(device), bias, activation, backend)
    elif op == "spmm_nm":
        check_spmm(*_nm_product(M, groups, N, pattern, g, dtype, device), activation, backend)
    elif op == "spmm_nm_expand":  # the one-hot tensor-core kernel, for every pattern and size
        from sparsekernels.kernels import tuning

        if device == "cpu" and dtype == torch.bfloat16:  # the interpreter's bf16 tl.dot is broken
            dtype = torch.float16
        W, B, bias = _nm_product(M, groups, N, pattern, g, dtype, device)
        saved, tuning.spmm_nm_expand_takes = tuning.spmm_nm_expand_takes, lambda *_: True
        try:
            check_spmm(W, B, bias, activation, backend)
        finally:
            tuning.spmm_nm_expand_takes = saved
    elif op == "spmm_nm_unpack":  # the dense-tile kernel, wherever it supports the pattern
        from sparsekernels.kernels import nm_unpack_tuning

        if device == "cpu" and dtype == torch.bfloat16:  # the interpreter's bf16 tl.dot is broken
            dtype = torch.float16
        W, B, bias = _nm_product(M, groups, N, pattern, g, dtype, device)
        saved = nm_unpack_tuning.spmm_nm_unpack_config
        tiles = nm_unpack_tuning.SpmmNmUnpackConfig(16, 16, 4, 2, 2, 16)
        nm_unpack_tuning.spmm_nm_unpack_config = lambda *_: tiles
        try:
            check_spmm(W, B, bias, activation, backend)
        finally:
            nm_unpack_tuning.spmm_nm_unpack_config = saved
    elif op == "spmm_nm_transposed":  # W^T @ B, the backward of x: the CSR kernel on W^T
        from sparsekernels.ops.spmm import spmm_nm_raw

        W, _ = make_nm(M, groups, pattern, g, dtype)
        W = W.to(device)
        B = fresh(M, N, g=g, dtype=dtype).to(device)
        n, m, vector, block = pattern
        args = (W.values, W.indices, B, None, "none", n, m, vector, block, True)
        got = spmm_nm_raw(*args, backend=backend)
        dense_t = W.to_dense().t().double()
        assert_close(got, dense_t @ B.double(), dense_t.abs() @ B.double().abs(), dtype)
    elif op == "sddmm":
        P = make_csr(M, N, density, g, dtype).to(device)
        X, Y = fresh(M, K, g=g, dtype=dtype).to(device), fresh(N, K, g=g, dtype=dtype).to(device)
        assert_close(sk.sddmm(X, Y, P, backend=backend).values, *dense_sddmm(X, Y, P), dtype)
    elif op == "softmax":
        check_softmax(make_csr(M, K, density, g, dtype).to(device), 0.6, backend)
    elif op == "depthwise":  # (batch, channels, height, width) from (N, M, K + 1, K + 2)
        N, K = min(N, 3), min(K, 60)  # images: a few, not N x M x K^2 (the GPU draws K to 300)
        x = fresh(N, M, K + 1, K + 2, g=g, dtype=dtype).to(device)
        w, bias = (
            fresh(M, 1, 3, 3, g=g, dtype=dtype).to(device),
            fresh(M, g=g, dtype=dtype).to(device),
        )
        stride = 1 + seed % 2
        got = sk.ops.depthwise_conv2d(x, w, bias, stride, activation, backend=backend)
        out_hw = ((K + 1 - 1) // stride + 1, (K + 2 - 1) // stride + 1)
        assert got.shape == (N, M, *out_hw)
        if M == 0:  # torch's conv2d refuses zero groups: nothing more to compare
            return
        conv = torch.nn.functional.conv2d(x.double(), w.double(), bias.double(), stride, 1, 1, M)
        want = sk.reference.apply_activation(conv, activation or "none")
        bound = torch.nn.functional.conv2d(
            x.double().abs(), w.double().abs(), None, stride, 1, 1, M
        )
        assert_close(got, want, bound + bias.double().abs()[:, None, None], dtype)
    else:  # the fused kernel has no float64; it takes float32 there
        backend = "triton_flash" if op == "attention_flash" else backend
        if backend == "triton_flash" and dtype == F64:
            dtype = torch.float32
        P = make_csr(M, K, density, g).to(device)
        q, k = (
            fresh(1, 2, M, N, g=g, dtype=dtype).to(device),
            fresh(1, 2, K, N, g=g, dtype=dtype).to(device),
        )
        check_attention(q, k, fresh(1, 2, K, 3, g=g, dtype=dtype).to(device), P, None, backend)
