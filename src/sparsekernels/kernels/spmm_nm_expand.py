"""N:M SpMM for a few to a few dozen tokens on tensor cores: out = act(W @ B + bias).

"Load as sparse, compute as dense" (Flash-LLM, SpInfer) without building the dense tile: W @ B
is the sum over the m positions p of a group of (the kept values whose column in their group is
p) @ (B's row at position p of each group). So a step loads a (BLOCK_M rows x BLOCK_S slots)
tile of compressed values and their bit-packed offsets, the only bytes of W that travel, and
makes m plain tl.dot calls on 2-D tiles: A_p = where(column == p, values, 0) against the
(BLOCK_S, BLOCK_N) tile of B rows (group * m + p). Tensor cores do n times a dense tile's work
(idle at these token counts anyway); each slot costs one compare-select per position.

The first version expanded a (rows, groups, n, m) tile and reshaped it for tl.dot: 0.11-0.36x
dense at 8-32 tokens on the H200 (results/nvidia-h200/2026-11-30/at-94ee33f/
nm_expand_sweep.txt). This one avoids 3-D tiles, reshapes and strided loads; it is checked in
the interpreter and waits for its H200 sweep (benchmarks/sweeps/nm_expand_sweep.py).

Each output is one program's fixed sum order: deterministic, no atomics.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._sizes import cdiv
from .spmm_nm import _ACTIVATION_CODES, _epilogue_store


@triton.jit
def _nm_expand_dot_kernel(
    values,  # (M, S) compressed values, S = groups * n, unit stride along S
    words,  # (ceil(M / VECTOR), ceil(S / BLOCK / (32 // BITS))) int32 packed block offsets
    b,  # (K, N): strides stride_bk, stride_bn
    bias,
    out,  # (M, N): strides stride_om, stride_on
    M,
    N,
    GROUPS,  # K // m
    stride_vm,
    stride_wm,
    stride_bk,
    stride_bn,
    stride_om,
    stride_on,
    N_KEEP: tl.constexpr,
    M_GROUP: tl.constexpr,
    VECTOR: tl.constexpr,
    BLOCK: tl.constexpr,
    BITS: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    PRECISION: tl.constexpr,  # "ieee" for float32 operands (TF32 would lose precision)
    BLOCK_M: tl.constexpr,
    BLOCK_G: tl.constexpr,  # groups a step: BLOCK_G * N_KEEP slots (at least 16 for tl.dot)
    BLOCK_N: tl.constexpr,
):
    PER_WORD: tl.constexpr = 32 // BITS
    BLOCK_S: tl.constexpr = BLOCK_G * N_KEEP
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    rows = offs_m.to(tl.int64)
    word_rows = tl.where(mask_m, rows // VECTOR, 0)
    b_cols = offs_n[None, :].to(tl.int64) * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for g0 in range(0, GROUPS, BLOCK_G):
        slots = g0 * N_KEEP + tl.arange(0, BLOCK_S)
        groups = slots // N_KEEP
        mask_s = groups < GROUPS
        mask = mask_m[:, None] & mask_s[None, :]
        vals = tl.load(values + rows[:, None] * stride_vm + slots[None, :], mask=mask, other=0.0)
        index_col = slots // BLOCK  # a block's slots share one offset
        word = tl.load(
            words + word_rows[:, None] * stride_wm + (index_col // PER_WORD)[None, :],
            mask=mask,
            other=0,
        )
        shift = ((index_col % PER_WORD) * BITS).to(tl.int32)[None, :]
        offsets = (word >> shift) & ((1 << BITS) - 1)
        column = offsets * BLOCK + (slots % BLOCK)[None, :]  # the slot's column in its group
        zeros = tl.zeros_like(vals)
        b_rows = groups.to(tl.int64) * M_GROUP
        for p in tl.static_range(M_GROUP):
            a = tl.where(column == p, vals, zeros)
            b_tile = tl.load(
                b + (b_rows + p)[:, None] * stride_bk + b_cols,
                mask=mask_s[:, None] & mask_n[None, :],
                other=0.0,
            )
            a = a.to(b_tile.dtype)
            acc = tl.dot(a, b_tile, acc, input_precision=PRECISION)
    _epilogue_store(
        acc,
        offs_m,
        offs_n,
        mask_m,
        mask_n,
        bias,
        out,
        stride_om,
        stride_on,
        HAS_BIAS,
        ACTIVATION,
        tl.float32,
    )


def supports(n: int, m: int, k: int, dtype: torch.dtype) -> bool:
    """The slot tile (groups x n) must be a power of two; tensor cores take half precision and
    float32; K < 2^31."""
    return (
        n & (n - 1) == 0 and k < 2**31 and dtype in (torch.float16, torch.bfloat16, torch.float32)
    )


def spmm_nm_expand(
    *,
    values: torch.Tensor,
    words: torch.Tensor,
    bits: int,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    n: int,
    m: int,
    vector: int,
    block: int,
    activation: str,
    block_m: int,
    block_g: int,
    block_n: int,
    num_warps: int,
    num_stages: int,
) -> torch.Tensor:
    """Launch over out (M, N). values (M, S) and words (`NMMatrix.packed_indices(bits)`, bits
    from spmm_nm_decode.packed_bits) need unit stride along their last dim; block_m, block_n
    and block_g * n (slots a step) at least 16 (tl.dot's smallest tile), block_g a power of
    two."""
    rows, cols = out.shape
    if rows == 0 or cols == 0:
        return out
    if min(block_m, block_n, block_g * n) < 16:
        raise ValueError(f"tiles must be at least 16 wide, got {block_m}, {block_n}, {block_g * n}")
    grid = (cdiv(rows, block_m), cdiv(cols, block_n))
    _nm_expand_dot_kernel[grid](
        values,
        words,
        b,
        bias if bias is not None else values,
        out,
        rows,
        cols,
        values.shape[1] // n,
        values.stride(0),
        words.stride(0),
        b.stride(0),
        b.stride(1),
        out.stride(0),
        out.stride(1),
        N_KEEP=n,
        M_GROUP=m,
        VECTOR=vector,
        BLOCK=block,
        BITS=bits,
        HAS_BIAS=bias is not None,
        ACTIVATION=_ACTIVATION_CODES[activation],
        PRECISION="ieee" if values.dtype == torch.float32 else "tf32",
        BLOCK_M=block_m,
        BLOCK_G=block_g,
        BLOCK_N=block_n,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out
