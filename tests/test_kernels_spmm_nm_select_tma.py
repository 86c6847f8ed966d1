"""The one-token N:M select kernel fed by TMA (tensor descriptors): in the interpreter on CPU
(small shapes) and compiled on CUDA (gpu), against float64 with poisoned outputs."""

import pytest
import torch

from _helpers import (
    KERNEL_DEVICES,
    assert_close,
    dense_spmm,
    randn,
    random_nm,
    skip_interpreter_on_gpu_machine,
    spmm_bound,
)
from sparsekernels.kernels.spmm_nm_decode import packed_bits
from sparsekernels.kernels.spmm_nm_select_tma import spmm_nm_select_tma, supports

# one or two kept a group, offsets of 2 bits (m = 4: two groups a byte), 4 bits (m = 8 and 16:
# 1:8 two groups a byte, 2:8 and 2:16 one), so one to four select levels
PATTERNS = [(2, 8), (1, 8), (2, 4), (2, 16), (1, 16)]
# (block_m, block_g, num_warps, stages): one row, two rows pipelined, four rows on two warps
CONFIGS = [(1, 32, 1, 1), (2, 32, 1, 3), (4, 64, 2, 2)]
HALF = [torch.bfloat16, torch.float16]


def _run(W, x, config, bias=None, activation="none"):
    out = torch.full((W.shape[0], 1), float("nan"), dtype=x.dtype, device=x.device)
    bits = packed_bits(W.m, 1)
    block_m, block_g, num_warps, stages = config
    words = W.packed_indices(bits)
    assert supports(W.values, words, W.n, W.m, bits)
    spmm_nm_select_tma(
        values=W.values, words=words, bits=bits, x=x, bias=bias, out=out, n=W.n, m=W.m,
        activation=activation, block_m=block_m, block_g=block_g, num_warps=num_warps,
        stages=stages,
    )  # fmt: skip
    return out


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("config", CONFIGS)
def test_select_tma_matches_float64(device, dtype, pattern, config, gen):
    """7 rows (the last tile's boxes past the weight read zeros, nothing stored past M), 160
    groups (a walk ending in a partial step), bias and ReLU."""
    skip_interpreter_on_gpu_machine(device)
    n, m = pattern
    rows, cols = 7, m * 160
    W = random_nm(rows, cols, n, m, gen, dtype=dtype, device=device)
    x = randn(cols, 1, gen=gen, dtype=dtype, device=device)
    bias = randn(rows, gen=gen, dtype=dtype, device=device)
    got = _run(W, x, config, bias=bias, activation="relu")
    want = dense_spmm(W.to_dense(), x, bias, "relu")
    assert_close(got, want, spmm_bound(W.to_dense(), x) + bias.double().abs()[:, None], dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_select_tma_single_row_strided_x(device, gen):
    """One row of 32 groups (one step), x a strided view at an odd offset (copied)."""
    skip_interpreter_on_gpu_machine(device)
    cols = 8 * 32
    W = random_nm(1, cols, 2, 8, gen, dtype=torch.bfloat16, device=device)
    base = randn(2 * cols + 1, 1, gen=gen, dtype=torch.bfloat16, device=device)
    for x in (base[1 : cols + 1], base[: 2 * cols : 2]):
        got = _run(W, x, (1, 32, 1, 2))
        assert_close(got, dense_spmm(W.to_dense(), x), spmm_bound(W.to_dense(), x), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", [(2, 8), (1, 8), (2, 4)])
@pytest.mark.parametrize("config", [(2, 128, 1, 3), (4, 256, 2, 4)])
def test_select_tma_llm_shape(pattern, config, gen):
    """An LLM-deep weight (1031 rows: the last tile partial; 8192 + 2 steps of groups), the
    pipelined walk many steps long; the same bits on a second run."""
    n, m = pattern
    W = random_nm(1031, 8192 + 2 * 256 * m, n, m, gen, dtype=torch.bfloat16, device="cuda")
    x = randn(W.shape[1], 1, gen=gen, dtype=torch.bfloat16, device="cuda")
    first = _run(W, x, config)
    assert_close(first, dense_spmm(W.to_dense(), x), spmm_bound(W.to_dense(), x), torch.bfloat16)
    assert torch.equal(_run(W, x, config), first)


def test_supports_needs_tma_alignment():
    gen = torch.Generator().manual_seed(0)
    bits = packed_bits(8, 1)
    W = random_nm(4, 8 * 160, 2, 8, gen, dtype=torch.bfloat16)
    assert supports(W.values, W.packed_indices(bits), 2, 8, bits)
    odd = random_nm(4, 8 * 77, 2, 8, gen, dtype=torch.bfloat16)  # rows of 308 bytes
    assert not supports(odd.values, odd.packed_indices(bits), 2, 8, bits)
    wide = random_nm(4, 8 * 160, 2, 8, gen, dtype=torch.float32)
    assert not supports(wide.values, wide.packed_indices(bits), 2, 8, bits)
    four = random_nm(4, 8 * 160, 4, 8, gen, dtype=torch.bfloat16)
    assert not supports(four.values, four.packed_indices(bits), 4, 8, bits)  # 16 bits a group


def test_tile_sizes_checked():
    W = random_nm(4, 8 * 160, 2, 8, torch.Generator().manual_seed(0), dtype=torch.bfloat16)
    x = torch.randn(8 * 160, 1, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="block_m must be 1, 2 or 4"):
        _run(W, x, (8, 32, 1, 1))
    with pytest.raises(ValueError, match="block_g must be a power of two"):
        _run(W, x, (2, 8, 1, 1))  # 8 offset bytes: under a TMA box's 16
    with pytest.raises(ValueError, match="block_g must be a power of two"):
        _run(W, x, (2, 512, 1, 1))  # past a box's 256
