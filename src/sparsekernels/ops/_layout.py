"""Memory layouts of B and of the product for the spmm backends.

linear passes x^T, a column-major B. The Triton kernels gather whole rows of B, so they want it
row-major, and at decode sizes padded to an aligned power-of-two width. The N:M Triton and the
dense backends and the CSR few-token walk write the product column-major, so that linear's
transposed result is contiguous (the fake ops promise the same strides).
"""

from __future__ import annotations

import torch

from ..kernels._sizes import next_power_of_2
from ..kernels.transpose import padded_b, row_major_copy


def column_major(b: torch.Tensor) -> bool:
    """b is a column-major matrix with several columns: linear's x^T (tokens are columns)."""
    return b.dim() == 2 and b.shape[1] > 1 and b.stride(0) == 1 and b.stride(1) >= b.shape[0]


def spmm_out(b: torch.Tensor, rows: int) -> torch.Tensor:
    """An empty (rows, N) product in b's memory order: for linear's x^T that is column-major,
    so linear's (tokens, rows) result comes back contiguous, with no copy; attention's fast
    SDPA kernels need a unit last stride (a strided q made a 16-token decode fall back to
    the math kernel: +137 MiB over dense, sweeps/decode_memory.py, H200, 2026-11-30)."""
    if column_major(b):
        return b.new_empty((b.shape[1], rows)).t()
    return b.new_empty((rows, b.shape[1]))


def in_b_order(out: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A 2-D product `out` (rows, N) in spmm_out's order for `b` (copied where it is not), as
    the ops promise for their CPU backends. Their row-major products for linear's column-major
    x^T, transposed and copied by linear inside a compiled graph, corrupted the heap under
    inductor (not aot_eager): a tiny Llama's compiled training step with sparse q, k, v and o
    gave wrong gradients or aborted (CSR at 70%, 2:4, 4:8). Cause not pinned down; in b's
    order, as the GPU kernels write it, the step matches eager."""
    if out.dim() != 2:
        return out
    rows, n = out.shape
    want = (1, rows) if column_major(b) else (n, 1)
    if all(size < 2 or s == w for size, s, w in zip(out.shape, out.stride(), want, strict=True)):
        return out
    return spmm_out(b, rows).copy_(out)


def csr_row_walk_in_b_order(values: torch.Tensor, b: torch.Tensor) -> bool:
    """The CSR few-token kernel (2 to tuning.CSR_ROW_WALK_MAX_N columns, one matrix) writes its
    product in b's order (spmm_out): into linear's column-major order it ran as fast as
    row-major, and saves linear a copy (~2 us at 8 tokens; H200, nm_decode_out_order.txt)."""
    from ..kernels import tuning

    return b.dim() == 2 and 1 < b.shape[1] <= tuning.CSR_ROW_WALK_MAX_N and values.dim() == 1


def rows_contiguous(b: torch.Tensor) -> torch.Tensor:
    """B with each row contiguous: gathered rows then load as wide vectors (linear passes x^T)."""
    if b.shape[1] <= 1 or b.stride(1) == 1:
        return b
    if b.device.type == "cuda":
        return row_major_copy(src=b)
    return b.contiguous()


# A row-major B (spmm's own, SparseConv2d's pixels) whose width is no multiple of 16 keeps
# its row stride N on the N:M tensor-core tiles, so their B loads are 2-byte: the sm_90 loop
# 126 -> 410 SASS instructions on the condensed-K tile, 324 -> 392 on the unpack kernel's 4:8
# b4, 286 -> 342 on the wgmma kernel's 2:4 (results/cpu/2026-12-06-unaligned-n-audit and the
# sixty-sixth session). With ALIGN_ROW_MAJOR_B those tiles read it copied 16-column aligned
# (rows_padded_to_16) instead: the copy is a launch and B's bytes twice, and won (H100, bf16,
# cold L2, in place -> copied; results/nvidia-h100/2026-12-06/at-c87015f/nm_row_major_b.txt):
# 14336 x 4096 4:8 v = 64 at 24 tokens 78.8 -> 33.9 us, 2:8 v = 64 at 196 119.4 -> 48.4, 4:8
# v = 1 at 49 190.9 -> 87.9; even at 9 and where the route is not a tensor-core tile; the one
# loss 1024^2 2:8 v = 64 at 24 tokens, 4.6 -> 5.5. (Only the N:M paths read this: the general
# CSR kernel pads linear's x^T alone, and lost with B padded at N = 49 and 196.)
ALIGN_ROW_MAJOR_B = True


def rows_padded_to_16(b: torch.Tensor) -> torch.Tensor:
    """B row-major with its width rounded up to a multiple of 16, zero columns past N, where a
    copy is made anyway (linear's x^T): a kernel masking B's loads on that width keeps them
    wide at any token count (the N:M tiles' B_COLS). B itself when its rows are already
    contiguous (no copy for the padding alone; with ALIGN_ROW_MAJOR_B only where its width,
    row stride and address are 16-aligned already) or it repeats one row."""
    cols = b.shape[1]
    if cols <= 1 or b.stride(0) == 0:
        return rows_contiguous(b)
    if b.stride(1) == 1 and (not ALIGN_ROW_MAJOR_B or _aligned_16(b, cols)):
        return b
    width = -(-cols // 16) * 16
    if b.device.type == "cuda":
        return row_major_copy(src=b, width=width)
    return torch.nn.functional.pad(b, (0, width - cols)).contiguous()


def _aligned_16(b: torch.Tensor, cols: int) -> bool:
    """B's width and row stride are multiples of 16 and its address of 16 bytes (Triton's
    divisibility hints: its rows then load as vectors)."""
    return cols % 16 == 0 and b.stride(0) % 16 == 0 and b.data_ptr() % 16 == 0


def aligned_rows(b: torch.Tensor) -> torch.Tensor:
    """B for the tensor-core N:M tiles that mask B's loads on its width: at 2-16 columns
    padded_rows to 16 (the tiles' least width), past them rows_padded_to_16. Padded to 2-8 at
    2-8 tokens, B's width and row stride were no multiple of 16 and its loads 2-byte and
    unpipelined (the condensed-K tile's loop 406 SASS instructions against 126, sm_90): that
    tile ran 34.3-35.0 us at 2-8 tokens and 28.6 at 12 on 14336 x 4096 (4:8 v = 64; 64:128
    b = 64 37.2 against 24.8; H100, results/nvidia-h100/2026-12-06/at-53e510e/
    nm_route_nmhalfdense.txt)."""
    return padded_rows(b, least=16) if b.shape[1] <= 16 else rows_padded_to_16(b)


def padded_rows(b: torch.Tensor, least: int = 1) -> torch.Tensor:
    """B for the decode-size kernels (N:M decode, CSR at N <= 16): (K, next_power_of_2(N))
    row-major (at least `least` wide) with zero columns past N, so a gathered row is one
    aligned vector load; B itself when it is laid out so already, has one column or repeats
    one row. linear's x^T needs a copy anyway."""
    cols = b.shape[1]
    width = max(least, next_power_of_2(cols))
    if cols <= 1 or (cols == width and padded_b(b, cols)):
        return b
    if b.stride(0) == 0:  # an expanded B (one row for all K) is never copied out: it may be huge
        return rows_contiguous(b)
    if b.device.type == "cuda":
        return row_major_copy(src=b, width=width)
    return torch.nn.functional.pad(b, (0, width - cols)).contiguous()
