"""CSR @ B on tensor cores: each step decodes the weight's kept values into a dense register tile
from a bitmap of its 32-column words, then one tl.dot ("load as sparse, compute as dense").

Why: at 4-16 tokens the CSR few-token kernel gathers a row of B for every stored entry (16-32
bytes each) and stops at about one entry a clock per multiprocessor: 70% on 4096 x 14336 at
16 tokens takes 73 us, 0.46x dense. Here B's tile is loaded once a step for BLOCK_M rows and
the tokens ride the tensor cores, so the cost is the decode, a few integer operations per
weight element, whatever the token count.

The operand (`bitmap_words`, prepared once per weight): an int64 per 32 columns of a row, the
columns kept as a bitmap in its low half and, in its high half, how many values of the row
come before the word. With CSR's own row offsets and values (row-major, columns rising) an
element's value sits at row_start + before + popc(bitmap & bits below it), so a step needs no
prefix sum across threads (the first prototype's, benchmarks/sweeps/bitmap_sweep.py, lost
everywhere). The column indices are not read: 2 bytes a kept value plus 0.25 a weight
element, 0.85 bytes an element at 70% against CSR's 1.2 and dense's 2.

Compiled for sm_90 (benchmarks/sweeps/sm90_compile_stats.py "csr bitmap") the loop takes 13-16
instructions a weight element (a popc, the kept test, a 64-bit address, the masked 16-bit
load and the zero it leaves, the tile's way into the MMA's registers): about 25-30 us on
4096 x 14336 whatever the density, if issue-bound. So it cannot beat the CSR one-token
kernel (21 us at 70%), but may halve the few-token kernel's 50-74 us at 8-16 tokens. Not
routed until benchmarks/sweeps/csr_bitmap_cold.py has run on the H200.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from . import split_k
from ._activation import ACTIVATION_CODES
from ._sizes import cdiv

WORD = 32  # columns a bitmap word covers
_WORD = tl.constexpr(WORD)  # (the kernel's)


def bitmap_words(
    row_offsets: torch.Tensor, column_indices: torch.Tensor, rows: int, cols: int
) -> torch.Tensor:
    """(rows, ceil(cols / 32)) int64: bit c % 32 of word c // 32 set where column c is kept
    (low half), and the count of the row's kept values in earlier words (high half)."""
    words = cdiv(cols, WORD)
    device = column_indices.device
    counts = row_offsets[1:] - row_offsets[:-1]
    row_of = torch.repeat_interleave(torch.arange(rows, device=device), counts.long())
    cells = row_of * words + column_indices.long() // WORD
    bitmap = torch.zeros(rows * words, dtype=torch.int64, device=device)
    bitmap.scatter_add_(0, cells, torch.ones_like(cells) << (column_indices.long() % WORD))
    kept = torch.zeros(rows * words, dtype=torch.int64, device=device)
    kept.scatter_add_(0, cells, torch.ones_like(cells))
    kept = kept.view(rows, words)
    before = kept.cumsum(1) - kept
    return (before << 32) | bitmap.view(rows, words)


def check_words(words: torch.Tensor, rows: int, k: int) -> None:
    """ValueError unless `words` has bitmap_words' type and shape for a (rows, k) weight."""
    if words.shape != (rows, cdiv(k, WORD)) or words.dtype != torch.int64:
        raise ValueError(
            f"words must be bitmap_words of a ({rows}, {k}) weight: int64 of shape "
            f"({rows}, {cdiv(k, WORD)}), got {words.dtype} {tuple(words.shape)}"
        )


