"""CSR @ B on Hopper's tensor cores from bitmap words (spmm_csr_bitmap.py's operand), in Gluon:
the same product as spmm_csr_bitmap.py's Triton kernel, with the gather laid out for L1.

Triton lays that kernel's gather out by its own rules (sm_90 TTGIR: 8 columns a thread, 16
lanes along columns and 2 along rows), so one load instruction reads up to 8 runs of words,
up to 8 L1 wavefronts for 32 two-byte elements. Here a warp's 32 lanes take the 32 columns of
one word of one row, so an instruction's values lie within that word's run of at most 64 bytes
(one or two wavefronts), and each lane's bit is one constant (its masks two registers). A
lane holds its warp's rows and the step's words in registers; their int64 words load as
16-byte vectors, the same for all 32 lanes (a broadcast).

Per element: the bits below the lane's (and), popc, the value's address, the kept test, the
masked 16-bit load, and a 2-byte store into the A tile in shared memory, which wgmma reads
(with B's tile, stored beside it each step). Gluon compiles only for the GPU (no
interpreter): the Triton kernel is its CPU twin in the tests.
"""

from __future__ import annotations

import os

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma

from . import split_k
from ._activation import ACTIVATION_CODES
from ._gluon_bits import wgmma_b_layouts
from ._sizes import cdiv
from .spmm_csr_bitmap import WORD, check_words

_WORD = gl.constexpr(WORD)


@gluon.jit
def _popc(x):
    """Set bits of each 32-bit integer (PTX popc.b32)."""
    return gl.inline_asm_elementwise(
        "popc.b32 $0, $1;", "=r,r", [x], dtype=gl.int32, is_pure=True, pack=1
    )


@gluon.jit
def _step(acc, values, row_words, row_starts, own, below, b, b_cols, mask_bn, w0, end, K,
          stride_bk, a_shared, b_shared, BLOCK_M: gl.constexpr, BLOCK_W: gl.constexpr,
          GATHER: gl.constexpr, B_LOAD: gl.constexpr, MASKED: gl.constexpr):  # fmt: skip
    """acc + the tile of words w0 .. w0 + BLOCK_W @ B's rows under it; MASKED: the last step,
    words from `end` on not there."""
    w = w0 + gl.arange(0, BLOCK_W, layout=gl.SliceLayout(0, gl.SliceLayout(2, GATHER)))
    entry_ptrs = row_words + gl.expand_dims(w, 0)
    if MASKED:
        entry = gl.load(entry_ptrs, mask=gl.expand_dims(w < end, 0), other=0)
    else:
        entry = gl.load(entry_ptrs)
    bitmap = gl.expand_dims(entry.to(gl.int32), 2)  # the low half
    # the word's first kept value, in 32-bit offsets (one add and one wide multiply-add an
    # element, not 64-bit pointer arithmetic)
    first = gl.expand_dims(row_starts, 1) + (entry >> 32).to(gl.int32)
    kept = (bitmap & own) != 0
    at = gl.expand_dims(first, 2) + _popc(bitmap & below)
    a = gl.load(values + at, mask=kept, other=0.0)
    a_shared.store(gl.reshape(a, [BLOCK_M, BLOCK_W * _WORD]))
    ks = w0 * _WORD + gl.arange(0, BLOCK_W * _WORD, layout=gl.SliceLayout(1, B_LOAD))
    b_ptrs = b + gl.expand_dims(ks.to(gl.int64) * stride_bk, 1) + b_cols
    b_mask = gl.expand_dims(mask_bn, 0)
    if MASKED:
        b_mask = b_mask & gl.expand_dims(ks < K, 1)
    b_shared.store(gl.load(b_ptrs, mask=b_mask, other=0.0))
    fence_async_shared()
    return warpgroup_mma(a_shared, b_shared, acc)


