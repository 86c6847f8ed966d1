"""N:M SpMM for a few to a few dozen tokens on tensor cores: out = act(W @ B + bias).

"Load as sparse, compute as dense" (Flash-LLM, SpInfer): each step reads the compressed values
and bit-packed offsets of a (BLOCK_M rows x BLOCK_G groups) tile, the only bytes of W that
travel, expands them in registers into the dense (BLOCK_M, BLOCK_G * m) tile they stand for,
and multiplies that with B's matching rows on tensor cores (tl.dot). The decode kernel
(spmm_nm_decode.py) instead multiplies each stored value on CUDA cores, so its arithmetic grows
with the tokens while a weight-bound product's should not; this kernel's expansion costs
n compare-selects per dense element, once, whatever the tokens.

The expansion: the dense tile is sum over a group's n kept slots of
where(slot's column == position, value, 0); each position holds at most one kept value, so the
sum adds only zeros to it (exact). n and m must be powers of two (tile axes).

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
    IEEE: tl.constexpr,  # float32 operands: IEEE products (TF32 would lose precision)
    BLOCK_M: tl.constexpr,
    BLOCK_G: tl.constexpr,  # groups a step: the dense tile is BLOCK_G * M_GROUP columns wide
    BLOCK_N: tl.constexpr,
):
    PER_WORD: tl.constexpr = 32 // BITS
    BLOCK_K: tl.constexpr = BLOCK_G * M_GROUP
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    rows = offs_m.to(tl.int64)
    word_rows = tl.where(mask_m, rows // VECTOR, 0)
    j = tl.arange(0, N_KEEP)  # kept slot within a group
    within = (j % BLOCK)[None, None, :]  # position inside the slot's block
    position = tl.arange(0, M_GROUP)[None, None, None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for g0 in range(0, GROUPS, BLOCK_G):
        g = g0 + tl.arange(0, BLOCK_G)
        mask_g = g < GROUPS
        slots = g[:, None].to(tl.int64) * N_KEEP + j[None, :]  # (BLOCK_G, N_KEEP)
        mask = mask_m[:, None, None] & mask_g[None, :, None]
        vals = tl.load(values + rows[:, None, None] * stride_vm + slots[None], mask=mask, other=0.0)
        index_col = slots // BLOCK  # a block's slots share one offset
        word = tl.load(
            words + word_rows[:, None, None] * stride_wm + (index_col // PER_WORD)[None],
            mask=mask,
            other=0,
        )
        offsets = (word >> ((index_col % PER_WORD) * BITS).to(tl.int32)[None]) & ((1 << BITS) - 1)
        columns = offsets * BLOCK + within  # (BLOCK_M, BLOCK_G, N_KEEP): column inside the group
        hit = columns[:, :, :, None] == position
        dense = tl.sum(tl.where(hit, vals[:, :, :, None], 0.0), axis=2)
        dense = tl.reshape(dense, (BLOCK_M, BLOCK_K))
        ks = g0 * M_GROUP + tl.arange(0, BLOCK_K)  # K < 2^31 (supports)
        b_tile = tl.load(
            b + ks.to(tl.int64)[:, None] * stride_bk + offs_n[None, :] * stride_bn,
            mask=(ks < GROUPS * M_GROUP)[:, None] & mask_n[None, :],
            other=0.0,
        )
        dense = dense.to(b_tile.dtype)
        if IEEE:
            acc = tl.dot(dense, b_tile, acc, input_precision="ieee")
        else:
            acc = tl.dot(dense, b_tile, acc)
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
    """Tile axes need powers of two; tensor cores take half precision and float32; columns
    are int32 (K < 2^31)."""
    powers = n & (n - 1) == 0 and m & (m - 1) == 0
    return powers and k < 2**31 and dtype in (torch.float16, torch.bfloat16, torch.float32)


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
    and block_g * m at least 16 (tl.dot's smallest tile)."""
    rows, cols = out.shape
    if rows == 0 or cols == 0:
        return out
    if min(block_m, block_n, block_g * m) < 16:
        raise ValueError(f"tiles must be at least 16 wide, got {block_m}, {block_n}, {block_g * m}")
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
        IEEE=values.dtype == torch.float32,
        BLOCK_M=block_m,
        BLOCK_G=block_g,
        BLOCK_N=block_n,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out