@triton.jit
def _popc(x, HW_POPC: tl.constexpr):
    """Set bits of each uint32: the hardware's popc compiled, bit arithmetic in the
    interpreter (which has no libdevice)."""
    if HW_POPC:
        return tl.extra.cuda.libdevice.popc(x.to(tl.int32, bitcast=True))
    x = x - ((x >> 1) & 0x55555555)
    x = (x & 0x33333333) + ((x >> 2) & 0x33333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F
    return ((x * 0x01010101) >> 24).to(tl.int32)


@triton.jit
def _csr_bitmap_kernel(
    words,  # (M, WORDS) int64 (bitmap_words), unit stride along WORDS
    values,  # (nnz,) the CSR values
    row_offsets,  # (M + 1,)
    b,  # (K, N): strides stride_bk, stride_bn
    bias,
    out,  # (M, N)
    partials,  # with SPLITS > 1 the (SPLITS, M, N) float32 workspace
    counters,  # with FUSED an int32 a tile, zero (split_k.tile_counters)
    M,
    N,
    K,
    WORDS,
    WORDS_PER_SPLIT,  # a multiple of BLOCK_W: program_id(2) takes its range of words
    SPLIT_STRIDE,  # M * N
    stride_bk,
    stride_bn,
    stride_om,
    stride_on,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_W: tl.constexpr,  # words a step: the dot is 32 * BLOCK_W deep
    BLOCK_N: tl.constexpr,
    SPLITS: tl.constexpr,
    FUSED: tl.constexpr,
    HW_POPC: tl.constexpr,
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    rows = tl.minimum(offs_m, M - 1).to(tl.int64)  # rows past M repeat the last, not stored
    row_starts = tl.load(row_offsets + rows).to(tl.int32)  # each row's first value
    b_cols = offs_n[None, :].to(tl.int64) * stride_bn
    cols = tl.arange(0, BLOCK_W * _WORD)  # the step's columns, a word's 32 side by side
    own = tl.full((BLOCK_W * _WORD,), 1, tl.uint32) << (cols % _WORD).to(tl.uint32)
    below = own - 1  # the bits of the word's earlier columns
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    first = tl.program_id(2) * WORDS_PER_SPLIT
    end = tl.minimum(first + WORDS_PER_SPLIT, WORDS)
    for w0 in range(first, end, BLOCK_W):
        # the tile as (columns, rows): Triton lays a gather's first axis along a warp's lanes
        # (sm_90 TTGIR: 8 columns a thread, 16 lanes along columns, 2 along rows), so a load
        # instruction reads 8 runs of words (rows first: lanes across 16 rows, 32 runs)
        w = w0 + cols // _WORD  # each column's word (the same for 32 columns: one broadcast)
        entry = tl.load(
            words + rows[None, :] * WORDS + w[:, None], mask=(w < end)[:, None], other=0
        )
        bitmap = entry.to(tl.uint32)  # the low half
        kept = (bitmap & own[:, None]) != 0
        at = (
            row_starts[None, :]
            + (entry >> 32).to(tl.int32)
            + _popc(bitmap & below[:, None], HW_POPC)
        )
        a = tl.trans(tl.load(values + at, mask=kept, other=0.0))
        ks = w0 * _WORD + tl.arange(0, BLOCK_W * _WORD)
        b_tile = tl.load(
            b + ks[:, None].to(tl.int64) * stride_bk + b_cols,
            mask=(ks < K)[:, None] & mask_n[None, :],
            other=0.0,
        )
        acc = tl.dot(a, b_tile, acc)
    split_k.end_piece(
        acc, offs_m, offs_n, mask_m, mask_n, bias, out, partials, counters, N, SPLIT_STRIDE,
        stride_om, stride_on, HAS_BIAS, ACTIVATION, tl.float32, SPLITS, FUSED,
    )  # fmt: skip


def supports(dtype: torch.dtype, k: int) -> bool:
    """16-bit values (the tensor cores' inputs, float32 sums); K < 2^31."""
    return dtype in (torch.float16, torch.bfloat16) and k < 2**31


def spmm_csr_bitmap(
    *,
    words: torch.Tensor,
    row_offsets: torch.Tensor,
    values: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    activation: str,
    block_m: int,
    block_w: int,
    block_n: int,
    num_warps: int,
    num_stages: int,
    split: int = 1,
    fused: bool = True,
) -> torch.Tensor:
    """Launch over out (M, N) = act(A @ B + bias) for a CSR weight A (its row offsets and
    values, and `bitmap_words` of its columns) and B (K, N) in any strides, in B's 16-bit
    dtype. block_m and block_n powers of two of at least 16 (tl.dot's smallest tile), block_w
    a power of two. `split` > 1 cuts the words into that many ranges (fewer where one would be
    empty), summed in plane order by the last of a tile's ranges (`fused`) or a second
    kernel."""
    rows, cols = out.shape
    k = b.shape[0]
    check_words(words, rows, k)
    if min(block_m, block_n) < 16 or block_w & (block_w - 1):
        raise ValueError(
            f"block_m and block_n must be at least 16 and block_w a power of two, got "
            f"{block_m}, {block_n}, {block_w}"
        )
    if rows == 0 or cols == 0:
        return out
    words = words if words.stride(-1) == 1 else words.contiguous()
    steps_per_split, splits = split_k.ranges(cdiv(words.shape[1], block_w), split)
    partials = split_k.workspace(out, splits, torch.float32)
    grid = (cdiv(rows, block_m), cdiv(cols, block_n), splits)
    fused = fused and splits > 1
    counters = split_k.tile_counters(out.device, grid[0] * grid[1]) if fused else row_offsets
    _csr_bitmap_kernel[grid](
        words, values, row_offsets, b, bias if bias is not None else values, out, partials,
        counters, rows, cols, k, words.shape[1], steps_per_split * block_w, rows * cols,
        b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        HAS_BIAS=bias is not None, ACTIVATION=ACTIVATION_CODES[activation], BLOCK_M=block_m,
        BLOCK_W=block_w, BLOCK_N=block_n, SPLITS=splits, FUSED=fused,
        HW_POPC=os.environ.get("TRITON_INTERPRET") != "1", num_warps=num_warps,
        num_stages=num_stages,
    )  # fmt: skip
    if splits > 1 and not fused:
        split_k.sum_partials(partials, bias, out, activation)
    return out
