"""N:M SpMM on tensor cores for vector-wise weights whose vectors are 8 rows (v % 8 == 0), any
n:m, no blocks: out = act(W @ B + bias), on the condensed K.

The rows of an 8-row vector keep the same columns, so the vector's slots gather B's rows once
and multiply the values as stored: no compare-select, and the tensor cores do the stored work
(twice it here, below). A tensor-core tile is 16 rows, two vectors with their own columns, so
a step stacks both: A = [values_a 0; 0 values_b] (each slot a column pair, zeros in the other
vector's rows) against B = [B rows of a's columns; B rows of b's], one 16 x 2S x N dot. The
one-hot kernel (spmm_nm_expand.py) instead makes m dots a step, each with a compare-select per
slot: at m = 16 / 32 about 1.8 / 3.4 warp instructions a stored element where this compiles to
~0.5 (sm_90, Triton 3.6; a helper's analysis, benchmarks/results/cpu/2026-12-06-m16-analysis/
report.md: 2:16 v=8 at 24 tokens ran 20.5 us on 4096^2 against dense 14.4, 4:32 34.6).

linear takes it for 8-row vectors at m = 16 / 32 and 17-48 tokens, 1.2-6x faster than the
one-hot kernel or densifying there (H100; nm_pairs_tuning).
`split` cuts the slots into ranges for weights of few rows; a second kernel adds them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import split_k
from ._activation import ACTIVATION_CODES
from ._sizes import cdiv


@triton.jit
def _nm_pairs_kernel(
    values,  # (M, S) compressed values, S = groups * n, unit stride along S
    indices,  # (ceil(M / VECTOR), S) uint8 offsets of each slot in its group, unit stride
    b,  # (K, B_COLS) row-major: a gathered row is one contiguous run of tokens
    bias,
    out,  # (M, N): strides stride_om, stride_on; with PARTIAL the (splits, M, N) planes
    M,
    N,
    B_COLS,  # B's columns, read past N (never stored): a multiple of 16 keeps loads wide
    SLOTS,
    SLOTS_PER_SPLIT,  # a multiple of BLOCK_S: program_id(2) takes its range of slots
    SPLIT_STRIDE,  # M * N
    INDEX_ROWS,  # ceil(M / VECTOR)
    stride_vm,
    stride_im,
    stride_bk,
    stride_om,
    stride_on,
    N_KEEP: tl.constexpr,
    M_GROUP: tl.constexpr,
    VECTOR: tl.constexpr,  # a multiple of 8
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    PRECISION: tl.constexpr,  # "ieee" for float32 operands
    PAIRS: tl.constexpr,  # 16-row pairs of vectors a program
    BLOCK_S: tl.constexpr,  # slots a step (the dot is 2 x BLOCK_S deep)
    BLOCK_N: tl.constexpr,
    PARTIAL: tl.constexpr,
    UPCAST: tl.constexpr,  # the CPU interpreter miscomputes bf16 tl.dot: use fp32
    BLOCKED: tl.constexpr = False,  # A as two S-wide blocks, B's offsets narrow (below)
    WORDS: tl.constexpr = False,  # (with BLOCKED) the offsets read 4 to an int32 word
):
    pair = tl.program_id(0) * PAIRS + tl.arange(0, PAIRS)
    rows = pair[:, None] * 16 + tl.arange(0, 16)[None, :]  # (PAIRS, 16)
    mask_rows = rows < M
    upper = (tl.arange(0, 16) >= 8)[None, :, None]  # the pair's second vector
    eights = pair[:, None] * 2 + tl.arange(0, 2)[None, :]  # (PAIRS, 2) 8-row vectors
    index_rows = (eights * 8) // VECTOR
    mask_index = index_rows < INDEX_ROWS
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_bn = offs_n < B_COLS
    acc = tl.zeros((PAIRS, 16, BLOCK_N), dtype=tl.float32)
    first = tl.program_id(2) * SLOTS_PER_SPLIT
    ks = tl.arange(0, 2 * BLOCK_S)
    for s0 in range(first, tl.minimum(first + SLOTS_PER_SPLIT, SLOTS), BLOCK_S):
        slots = s0 + tl.arange(0, BLOCK_S)
        mask_s = slots < SLOTS
        if BLOCKED:
            a, gathered = _blocked_step(
                values, indices, b, rows, mask_rows, index_rows, mask_index, offs_n, mask_bn,
                ks, s0, SLOTS, stride_vm, stride_im, stride_bk, N_KEEP, M_GROUP, PAIRS,
                BLOCK_S, WORDS,
            )  # fmt: skip
        else:
            vals = tl.load(
                values + rows[:, :, None].to(tl.int64) * stride_vm + slots[None, None, :],
                mask=mask_rows[:, :, None] & mask_s[None, None, :],
                other=0.0,
            )
            zeros = tl.zeros_like(vals)
            # (PAIRS, 16, 2 x BLOCK_S): column 2s + h holds slot s of vector h, zero in the other's
            a = tl.reshape(
                tl.join(tl.where(upper, zeros, vals), tl.where(upper, vals, zeros)),
                (PAIRS, 16, 2 * BLOCK_S),
            )
            offsets = tl.load(
                indices + index_rows[:, None, :].to(tl.int64) * stride_im + slots[None, :, None],
                mask=mask_index[:, None, :] & mask_s[None, :, None],
                other=0,
            ).to(tl.int32)  # (PAIRS, BLOCK_S, 2)
            columns = (slots // N_KEEP)[None, :, None] * M_GROUP + offsets
            columns = tl.reshape(columns, (PAIRS, 2 * BLOCK_S))
            live = tl.reshape(
                tl.broadcast_to(mask_s[None, :, None], (PAIRS, BLOCK_S, 2)), (PAIRS, 2 * BLOCK_S)
            )
            gathered = tl.load(
                b + columns[:, :, None].to(tl.int64) * stride_bk + offs_n[None, None, :],
                mask=live[:, :, None] & mask_bn[None, None, :],
                other=0.0,
            )  # (PAIRS, 2 x BLOCK_S, BLOCK_N)
        if UPCAST:
            a = a.to(tl.float32)
            gathered = gathered.to(tl.float32)
        acc = tl.dot(a, gathered, acc, input_precision=PRECISION)
    offs_m = tl.program_id(0) * (PAIRS * 16) + tl.arange(0, PAIRS * 16)
    split_k.store(
        tl.reshape(acc, (PAIRS * 16, BLOCK_N)),
        offs_m,
        offs_n,
        offs_m < M,
        offs_n < N,
        bias,
        out,
        N,
        SPLIT_STRIDE,
        stride_om,
        stride_on,
        HAS_BIAS,
        ACTIVATION,
        tl.float32,
        PARTIAL,
        2,
    )


@triton.jit
def _blocked_step(
    values, indices, b, rows, mask_rows, index_rows, mask_index, offs_n, mask_bn, ks, s0,
    SLOTS, stride_vm, stride_im, stride_bk, N_KEEP: tl.constexpr, M_GROUP: tl.constexpr,
    PAIRS: tl.constexpr, BLOCK_S: tl.constexpr, WORDS: tl.constexpr,
):  # fmt: skip
    """A step's (A, gathered B) with A = [values_a 0; 0 values_b] as two S-wide column blocks
    (k = h x S + s) read by one masked load, so the pipeliner stages it in shared memory as it
    is (the joined form went through registers and shared memory again); B's rows in the
    same order, their offsets in int32 from the step's base; with WORDS the offsets come 4
    to an int32 word, a load wide enough to be pipelined (2 bytes a thread was a plain load
    waited on each step). sm_90 compiles: the loop 1.6-2.2x shorter on every routed tile
    (benchmarks/results/cpu/2026-12-06-pairs-analysis/report.md)."""
    in_block = (ks // BLOCK_S)[None, None, :] == (tl.arange(0, 16) // 8)[None, :, None]
    slot_k = s0 + ks % BLOCK_S
    a = tl.load(
        values + rows[:, :, None].to(tl.int64) * stride_vm + slot_k[None, None, :],
        mask=mask_rows[:, :, None] & in_block & (slot_k < SLOTS)[None, None, :],
        other=0.0,
    )  # (PAIRS, 16, 2 x BLOCK_S)
    if WORDS:  # (SLOTS, stride_im and s0 multiples of 4: the launch checks)
        word = s0 // 4 + tl.arange(0, BLOCK_S // 4)
        packed = tl.load(
            indices.to(tl.pointer_type(tl.int32))
            + index_rows[:, :, None] * (stride_im // 4)
            + word[None, None, :],
            mask=mask_index[:, :, None] & (word * 4 < SLOTS)[None, None, :],
            other=0,
        )  # (PAIRS, 2, BLOCK_S / 4), little-endian
        shifts = tl.arange(0, 4) * 8
        offsets = tl.reshape(
            (packed[:, :, :, None] >> shifts[None, None, None, :]) & 0xFF, (PAIRS, 2, BLOCK_S)
        )
    else:
        slots = s0 + tl.arange(0, BLOCK_S)
        offsets = tl.load(
            indices + index_rows[:, :, None].to(tl.int64) * stride_im + slots[None, None, :],
            mask=mask_index[:, :, None] & (slots < SLOTS)[None, None, :],
            other=0,
        ).to(tl.int32)  # (PAIRS, 2, BLOCK_S)
    live = tl.reshape(
        tl.broadcast_to((s0 + tl.arange(0, BLOCK_S) < SLOTS)[None, None, :], (PAIRS, 2, BLOCK_S)),
        (PAIRS, 2 * BLOCK_S),
    )
    if BLOCK_S % N_KEEP == 0:  # each step starts a group: offsets from the step's first column
        within = offsets + ((tl.arange(0, BLOCK_S) // N_KEEP) * M_GROUP)[None, None, :]
        step_b = b + (tl.full((), 0, tl.int64) + (s0 // N_KEEP) * M_GROUP) * stride_bk
        gathered = tl.load(
            step_b + tl.reshape(within, (PAIRS, 2 * BLOCK_S))[:, :, None] * stride_bk
            + offs_n[None, None, :],
            mask=live[:, :, None] & mask_bn[None, None, :],
            other=0.0,
        )  # fmt: skip
    else:
        columns = offsets + (((s0 + tl.arange(0, BLOCK_S)) // N_KEEP) * M_GROUP)[None, None, :]
        gathered = tl.load(
            b + tl.reshape(columns, (PAIRS, 2 * BLOCK_S))[:, :, None].to(tl.int64) * stride_bk
            + offs_n[None, None, :],
            mask=live[:, :, None] & mask_bn[None, None, :],
            other=0.0,
        )  # fmt: skip
    return a, gathered


def supports(vector: int, block: int, k: int, dtype: torch.dtype) -> bool:
    """Vectors of a multiple of 8 rows, no blocks, half precision or float32, K < 2^31."""
    half_or_single = dtype in (torch.float16, torch.bfloat16, torch.float32)
    return vector % 8 == 0 and block == 1 and k < 2**31 and half_or_single


def spmm_nm_pairs(
    *,
    values: torch.Tensor,
    indices: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    n: int,
    m: int,
    vector: int,
    activation: str,
    pairs: int,
    block_s: int,
    block_n: int,
    num_warps: int,
    num_stages: int,
    split: int = 1,
    blocked: bool = False,
) -> torch.Tensor:
    """Launch over out (M, N), pairs x 16 rows a program. values (M, S) and indices
    (NMMatrix.indices, uint8) need unit stride along their last dim, b (K, at least N columns)
    along its rows; pairs, block_s (>= 8) and block_n (>= 16) powers of two. `split` > 1 cuts
    the slots into that many ranges (fewer where one would be empty), summed by a second
    kernel. b's columns past N are read (wide loads) and never stored. `blocked` takes the
    blocked step (_blocked_step: the route's, 1.1-2x faster; 5 stages keep its gather
    double-buffered)."""
    if vector % 8:
        raise ValueError(f"vector must be a multiple of 8, got {vector}")
    rows, cols = out.shape
    if rows == 0 or cols == 0:
        return out
    if b.shape[1] < cols:
        raise ValueError(f"b needs at least out's {cols} columns, got {b.shape[1]}")
    if b.stride(1) != 1:
        raise ValueError(f"b needs unit stride along its rows, got strides {b.stride()}")
    tiles = (("pairs", pairs, 1), ("block_s", block_s, 8), ("block_n", block_n, 16))
    for name, size, least in tiles:
        if size < least or size & (size - 1):
            raise ValueError(f"{name} must be a power of two of at least {least}, got {size}")
    slots = values.shape[1]
    steps_per_split, splits = split_k.ranges(cdiv(slots, block_s), split)
    partials = split_k.workspace(out, splits, torch.float32)
    grid = (cdiv(rows, 16 * pairs), cdiv(cols, block_n), splits)
    upcast = values.device.type == "cpu" and values.dtype == torch.bfloat16  # (the interpreter)
    _nm_pairs_kernel[grid](
        values,
        indices,
        b,
        bias if bias is not None else values,
        partials,
        rows,
        cols,
        b.shape[1],
        slots,
        steps_per_split * block_s,
        rows * cols,
        indices.shape[0],
        values.stride(0),
        indices.stride(0),
        b.stride(0),
        out.stride(0),
        out.stride(1),
        N_KEEP=n,
        M_GROUP=m,
        VECTOR=vector,
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        PRECISION="ieee" if values.dtype == torch.float32 or upcast else "tf32",
        PAIRS=pairs,
        BLOCK_S=block_s,
        BLOCK_N=block_n,
        PARTIAL=splits > 1,
        UPCAST=upcast,
        BLOCKED=blocked,
        WORDS=blocked and _words_aligned(indices, slots),
        num_warps=num_warps,
        num_stages=num_stages,
    )
    if splits > 1:
        split_k.sum_partials(partials, bias, out, activation)
    return out


def _words_aligned(indices: torch.Tensor, slots: int) -> bool:
    """Whether each index row reads as whole int32 words: 4-byte aligned rows of a multiple of
    4 slots."""
    rows_aligned = indices.shape[0] <= 1 or indices.stride(0) % 4 == 0
    return slots % 4 == 0 and rows_aligned and indices.data_ptr() % 4 == 0
