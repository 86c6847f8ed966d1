"""The one-token N:M select kernel (x picked by the offset bits, no gathers): in the interpreter
on CPU (small shapes) and compiled on CUDA (gpu), against float64 with poisoned outputs."""

import pytest
import torch

from _helpers import (
    ALL_DTYPES,
    KERNEL_DEVICES,
    assert_close,
    dense_spmm,
    randn,
    random_nm,
    skip_interpreter_on_gpu_machine,
    spmm_bound,
)
from sparsekernels.kernels import nm_decode_tuning
from sparsekernels.kernels.spmm_nm_decode import packed_bits
from sparsekernels.kernels.spmm_nm_select import spmm_nm_select, supports

# every power-of-two m the kernel takes: 1-bit (1:2), 2-bit (2:4), 3-bit (2:8, 1:8) and 4-bit
# offsets (4:16), so trees of one to four levels and words of 8 to 32 slots
PATTERNS = [(2, 4), (2, 8), (1, 8), (1, 2), (4, 16)]
# (block_m, block_g, num_warps): one row, two rows, four rows on two warps
CONFIGS = [(1, 4, 1), (2, 8, 1), (4, 16, 2)]


def _run(W, x, config, bias=None, activation="none", **split):
    out = torch.full((W.shape[0], 1), float("nan"), dtype=x.dtype, device=x.device)
    bits = packed_bits(W.m, 1)
    block_m, block_g, num_warps = config
    spmm_nm_select(
        values=W.values,
        words=W.packed_indices(bits),
        bits=bits,
        x=x,
        bias=bias,
        out=out,
        n=W.n,
        m=W.m,
        activation=activation,
        block_m=block_m,
        block_g=block_g,
        num_warps=num_warps,
        **split,
    )
    return out


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("config", CONFIGS)
def test_select_matches_float64(device, dtype, pattern, config, gen):
    """Rows not a multiple of the tile (the last tile reads a clamped row and stores nothing
    past M), a walk ending in a partial step, bias and ReLU, every dtype (16-bit x read in
    pairs)."""
    skip_interpreter_on_gpu_machine(device)
    n, m = pattern
    rows, cols = 7, m * 13  # 13 groups: never a whole number of steps
    W = random_nm(rows, cols, n, m, gen, dtype=dtype, device=device)
    x = randn(cols, 1, gen=gen, dtype=dtype, device=device)
    bias = randn(rows, gen=gen, dtype=dtype, device=device)
    got = _run(W, x, config, bias=bias, activation="relu")
    want = dense_spmm(W.to_dense(), x, bias, "relu")
    assert_close(got, want, spmm_bound(W.to_dense(), x) + bias.double().abs()[:, None], dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
@pytest.mark.parametrize("pattern", [(2, 8), (1, 8), (1, 4), (4, 8)])
def test_select_few_rows_tile(device, dtype, pattern, gen):
    """The pattern's few-row tile (2:8, 1:8, 1:4: two rows x 512 groups on four warps, a row's
    sum across warps; 4:8 a row a program) on an odd number of rows, one walk of a step and a
    half and one of under a step."""
    skip_interpreter_on_gpu_machine(device)
    n, m = pattern
    tile = nm_decode_tuning.SELECT_FEW_ROWS_TILES[(n, m, torch.bfloat16)]
    for rows, groups in ((5, 700), (3, 200)):
        W = random_nm(rows, m * groups, n, m, gen, dtype=dtype, device=device)
        x = randn(m * groups, 1, gen=gen, dtype=dtype, device=device)
        got = _run(W, x, (tile.block_m, tile.block_g, tile.num_warps))
        want = dense_spmm(W.to_dense(), x, None, "none")
        assert_close(got, want, spmm_bound(W.to_dense(), x), dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
@pytest.mark.parametrize("pattern", [(2, 8), (1, 8), (2, 4)])
def test_select_split_k(device, dtype, pattern, gen):
    """Each row's walk cut into ranges, one program each: 5 steps (the last partial) in 2, 3
    and 5 ranges and in 64 (as many as steps), the last range of a tile adding the planes in
    order (fused) or a second kernel; bias and GELU after the sum; rows off the tile."""
    skip_interpreter_on_gpu_machine(device)
    n, m = pattern
    rows, cols = 7, m * 37  # 37 groups: 4 steps of 8 and a partial one
    W = random_nm(rows, cols, n, m, gen, dtype=dtype, device=device)
    x = randn(cols, 1, gen=gen, dtype=dtype, device=device)
    bias = randn(rows, gen=gen, dtype=dtype, device=device)
    want = dense_spmm(W.to_dense(), x, bias, "gelu")
    bound = spmm_bound(W.to_dense(), x) + bias.double().abs()[:, None]
    for split, fused in ((2, True), (3, False), (5, True), (64, True), (64, False)):
        got = _run(W, x, (2, 8, 1), bias=bias, activation="gelu", split=split, fused=fused)
        assert_close(got, want, bound, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", [(2, 8), (1, 8)])
@pytest.mark.parametrize("split", [4, 16])
def test_select_split_k_llm_shape(pattern, split, gen):
    """An LLM-deep few-row weight split as a route would: 1030 tiles of 4 rows (the last of
    3), each counted in by its ranges, twice in a row (the counters left at zero), the same
    bits every run."""
    n, m = pattern
    W = random_nm(4116 + 3, 8192 + 8 * m, n, m, gen, dtype=torch.bfloat16, device="cuda")
    x = randn(8192 + 8 * m, 1, gen=gen, dtype=torch.bfloat16, device="cuda")
    want = dense_spmm(W.to_dense(), x)
    first = _run(W, x, (4, 256, 2), split=split)
    assert_close(first, want, spmm_bound(W.to_dense(), x), torch.bfloat16)
    assert torch.equal(_run(W, x, (4, 256, 2), split=split), first)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("pattern", [(2, 8), (1, 8), (4, 8), (2, 4)])
@pytest.mark.parametrize("config", [(2, 128, 1), (4, 256, 2), (1, 8, 1)])
def test_select_permuted_picks(dtype, pattern, config, gen):
    """x picked by byte permutes (`permute`: 16-bit x, m = 8; ignored elsewhere): a group's
    offsets in one byte (2:8, 1:8: one table permute for all its values) and in words (4:8),
    rows not a multiple of the tile, a partial last step, bias and ReLU: against float64 and
    bit for bit the picks by selects (the same products in the same order)."""
    n, m = pattern
    rows, cols = 37, m * 301
    W = random_nm(rows, cols, n, m, gen, dtype=dtype, device="cuda")
    x = randn(cols, 1, gen=gen, dtype=dtype, device="cuda")
    bias = randn(rows, gen=gen, dtype=dtype, device="cuda")
    got = _run(W, x, config, bias=bias, activation="relu", permute=True)
    want = dense_spmm(W.to_dense(), x, bias, "relu")
    assert_close(got, want, spmm_bound(W.to_dense(), x) + bias.double().abs()[:, None], dtype)
    assert torch.equal(got, _run(W, x, config, bias=bias, activation="relu"))


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("shape", [(1, 8), (3, 8), (5, 8 * 300)])
def test_select_single_row_one_group_long_rows(device, shape, gen):
    """One row, one group (K = m), and rows of 300 groups (many steps); x a strided view and
    at an odd element offset (copied to the aligned, contiguous x the pairs need)."""
    skip_interpreter_on_gpu_machine(device)
    rows, cols = shape
    W = random_nm(rows, cols, 2, 8, gen, dtype=torch.bfloat16, device=device)
    base = randn(2 * cols + 1, 1, gen=gen, dtype=torch.bfloat16, device=device)
    for x in (base[1 : cols + 1], base[: 2 * cols : 2]):
        got = _run(W, x, (2, 8, 1))
        want = dense_spmm(W.to_dense(), x)
        assert_close(got, want, spmm_bound(W.to_dense(), x), torch.bfloat16)


def test_tile_rows_must_have_accumulators():
    W = random_nm(4, 16, 2, 8, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="block_m must be 1, 2 or 4"):
        _run(W, torch.randn(16, 1, dtype=torch.float64), (8, 4, 1))


def test_supports():
    assert supports(2, 4, 1, 1, 1) and supports(1, 8, 1, 1, 1) and supports(4, 16, 1, 1, 1)
    assert not supports(2, 4, 1, 1, 2)  # two tokens
    assert not supports(3, 8, 1, 1, 1)  # n not a power of two: a word splits a group
    assert not supports(2, 4, 2, 1, 1) and not supports(2, 4, 1, 4, 1)  # block / vector-wise
    assert not supports(1, 32, 1, 1, 1)  # m past 16


def test_route_takes_it_where_timed_at_one_token():
    pick = nm_decode_tuning.spmm_nm_select_config
    bf16, fp16, fp32 = torch.bfloat16, torch.float16, torch.float32
    long_2_8, short_2_8 = nm_decode_tuning.SELECT_TILES[(2, 8, bf16)]
    assert pick(1, 2, 8, 1, 1, bf16, 14336) == long_2_8 and long_2_8.block_m == 4
    assert pick(1, 2, 8, 1, 1, bf16, 4096) == short_2_8 != long_2_8
    assert pick(1, 2, 8, 1, 1, fp16, 4096) == short_2_8
    assert pick(1, 2, 8, 1, 1, fp32, 14336) == short_2_8  # fp32: short tiles on long rows too
    assert pick(1, 4, 8, 1, 1, bf16, 4096) is not None
    assert pick(1, 4, 8, 1, 1, fp16, 4096) is not None  # timed with permuted picks
    assert pick(1, 1, 4, 1, 1, fp16, 4096) is None  # not timed
    assert pick(1, 1, 8, 1, 1, fp32, 4096) is None  # lost to the decode kernel
    assert pick(1, 1, 16, 1, 1, bf16, 4096) is None  # lost: fifteen selects a value
    assert pick(1, 1, 2, 1, 1, bf16, 4096) is None  # lost
    assert pick(1, 2, 8, 1, 1, torch.float64, 4096) is None
    assert pick(2, 2, 8, 1, 1, bf16, 4096) is None  # two tokens
    assert pick(1, 2, 8, 4, 1, bf16, 4096) is None  # vector-wise
    assert pick(1, 2, 8, 1, 2, bf16, 4096) is None  # block-wise
    assert pick(1, 2, 4, 1, 1, bf16, 2**31, 1) is None  # int32 bit and column offsets
    assert pick(1, 2, 4, 1, 1, bf16, 2**31 - 2**20 - 4, 1) is not None
    few = nm_decode_tuning.SELECT_FEW_ROWS_TILE  # few long rows: more programs, more in flight
    assert pick(1, 2, 8, 1, 1, bf16, 4096, 1024) == few == pick(1, 1, 8, 1, 1, bf16, 8192, 2048)
    assert pick(1, 2, 8, 1, 1, bf16, 4096, 4096) == short_2_8  # many rows
    assert pick(1, 2, 8, 1, 1, bf16, 1536, 384) == short_2_8  # short rows
    assert pick(1, 2, 8, 1, 1, fp16, 4096, 1024) == few == pick(1, 1, 4, 1, 1, bf16, 4096, 1024)
    assert pick(1, 4, 8, 1, 1, bf16, 4096, 1024).block_m == 1  # more values a row: one row
    assert pick(1, 4, 8, 1, 1, fp16, 4096, 1024).block_m == 1
    assert pick(1, 2, 4, 1, 1, bf16, 4096, 1024) == pick(1, 2, 4, 1, 1, bf16, 4096)  # not timed


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize(
    "dtype, pattern",
    [(torch.bfloat16, (2, 4)), (torch.float16, (2, 8)), (torch.float32, (2, 8)),
     (torch.bfloat16, (4, 8)), (torch.bfloat16, (1, 4))],
)  # fmt: skip
def test_linear_route_through_select(device, dtype, pattern, gen, monkeypatch):
    """The N:M op's decode path at one token on each routed dtype and a few patterns: linear's
    x^T view and column-major output, bias and GELU, through this kernel (counted) against
    float64."""
    skip_interpreter_on_gpu_machine(device)
    from sparsekernels.ops import _triton_nm

    calls = []
    real = _triton_nm.select.spmm_nm_select
    monkeypatch.setattr(
        _triton_nm.select, "spmm_nm_select", lambda **kw: calls.append(1) or real(**kw)
    )
    n, m = pattern
    rows, cols = 9, m * 35
    W = random_nm(rows, cols, n, m, gen, dtype=dtype, device=device)
    x = randn(1, cols, gen=gen, dtype=dtype, device=device)
    bias = randn(rows, gen=gen, dtype=dtype, device=device)
    out = torch.full((1, rows), float("nan"), dtype=dtype, device=device).t()
    _triton_nm._decode(W.values, W.indices, x.t(), bias, out, "gelu", n, m, 1, 1)
    assert calls == [1]
    want = dense_spmm(W.to_dense(), x.t(), bias, "gelu")
    bound = spmm_bound(W.to_dense(), x.t()) + bias.double().abs()[:, None]
    assert_close(out, want, bound, dtype)
