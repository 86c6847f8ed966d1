"""N:M SpMM for a few dozen tokens on tensor cores: out = act(W @ B + bias).

"Load as sparse, compute as dense" (Flash-LLM, SpInfer) without building the dense tile: W @ B
is the sum over the m positions p of a group of (the kept values whose column in their group is
p) @ (B's row at position p of each group). So a step loads a (BLOCK_M rows x BLOCK_S slots)
tile of compressed values and their uint8 offsets (NMMatrix.indices as stored), the only bytes
of W that travel, and makes m plain tl.dot calls on 2-D tiles: A_p = where(column == p, values,
0) against the (BLOCK_S, BLOCK_N) tile of B rows (group * m + p). Tensor cores do n times a
dense tile's work (idle at these token counts anyway); each slot costs one compare-select per
position.

On the H200, 1:8 bf16 (results/nvidia-h200/2026-11-30/at-31eeef3/nm_expand_split.txt, CUDA
graphs): 22.9 / 23.7 / 27.3 us at 16 / 32 / 64 tokens on 14336 x 4096 (1.34x / 1.30x / 1.14x
dense), 25.6 / 26.1 / 30.2 on 4096 x 14336 (1.26x / 1.26x / 1.20x). Offsets bit-packed in int32
words, read one word per slot, took 3.5x longer (at-15b48bc): uint8 offsets load as wide
vectors. At 2:8 and 2:4 it beats the other routes but not cuBLAS on the dense weight
(tuning.EXPAND_GROUPED_PATTERNS).

The grouped form (tuning.EXPAND_GROUPED_PATTERNS) reshapes the tile to (rows, groups, n) and
sums over the n slots of a group where their column is p: at most one kept slot sits at each
position, so the sum is exact and is the dense column p of each group. Each dot is then as deep
as the step's groups (n times shallower) and each B row loads once, as in a dense product:
2:8 at 64 tokens 58.7 us against 67.9 in the slot form, 4:8 at 128 tokens 141 against 491. Its
compile time grows fast with n and m (16:32 took minutes).

Split-K (`split`): a weight with few rows fills few programs (4096 x 14336 at 16 tokens: 64
programs of 64 rows for 132 multiprocessors: 40.8 us, 0.79x dense), so the slots may be cut
into `split` ranges, one program each (25.6 us with 2-4 ranges); each writes its float32
partial sum to a workspace, and a second kernel (split_k.py) adds the partials in a fixed
order and applies the epilogue. Each output is a fixed sum order either way: deterministic, no
atomics.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import split_k
from ._activation import ACTIVATION_CODES
from ._sizes import cdiv


@triton.jit
def _nm_expand_dot_kernel(
    values,  # (M, S) compressed values, S = groups * n, unit stride along S
    indices,  # (ceil(M / VECTOR), S / BLOCK) uint8 offsets of each slot's block, unit stride
    b,  # (K, N): strides stride_bk, stride_bn
    bias,
    out,  # (M, N): strides stride_om, stride_on
    M,
    N,
    B_COLS,  # B's columns, read past N (never stored): a multiple of 16 keeps B's loads wide
    SLOTS,  # S
    SLOTS_PER_SPLIT,  # a multiple of BLOCK_S: program_id(2) takes its range of slots
    SPLIT_STRIDE,  # M * N: PARTIAL writes out[program_id(2)] of the (splits, M, N) workspace
    stride_vm,
    stride_im,
    stride_bk,
    stride_bn,
    stride_om,
    stride_on,
    N_KEEP: tl.constexpr,
    M_GROUP: tl.constexpr,
    VECTOR: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    PRECISION: tl.constexpr,  # "ieee" for float32 operands (TF32 would lose precision)
    BLOCK_M: tl.constexpr,
    BLOCK_S: tl.constexpr,  # compressed slots a step: at least 16 (GROUPED: 16 groups)
    BLOCK_N: tl.constexpr,
    GROUPED: tl.constexpr,  # n a power of two above 1: fold each group's slots
    PARTIAL: tl.constexpr,  # write the float32 sum to out[program_id(2)], no epilogue
    UPCAST: tl.constexpr,  # the CPU interpreter miscomputes bf16 tl.dot: use fp32
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    # B's loads mask on its own width: with N itself (24 tokens) its tiles load 2 bytes a
    # thread, unpipelined; with 16 | B_COLS as 8-byte async copies (sm_90 SASS)
    mask_bn = offs_n < B_COLS
    rows = offs_m.to(tl.int64)
    index_rows = tl.where(mask_m, rows // VECTOR, 0)
    b_cols = offs_n[None, :].to(tl.int64) * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    first = tl.program_id(2) * SLOTS_PER_SPLIT
    for s0 in range(first, tl.minimum(first + SLOTS_PER_SPLIT, SLOTS), BLOCK_S):
        slots = s0 + tl.arange(0, BLOCK_S)
        mask_s = slots < SLOTS
        mask = mask_m[:, None] & mask_s[None, :]
        vals = tl.load(values + rows[:, None] * stride_vm + slots[None, :], mask=mask, other=0.0)
        offsets = tl.load(
            indices + index_rows[:, None] * stride_im + (slots // BLOCK)[None, :],
            mask=mask,
            other=0,
        ).to(tl.int32)
        column = offsets * BLOCK + (slots % BLOCK)[None, :]  # the slot's column in its group
        if GROUPED:
            # whole groups a step: fold a group's n slots into one (rows, groups) tile per
            # position (at most one kept slot sits at each), so each dot is as deep as the
            # step's groups and each B row is loaded once
            GROUPS_A_STEP: tl.constexpr = BLOCK_S // N_KEEP
            groups = s0 // N_KEEP + tl.arange(0, GROUPS_A_STEP)
            vals = tl.reshape(vals, (BLOCK_M, GROUPS_A_STEP, N_KEEP))
            column = tl.reshape(column, (BLOCK_M, GROUPS_A_STEP, N_KEEP))
            b_rows = groups.to(tl.int64) * M_GROUP
            b_mask = (groups < SLOTS // N_KEEP)[:, None] & mask_bn[None, :]
            zeros = tl.zeros_like(vals)
            for p in tl.static_range(M_GROUP):
                a = tl.sum(tl.where(column == p, vals, zeros), axis=2)
                b_tile = tl.load(b + (b_rows + p)[:, None] * stride_bk + b_cols, mask=b_mask)
                if UPCAST:
                    b_tile = b_tile.to(tl.float32)
                acc = tl.dot(a.to(b_tile.dtype), b_tile, acc, input_precision=PRECISION)
        else:
            # one slot a row of the dot: a group may straddle two steps, so any n works
            b_rows = (slots // N_KEEP).to(tl.int64) * M_GROUP
            b_mask = mask_s[:, None] & mask_bn[None, :]
            zeros = tl.zeros_like(vals)
            for p in tl.static_range(M_GROUP):
                a = tl.where(column == p, vals, zeros)
                b_tile = tl.load(b + (b_rows + p)[:, None] * stride_bk + b_cols, mask=b_mask)
                if UPCAST:
                    b_tile = b_tile.to(tl.float32)
                acc = tl.dot(a.to(b_tile.dtype), b_tile, acc, input_precision=PRECISION)
    split_k.store(
        acc,
        offs_m,
        offs_n,
        mask_m,
        mask_n,
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


def supports(k: int, dtype: torch.dtype) -> bool:
    """Tensor cores take half precision and float32; K < 2^31."""
    return k < 2**31 and dtype in (torch.float16, torch.bfloat16, torch.float32)


def spmm_nm_expand(
    *,
    values: torch.Tensor,
    indices: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    n: int,
    m: int,
    vector: int,
    block: int,
    activation: str,
    block_m: int,
    block_s: int,
    block_n: int,
    num_warps: int,
    num_stages: int,
    grouped: bool = False,
    split: int = 1,
) -> torch.Tensor:
    """Launch over out (M, N). values (M, S) and indices (NMMatrix.indices, uint8) need unit
    stride along their last dim; block_m, block_s and block_n powers of two, at least 16
    (tl.dot's smallest tile). `grouped` (n a power of two) folds each group's n slots into one
    row of the dot; block_s then grows to 16 groups if it holds fewer. `split` > 1 cuts the
    slots into that many ranges (fewer where a range would be empty), summed by a second
    kernel. b (K, at least N columns) may carry zero columns past N (ops/_layout.py's padded
    copies): they are read, which keeps its loads wide, and never stored."""
    rows, cols = out.shape
    if rows == 0 or cols == 0:
        return out
    if b.shape[1] < cols:
        raise ValueError(f"b needs at least out's {cols} columns, got {b.shape[1]}")
    if min(block_m, block_n, block_s) < 16:
        raise ValueError(f"tiles must be at least 16 wide, got {block_m}, {block_s}, {block_n}")
    if grouped:
        if n & (n - 1):
            raise ValueError(f"grouped needs n a power of two, got n={n}")
        block_s = max(block_s, 16 * n)
    slots = values.shape[1]
    steps_per_split, splits = split_k.ranges(cdiv(slots, block_s), split)
    slots_per_split = steps_per_split * block_s
    partials = split_k.workspace(out, splits, torch.float32)
    grid = (cdiv(rows, block_m), cdiv(cols, block_n), splits)
    upcast = values.device.type == "cpu" and values.dtype == torch.bfloat16  # (the interpreter)
    _nm_expand_dot_kernel[grid](
        values,
        indices,
        b,
        bias if bias is not None else values,
        partials,
        rows,
        cols,
        b.shape[1],
        slots,
        slots_per_split,
        rows * cols,
        values.stride(0),
        indices.stride(0),
        b.stride(0),
        b.stride(1),
        out.stride(0),
        out.stride(1),
        N_KEEP=n,
        M_GROUP=m,
        VECTOR=vector,
        BLOCK=block,
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        PRECISION="ieee" if values.dtype == torch.float32 or upcast else "tf32",
        UPCAST=upcast,
        BLOCK_M=block_m,
        BLOCK_S=block_s,
        BLOCK_N=block_n,
        GROUPED=grouped,
        PARTIAL=splits > 1,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    if splits > 1:
        split_k.sum_partials(partials, bias, out, activation)
    return out
