"""The select kernel (spmm_nm_select.py) with the weight's bytes brought by the Tensor Memory
Accelerator: element-wise N:M times one token, out = act(W @ x + bias).

Every N:M kernel of ours stops near 3.2-3.3 TB/s of weight where cuBLAS's GEMV, a TMA kernel,
reads the dense weight at 3.8 (Nsight Compute, results/nvidia-h200/2026-12-01/at-3d62f47):
ours are short of bytes in flight, not of issue slots. Here each step's values and offset bytes
of a row come through tensor descriptors, which Triton pipelines on Hopper (`num_stages` steps
ahead in a ring of shared memory, one copy instruction a row and operand); x is read and picked
as in the select kernel. A box past the weight's rows or groups reads zeros, so no step but x's
is masked.

The cases: 16-bit values, one or two kept a group (value pairs as one int32), a group's offsets
within a byte, and the TMA's alignment (16-byte rows and bases: `supports`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from . import split_k
from ._activation import ACTIVATION_CODES
from ._sizes import cdiv
from .spmm_nm_select import _half


@triton.jit
def _pick(xs, offs, LOG_M: tl.constexpr, BF16: tl.constexpr, DTYPE: tl.constexpr):
    """x[g, offs[g]] as float32 (G, 1), from xs (G, m / 2) of 16-bit pairs: the pair by halving
    on offs' bits from bit 1, then its half by bit 0. (G, 1), not (G,): a reshape to one axis
    gave the result a layout of its own and a conversion through shared memory a value."""
    c = xs
    for level in tl.static_range(1, LOG_M):
        lo, hi = tl.split(tl.reshape(c, (c.shape[0], c.shape[1] // 2, 2)))
        c = tl.where((((offs >> level) & 1) != 0)[:, None], hi, lo)
    odd = ((offs & 1) != 0)[:, None]
    if BF16:  # a bfloat16 is the high half of a float32's bits
        return tl.where(odd, c & -65536, c << 16).to(tl.float32, bitcast=True)
    half = (tl.where(odd, c >> 16, c) & 0xFFFF).to(tl.uint16)
    return half.to(DTYPE, bitcast=True).to(tl.float32)


@triton.jit
def _row_step(acc, value_desc, offset_desc, row, g0, xs, N_KEEP: tl.constexpr,
              LOG_M: tl.constexpr, BITS: tl.constexpr, BLOCK_G: tl.constexpr,
              BF16: tl.constexpr, DTYPE: tl.constexpr):  # fmt: skip
    """acc (BLOCK_G, 1) + one row's share of a step over groups g0 .. g0 + BLOCK_G: values and
    offset bytes by TMA, each value times the x its offset picks from xs (BLOCK_G, m / 2)."""
    GROUPS_A_BYTE: tl.constexpr = 8 // (N_KEEP * BITS)
    byte = offset_desc.load([row, g0 // GROUPS_A_BYTE]).reshape(BLOCK_G // GROUPS_A_BYTE)
    word = byte.to(tl.int32)
    if GROUPS_A_BYTE > 1:  # a group's offsets at its place in the byte
        shifts = tl.arange(0, GROUPS_A_BYTE) * (N_KEEP * BITS)
        word = tl.reshape(word[:, None] >> shifts[None, :], (BLOCK_G,))
    if N_KEEP == 2:
        pair = value_desc.load([row, g0]).reshape(BLOCK_G)[:, None]
        low = _half(pair, False, DTYPE, BF16)
        high = _half(pair, True, DTYPE, BF16)
        acc += low * _pick(xs, word, LOG_M, BF16, DTYPE)
        acc += high * _pick(xs, word >> BITS, LOG_M, BF16, DTYPE)
    else:
        val = value_desc.load([row, g0]).reshape(BLOCK_G)[:, None].to(tl.float32)
        acc += val * _pick(xs, word, LOG_M, BF16, DTYPE)
    return acc


@triton.jit
def _nm_select_tma_kernel(
    value_desc,  # (M, groups) int32 value pairs (n = 2) or (M, groups) 16-bit values (n = 1)
    offset_desc,  # (M, bytes) uint8: a row's packed offsets
    x,  # (K,) contiguous, 4-byte aligned
    bias,
    out,  # (M, 1)
    M,
    GROUPS,
    stride_om,
    N_KEEP: tl.constexpr,
    M_GROUP: tl.constexpr,
    LOG_M: tl.constexpr,
    BITS: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    DTYPE: tl.constexpr,
    BF16: tl.constexpr,  # DTYPE is bfloat16
    BLOCK_M: tl.constexpr,  # 1, 2 or 4 rows, each its own accumulator
    BLOCK_G: tl.constexpr,  # groups of a row a step
    STAGES: tl.constexpr,  # steps in flight (Triton's pipelining of the descriptors' loads)
):
    WIDTH: tl.constexpr = M_GROUP // 2  # x's int32 pairs a group
    row0 = tl.program_id(0) * BLOCK_M
    xv = x.to(tl.pointer_type(tl.int32))
    acc0 = tl.zeros((BLOCK_G, 1), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_G, 1), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_G, 1), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_G, 1), dtype=tl.float32)
    for g0 in tl.range(0, GROUPS, BLOCK_G, num_stages=STAGES):
        groups = g0 + tl.arange(0, BLOCK_G)
        cols = tl.multiple_of(groups * WIDTH, WIDTH)[:, None] + tl.arange(0, WIDTH)[None, :]
        xs = tl.load(xv + cols, mask=(groups < GROUPS)[:, None], other=0)
        acc0 = _row_step(acc0, value_desc, offset_desc, row0, g0, xs, N_KEEP, LOG_M, BITS,
                         BLOCK_G, BF16, DTYPE)  # fmt: skip
        if BLOCK_M > 1:
            acc1 = _row_step(acc1, value_desc, offset_desc, row0 + 1, g0, xs, N_KEEP, LOG_M,
                             BITS, BLOCK_G, BF16, DTYPE)  # fmt: skip
        if BLOCK_M > 2:
            acc2 = _row_step(acc2, value_desc, offset_desc, row0 + 2, g0, xs, N_KEEP, LOG_M,
                             BITS, BLOCK_G, BF16, DTYPE)  # fmt: skip
            acc3 = _row_step(acc3, value_desc, offset_desc, row0 + 3, g0, xs, N_KEEP, LOG_M,
                             BITS, BLOCK_G, BF16, DTYPE)  # fmt: skip
    offs_m = row0 + tl.arange(0, BLOCK_M)
    lane = tl.arange(0, BLOCK_M)
    total = tl.where(lane == 0, tl.sum(acc0), 0.0)
    if BLOCK_M > 1:
        total = tl.where(lane == 1, tl.sum(acc1), total)
    if BLOCK_M > 2:
        total = tl.where(lane == 2, tl.sum(acc2), total)
        total = tl.where(lane == 3, tl.sum(acc3), total)
    offs_n = tl.arange(0, 1)
    split_k.store(
        total[:, None], offs_m, offs_n, offs_m < M, offs_n < 1, bias, out, 1, 0, stride_om, 1,
        HAS_BIAS, ACTIVATION, tl.float32, False, 1,
    )  # fmt: skip


def _aligned(t: torch.Tensor) -> bool:
    return t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0


def supports(values: torch.Tensor, words: torch.Tensor, n: int, m: int, bits: int) -> bool:
    """16-bit values with unit stride along a row, one or two kept a group, m a power of two
    from 4 to 16, a group's offsets within a byte, and the TMA's 16-byte bases and row strides."""
    shape_ok = n in (1, 2) and m in (4, 8, 16) and 8 % (n * bits) == 0 and n < m
    layout_ok = values.stride(-1) == 1 and words.stride(-1) == 1
    return (
        shape_ok
        and values.element_size() == 2
        and layout_ok
        and _aligned(values)
        and _aligned(words)
    )


def spmm_nm_select_tma(
    *,
    values: torch.Tensor,
    words: torch.Tensor,
    bits: int,
    x: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    n: int,
    m: int,
    activation: str,
    block_m: int,
    block_g: int,
    num_warps: int,
    stages: int = 3,
) -> torch.Tensor:
    """Launch over out (M, 1) for x (K, 1) (any strides); values (M, S) and words
    (`NMMatrix.packed_indices(bits)`) as the select kernel takes them. The caller checks
    `supports`; `block_g` a power of two of at least 16 / n groups (a TMA box's 16 bytes) and at
    most 256 (its longest side)."""
    if block_m not in (1, 2, 4):
        raise ValueError(f"block_m must be 1, 2 or 4 (one accumulator a row), got {block_m}")
    groups_a_byte = 8 // (n * bits)
    if not 16 * groups_a_byte <= block_g <= 256 or block_g & (block_g - 1):
        raise ValueError(f"block_g must be a power of two in [{16 * groups_a_byte}, 256]")
    rows = out.shape[0]
    if rows == 0:
        return out
    x = x.reshape(-1)
    if not x.is_contiguous() or x.data_ptr() % 4:
        x = x.clone(memory_format=torch.contiguous_format)
    groups = cdiv(values.shape[1], n)
    if n == 2:  # a group's two values as one int32
        pairs = values.view(torch.int32)
        value_desc = TensorDescriptor(pairs, [rows, groups], [pairs.stride(0), 1], [1, block_g])
    else:
        value_desc = TensorDescriptor(values, [rows, groups], [values.stride(0), 1], [1, block_g])
    row_bytes = words.view(torch.uint8)
    offset_desc = TensorDescriptor(
        row_bytes, [rows, cdiv(groups, groups_a_byte)], [row_bytes.stride(0), 1],
        [1, block_g // groups_a_byte],
    )  # fmt: skip
    _nm_select_tma_kernel[(cdiv(rows, block_m),)](
        value_desc,
        offset_desc,
        x,
        bias if bias is not None else values,
        out,
        rows,
        groups,
        out.stride(0),
        N_KEEP=n,
        M_GROUP=m,
        LOG_M=m.bit_length() - 1,
        BITS=bits,
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        DTYPE=tl.bfloat16 if values.dtype == torch.bfloat16 else tl.float16,
        BF16=values.dtype == torch.bfloat16,
        BLOCK_M=block_m,
        BLOCK_G=block_g,
        STAGES=stages,
        num_warps=num_warps,
    )
    return out