@gluon.jit
def _csr_bitmap_wgmma_kernel(
    words,  # (M, WORDS) int64 (spmm_csr_bitmap.bitmap_words), unit stride along WORDS
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
    HAS_BIAS: gl.constexpr,
    ACTIVATION: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_W: gl.constexpr,
    SPLITS: gl.constexpr,
    FUSED: gl.constexpr,
    GATHER: gl.constexpr,  # the layouts: layouts() below
    ACC_LAYOUT: gl.constexpr,
    B_LOAD: gl.constexpr,
    A_SHARED: gl.constexpr,
    B_SHARED: gl.constexpr,
):
    BLOCK_N: gl.constexpr = ACC_LAYOUT.instr_shape[1]
    BLOCK_K: gl.constexpr = BLOCK_W * _WORD
    row_layout: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, GATHER))
    offs_m = gl.program_id(0) * BLOCK_M + gl.arange(0, BLOCK_M, layout=row_layout)
    rows = gl.minimum(offs_m, M - 1).to(gl.int64)  # rows past M repeat the last, not stored
    row_words = gl.expand_dims(words + rows * WORDS, 1)
    row_starts = gl.load(row_offsets + rows).to(gl.int32)  # each row's first value (nnz < 2^31)
    bit = gl.arange(0, _WORD, layout=gl.SliceLayout(0, gl.SliceLayout(1, GATHER)))
    ones = gl.full([_WORD], -1, gl.int32, bit.type.layout)
    own = gl.expand_dims(gl.expand_dims((ones & 1) << bit, 0), 1)  # the lane's column
    below = gl.expand_dims(gl.expand_dims(~(ones << bit), 0), 1)  # the word's earlier columns
    offs_bn = gl.program_id(1) * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, B_LOAD))
    mask_bn = offs_bn < N
    b_cols = gl.expand_dims(offs_bn.to(gl.int64) * stride_bn, 0)
    dtype: gl.constexpr = b.dtype.element_ty
    a_shared = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_K], A_SHARED)
    b_shared = gl.allocate_shared_memory(dtype, [BLOCK_K, BLOCK_N], B_SHARED)
    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, ACC_LAYOUT)
    first = gl.program_id(2) * WORDS_PER_SPLIT
    end = gl.minimum(first + WORDS_PER_SPLIT, WORDS)
    full = first + (end - first) // BLOCK_W * BLOCK_W
    for w0 in range(first, full, BLOCK_W):
        acc = _step(
            acc, values, row_words, row_starts, own, below, b, b_cols, mask_bn, w0, end, K,
            stride_bk, a_shared, b_shared, BLOCK_M, BLOCK_W, GATHER, B_LOAD, False,
        )  # fmt: skip
    if full < end:
        acc = _step(
            acc, values, row_words, row_starts, own, below, b, b_cols, mask_bn, full, end, K,
            stride_bk, a_shared, b_shared, BLOCK_M, BLOCK_W, GATHER, B_LOAD, True,
        )  # fmt: skip
    offs_m = gl.program_id(0) * BLOCK_M + gl.arange(
        0, BLOCK_M, layout=gl.SliceLayout(1, ACC_LAYOUT)
    )
    offs_n = gl.program_id(1) * BLOCK_N + gl.arange(
        0, BLOCK_N, layout=gl.SliceLayout(0, ACC_LAYOUT)
    )
    split_k.end_piece(
        acc, offs_m, offs_n, offs_m < M, offs_n < N, bias, out, partials, counters, N,
        SPLIT_STRIDE, stride_om, stride_on, HAS_BIAS, ACTIVATION, gl.float32, SPLITS, FUSED,
    )  # fmt: skip


def layouts(block_m: int, block_w: int, block_n: int, k_contiguous: bool) -> dict:
    """The kernel's layouts for 4 warps (one warpgroup, block_m 64 or 128). GATHER: the step
    as (rows, words, 32 columns), a warp's lanes along a word's columns, warps along rows,
    the rest (the warp's rows, the step's words) in registers."""
    block_k = block_w * WORD
    return {
        "GATHER": gl.BlockedLayout([1, block_w, 1], [1, 1, 32], [4, 1, 1], [2, 1, 0]),
        "A_SHARED": gl.NVMMASharedLayout(128 if block_k >= 64 else 0, 16, 2),
        **wgmma_b_layouts(block_k, block_n, k_contiguous),
    }


def supports(dtype: torch.dtype, k: int, device: torch.device) -> bool:
    """16-bit values, K < 2^31, on a Hopper GPU (wgmma; Gluon has no interpreter)."""
    if device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    if torch.cuda.get_device_capability(device) != (9, 0):
        return False
    return dtype in (torch.float16, torch.bfloat16) and k < 2**31


def spmm_csr_bitmap_wgmma(
    *,
    words: torch.Tensor,
    row_offsets: torch.Tensor,
    values: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    activation: str,
    block_m: int = 64,
    block_w: int = 4,
    block_n: int = 16,
    split: int = 1,
    fused: bool = True,
) -> torch.Tensor:
    """Launch over out (M, N) = act(A @ B + bias) for a CSR weight A (its row offsets and
    values, and `bitmap_words` of its columns) and B (K, N) in any strides, in B's 16-bit
    dtype. block_m 64 or 128 (one warpgroup), block_n a multiple of 8 up to 256, block_w a
    power of two from 2 (a 64-column step at least). `split` > 1 cuts the words into that
    many ranges, summed in plane order by the last of a tile's ranges (`fused`) or a second
    kernel."""
    rows, cols = out.shape
    k = b.shape[0]
    check_words(words, rows, k)
    if block_m not in (64, 128) or block_n % 8 or not 8 <= block_n <= 256:
        raise ValueError(
            f"block_m must be 64 or 128 and block_n 8-256 by 8, got {block_m}, {block_n}"
        )
    if block_w < 2 or block_w & (block_w - 1):
        raise ValueError(f"block_w must be a power of two from 2, got {block_w}")
    if values.numel() >= 2**31:
        raise ValueError(f"values must number under 2^31 (32-bit offsets), got {values.numel()}")
    if rows == 0 or cols == 0:
        return out
    words = words if words.stride(-1) == 1 else words.contiguous()
    steps_per_split, splits = split_k.ranges(cdiv(words.shape[1], block_w), split)
    partials = split_k.workspace(out, splits, torch.float32)
    grid = (cdiv(rows, block_m), cdiv(cols, block_n), splits)
    fused = fused and splits > 1
    counters = split_k.tile_counters(out.device, grid[0] * grid[1]) if fused else row_offsets
    _csr_bitmap_wgmma_kernel[grid](
        words, values, row_offsets, b, bias if bias is not None else values, out, partials,
        counters, rows, cols, k, words.shape[1], steps_per_split * block_w, rows * cols,
        b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        HAS_BIAS=bias is not None, ACTIVATION=ACTIVATION_CODES[activation], BLOCK_M=block_m,
        BLOCK_W=block_w, SPLITS=splits, FUSED=fused, num_warps=4,
        **layouts(block_m, block_w, block_n, b.stride(0) == 1),
    )  # fmt: skip
    if splits > 1 and not fused:
        split_k.sum_partials(partials, bias, out, activation)
    return out
