"""The sparse-tensor-core kernel's operands in its K order (spmm_nm_mma_sp.py): the metadata
as the MMA's registers (and for m = 8 each group's class), prepared once per weight, and B's
registers, permuted once a call (or in the kernel on its way to shared memory, the same way).

The MMA reads K in chunks of four with two slots each: a 2:4 group is one chunk, a 2:8 or 1:8
group two (its halves, each holding some of the group's values). The K order: a span is SPAN
k32 blocks (2 for 2:4, 4 for 2:8, 8 for 1:8: 16 bytes of values a lane and row) and the MMA's
logical chunk c (0-7) of the span's block kl is at K 8 SPAN (c % 4) + 8 kl + 4 (c // 4) of
the span: 2:4 group 4 (c % 4) + 2 kl + c // 4, or half c // 4 of group SPAN (c % 4) + kl
(m = 8). Lane q of a quad holds chunks q and q + 4 of each block, so its A registers of a
span come from adjacent groups (4 q .. 4 q + 3, 1:8 8 q .. 8 q + 7): one 16-byte load a row.
The metadata and B follow the same order (tests/test_kernels_spmm_nm_mma_sp.py reads all
three back as the hardware reads them).

2:8 with plain `mma.sp` (any two distinct indices): class (o0 >> 2) + (o1 >> 2) of a group
with offsets o0 < o1 and values word (v0 low, v1 high): class 0 both in half 0, 1 one in each,
2 both in half 1. Half 0's slots are word & (0xFFFFFFFF >> 16 class), half 1's word >> (32 -
16 class) (shifts of 32 give 0); a value alone in its half sits in slot 0, its padding slot
at the next index (index ^ 1), an empty half at (0, 1). 1:8: class o >> 2, the group's value
in slot 0 of that half.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._sizes import cdiv

SPAN_BLOCKS = {(2, 4): 2, (2, 8): 4, (1, 8): 8}  # (n, m) -> k32 blocks a span
STEP_BLOCKS = 8  # K is padded to whole steps of 8 k32 blocks in memory
PAD_NIBBLE = 4  # columns (0, 1): a valid pattern for padding


def _rows_padded(per_group: torch.Tensor, rows: int, vector: int, groups_step: int, fill: int):
    """(ceil(rows / vector), groups, ...) per index row -> (rows padded to 16, groups padded to
    `groups_step`, ...) per output row, `fill` in the padding."""
    per_row = per_group.repeat_interleave(vector, 0)[:rows]
    groups = per_row.shape[1]
    shape = (cdiv(rows, 16) * 16, cdiv(groups, groups_step) * groups_step, *per_row.shape[2:])
    padded = torch.full(shape, fill, dtype=torch.int32, device=per_group.device)
    padded[:rows, :groups] = per_row
    return padded


def _int32(words: torch.Tensor) -> torch.Tensor:
    """int64 holding 32-bit patterns -> int32 with the same bits."""
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def _half_nibbles(indices: torch.Tensor, n: int) -> torch.Tensor:
    """2:8 or 1:8 offsets -> (index rows, groups, 2) the two halves' metadata nibbles (module
    docstring)."""
    if n == 1:
        o = indices.int()
        alone = (o & 3) | (((o & 3) ^ 1) << 2)
        pad = torch.full_like(o, PAD_NIBBLE)
        return torch.stack([torch.where(o < 4, alone, pad), torch.where(o < 4, pad, alone)], -1)
    o0, o1 = indices[:, 0::2].int(), indices[:, 1::2].int()
    cls = (o0 >> 2) + (o1 >> 2)
    pad = torch.full_like(o0, PAD_NIBBLE)
    low = torch.where(cls == 0, o0 | (o1 << 2), torch.where(cls == 1, o0 | ((o0 ^ 1) << 2), pad))
    h0, h1 = o0 - 4, o1 - 4
    high = torch.where(cls == 2, h0 | (h1 << 2), torch.where(cls == 1, h1 | ((h1 ^ 1) << 2), pad))
    return torch.stack([low, high], -1)


def metadata_words(
    indices: torch.Tensor, rows: int, vector: int, n: int = 2, m: int = 4
) -> torch.Tensor:
    """The offsets (uint8 (ceil(rows / vector), groups * n) of a 2:4, 2:8 or 1:8 weight) as the
    MMA's metadata registers in the kernel's K order: (ceil(rows / 16), blocks / 4, g, q % 2,
    4) int32, one 16-byte load a lane for four k32 blocks. Word (g, q2) holds rows g and g + 8
    (low, high 16 bits) of the block's chunks c = 4 q2 .. 4 q2 + 3, a nibble each (slot 0's
    index low). Rows past `rows` and K past the weight's hold PAD_NIBBLE."""
    span = SPAN_BLOCKS[(n, m)]
    step_groups = STEP_BLOCKS * 32 // m
    if m == 4:
        nibbles = (indices[:, 0::2] | (indices[:, 1::2] << 2)).to(torch.int32)
        padded = _rows_padded(nibbles, rows, vector, step_groups, PAD_NIBBLE)
        # (rows, span, group 4 qc + 2 kl + hc) -> (rows, span, kl, hc, qc)
        logical = padded.view(padded.shape[0], -1, 4, 2, 2).permute(0, 1, 3, 4, 2)
    else:
        padded = _rows_padded(_half_nibbles(indices, n), rows, vector, step_groups, PAD_NIBBLE)
        # (rows, span, group SPAN qc + kl, half hc) -> (rows, span, kl, hc, qc)
        logical = padded.view(padded.shape[0], -1, 4, span, 2).permute(0, 1, 3, 4, 2)
    tiles = padded.shape[0] // 16
    logical = logical.reshape(tiles * 16, -1, 2, 4)  # (rows, block, q2, qc): c = 4 q2 + qc
    blocks = logical.shape[1]
    halves = (logical.long() << (4 * torch.arange(4, device=indices.device))).sum(-1)
    halves = halves.reshape(tiles, 2, 8, blocks, 2)  # (tile, row + 8, g, block, q2)
    words = _int32(halves[:, 0] | (halves[:, 1] << 16))  # (tile, g, block, q2)
    words = words.view(tiles, 8, blocks // 4, 4, 2).permute(0, 2, 1, 4, 3)
    return words.contiguous()


def class_words(indices: torch.Tensor, rows: int, vector: int, n: int = 2) -> torch.Tensor:
    """m = 8 groups' classes (module docstring) in the kernel's order: (ceil(rows / 16),
    steps, g, q) int32, one 4-byte load a lane a step (8 k32 blocks). 2:8 (two spans a step):
    byte 2 s + rc holds row g + 8 rc's groups 4 q + kl of the step's span s, 2 bits each at
    2 kl; 1:8 (one span): byte rc row g + 8 rc's groups 8 q + kl, a bit each at kl."""
    if n == 1:
        padded = _rows_padded(indices.int() >> 2, rows, vector, STEP_BLOCKS * 4, 0)
        tiles = padded.shape[0] // 16
        classes = padded.view(tiles, 2, 8, -1, 4, 8).long()  # (tile, rc, g, step, q, kl)
        bytes_ = (classes << torch.arange(8, device=indices.device)).sum(-1)
        words = _int32(bytes_[:, 0] | (bytes_[:, 1] << 8))  # (tile, g, step, q)
        return words.permute(0, 2, 1, 3).contiguous()
    o0, o1 = indices[:, 0::2].int(), indices[:, 1::2].int()
    padded = _rows_padded((o0 >> 2) + (o1 >> 2), rows, vector, STEP_BLOCKS * 4, 0)
    tiles = padded.shape[0] // 16
    # (tile, rc, g, step, s, q, kl)
    classes = padded.view(tiles, 2, 8, -1, 2, 4, 4).long()
    bytes_ = (classes << (2 * torch.arange(4, device=indices.device))).sum(-1)
    place = torch.tensor([[0, 8], [16, 24]], device=indices.device)  # (s, rc): 8 (2 s + rc)
    shifted = bytes_.permute(0, 2, 3, 5, 4, 1) << place  # (tile, g, step, q, s, rc)
    words = _int32(shifted.sum((-1, -2)))  # (tile, g, step, q)
    return words.permute(0, 2, 1, 3).contiguous()


@triton.jit
def _permute_b_kernel(b, out, K, N, BLOCKS, TOTAL, stride_bk, stride_bn, SPAN: tl.constexpr,
                      BLOCK: tl.constexpr):  # fmt: skip
    """out word o = (nt, kb, g, q, j) (permuted_b) from B's rows k, k + 1 at token 8 nt + g:
    k = 64 SPAN span + 2 p, p the pair's place in its span, 8 SPAN (j % 2) + 4 SPAN (q // 2) +
    4 kl + 2 (j // 2) + q % 2 (kb = SPAN span + kl); zero past K and N."""
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    j, q, g = o % 4, o // 4 % 4, o // 16 % 8
    kb = o // 128 % BLOCKS
    token = o // (128 * BLOCKS) * 8 + g
    pair = 8 * SPAN * (j % 2) + 4 * SPAN * (q // 2) + 4 * (kb % SPAN) + 2 * (j // 2) + q % 2
    k = kb // SPAN * 32 * SPAN + 2 * pair
    mask = (o < TOTAL) & (token < N) & (k < K)
    ptrs = b + k.to(tl.int64) * stride_bk + token.to(tl.int64) * stride_bn
    low = tl.load(ptrs, mask=mask, other=0.0).to(tl.int16, bitcast=True).to(tl.int32)
    high = tl.load(ptrs + stride_bk, mask=mask, other=0.0).to(tl.int16, bitcast=True)
    tl.store(out + o, (low & 0xFFFF) | (high.to(tl.int32) << 16), mask=o < TOTAL)


def permuted_b(b: torch.Tensor, n: int = 2, m: int = 4) -> torch.Tensor:
    """B (K, N) as the MMA's B registers in the kernel's K order for an n:m weight: (ceil(N /
    8), blocks, g, q, j) int32 pairs, one 16-byte load a lane (g, q) for an n8 tile's k32
    block: register j holds B's rows 8 j + 2 q, + 1 of the logical block at column g. K and
    N are padded with zeros to whole steps and n8 tiles. One launch."""
    k, tokens = b.shape
    blocks = cdiv(k, STEP_BLOCKS * 32) * STEP_BLOCKS
    out = torch.empty((cdiv(tokens, 8), blocks, 8, 4, 4), dtype=torch.int32, device=b.device)
    block = 1024
    _permute_b_kernel[(cdiv(out.numel(), block),)](
        b, out, k, tokens, blocks, out.numel(), b.stride(0), b.stride(1), SPAN=SPAN_BLOCKS[(n, m)],
        BLOCK=block,
    )  # fmt: skip
    return out
