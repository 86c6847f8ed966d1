"""The sparse-tensor-core kernel's operands in its K order (spmm_nm_mma_sp.py): the 2:4
metadata as the MMA's registers, prepared once per weight, and B's registers, permuted once a
call (or in the kernel on its way to shared memory, the same permutation).

The K order: within each k64 span (two k32 blocks, kl = 0, 1), the MMA's logical group c
(0-7, the operand's slot pair c) of block kl is the span's group 4 (c % 4) + 2 kl + c // 4.
Lane q of a quad holds logical groups q and q + 4 of each block, so its four A registers of a
span (kl, rh) are the adjacent groups 4 q .. 4 q + 3: one 16-byte load a row. The metadata
and B follow the same order, so the product is W @ B (tests/test_kernels_spmm_nm_mma_sp.py
reads both back as the hardware reads its registers).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._sizes import cdiv

METADATA_BLOCKS = 8  # K is padded to whole steps of the widest (8 k32 blocks) in memory


def metadata_words(indices: torch.Tensor, rows: int, vector: int) -> torch.Tensor:
    """The 2:4 offsets (uint8 (ceil(rows / vector), groups * 2)) as the MMA's metadata
    registers in the kernel's K order: (ceil(rows / 16), blocks / 4, g, q % 2, 4) int32, one
    16-byte load a lane for four k32 blocks. A k32 block's logical group c (the operand's
    slot pair) is its k64 span's group 4 (c % 4) + 2 kl + c // 4 (kl: the block's half of the
    span), so that a lane's A registers are four adjacent groups; word (g, q2) holds rows g
    and g + 8 (low, high 16 bits) of groups c = 4 q2 .. 4 q2 + 3, a nibble each (offset of
    slot 0 low). Rows past `rows` and groups past K hold columns (0, 1), a valid pattern."""
    nibbles = (indices[:, 0::2] | (indices[:, 1::2] << 2)).to(torch.int32)
    nibbles = nibbles.repeat_interleave(vector, 0)[:rows]
    groups = nibbles.shape[1]
    step = METADATA_BLOCKS * 8
    padded = torch.full(
        (cdiv(rows, 16) * 16, cdiv(groups, step) * step), 4, dtype=torch.int32,
        device=indices.device,
    )  # fmt: skip
    padded[:rows, :groups] = nibbles
    tiles, spans = padded.shape[0] // 16, padded.shape[1] // 16
    # (rows, span, qc, kl, hc) -> (rows, span, kl, hc, qc): logical blocks, then groups c
    logical = padded.view(tiles * 16, spans, 4, 2, 2).permute(0, 1, 3, 4, 2)
    halves = (logical << (4 * torch.arange(4, device=indices.device))).sum(-1)  # (.., kl, hc)
    halves = halves.reshape(tiles, 2, 8, spans * 2, 2)  # (tile, row + 8, g, block, q2)
    words = halves[:, 0] | (halves[:, 1] << 16)  # (tile, g, block, q2), int64
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    words = words.view(tiles, 8, spans // 2, 4, 2).permute(0, 2, 1, 4, 3)
    return words.contiguous()


@triton.jit
def _permute_b_kernel(b, out, K, N, BLOCKS, TOTAL, stride_bk, stride_bn, BLOCK: tl.constexpr):
    """out word o = (nt, kb, g, q, j) (permuted_b) from B's rows k, k + 1 at token 8 nt + g:
    k = 64 span + 2 p, p the pair's place in its k64 span, bits (j % 2, q // 2, kl, j // 2,
    q % 2) high to low (kb = 2 span + kl); zero past K and N."""
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    j, q, g = o % 4, o // 4 % 4, o // 16 % 8
    kb = o // 128 % BLOCKS
    token = o // (128 * BLOCKS) * 8 + g
    pair = 16 * (j % 2) + 8 * (q // 2) + 4 * (kb % 2) + 2 * (j // 2) + q % 2
    k = kb // 2 * 64 + 2 * pair
    mask = (o < TOTAL) & (token < N) & (k < K)
    ptrs = b + k.to(tl.int64) * stride_bk + token.to(tl.int64) * stride_bn
    low = tl.load(ptrs, mask=mask, other=0.0).to(tl.int16, bitcast=True).to(tl.int32)
    high = tl.load(ptrs + stride_bk, mask=mask, other=0.0).to(tl.int16, bitcast=True)
    tl.store(out + o, (low & 0xFFFF) | (high.to(tl.int32) << 16), mask=o < TOTAL)


def permuted_b(b: torch.Tensor) -> torch.Tensor:
    """B (K, N) as the MMA's B registers in the kernel's K order (metadata_words): (ceil(N /
    8), blocks, g, q, j) int32 pairs, one 16-byte load a lane (g, q) for an n8 tile's k32
    block: register j holds B's rows 8 j + 2 q, + 1 of the logical block at column g. K and
    N are padded with zeros to whole widest steps and n8 tiles. One launch."""
    k, n = b.shape
    blocks = cdiv(k, METADATA_BLOCKS * 32) * METADATA_BLOCKS
    out = torch.empty((cdiv(n, 8), blocks, 8, 4, 4), dtype=torch.int32, device=b.device)
    block = 1024
    _permute_b_kernel[(cdiv(out.numel(), block),)](
        b, out, k, n, blocks, out.numel(), b.stride(0), b.stride(1), BLOCK=block
    )
    return out
