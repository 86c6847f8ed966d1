"""Split-K's sums: out = act(sum of the partial products + bias), in a fixed order.

A weight with few rows fills few programs; cutting its K range into `splits` pieces, one
program each, fills the GPU. Each piece writes its partial product (the kernels' accumulator
type) to plane `split` of a (splits, M, N) workspace. Two ways to add the planes in plane
order, the same sum every run:
- `store_last_sums` (the wgmma and unpack kernels): each piece counts itself in on its tile's
  int32 counter; the last to arrive adds the planes and applies the epilogue, and leaves the
  counter at zero. No second kernel (about 1 us a call in a CUDA graph); the atomic only
  orders the pieces, the sum's order is fixed.
- `sum_partials`, a second kernel after the launch (the expand and decode kernels,
  kernels/spmm_nm_expand.py, kernels/spmm_nm_decode.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._activation import ACTIVATION_CODES
from ._sizes import cdiv
from .spmm_nm import _epilogue_store


def ranges(steps: int, split: int) -> tuple[int, int]:
    """(steps a piece, pieces) for a K walk of `steps` loop steps cut into at most `split`
    pieces: no piece is empty, and a walk of no steps is one piece."""
    if split < 1:
        raise ValueError(f"split must be at least 1, got {split}")
    per_piece = max(1, cdiv(steps, split))
    return per_piece, max(1, cdiv(steps, per_piece))


def workspace(out: torch.Tensor, splits: int, accumulator: torch.dtype) -> torch.Tensor:
    """The (splits, M, N) planes the pieces write, contiguous; `out` itself for one piece."""
    if splits == 1:
        return out
    return out.new_empty((splits, *out.shape), dtype=accumulator)


@triton.jit
def store(
    acc,
    offs_m,
    offs_n,
    mask_m,
    mask_n,
    bias,
    out,  # the (M, N) output, or with PARTIAL the (splits, M, N) workspace
    N,  # the planes' leading dimension: N (M with PLANES_M_FASTEST; the kernel's own
    # argument, so Triton knows its divisibility and vectorizes)
    SPLIT_STRIDE,  # M * N
    stride_om,
    stride_on,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    PARTIAL: tl.constexpr,
    SPLIT_AXIS: tl.constexpr,  # the grid axis that numbers the pieces
    PLANES_M_FASTEST: tl.constexpr = False,  # planes (N, M), for a tile of runs of rows
):
    """A piece's end: with PARTIAL its sum (in ACC_DTYPE) into its workspace plane, no
    epilogue; else act(acc + bias) into out."""
    if PARTIAL:
        plane = out + tl.program_id(SPLIT_AXIS).to(tl.int64) * SPLIT_STRIDE
        if PLANES_M_FASTEST:
            ptrs = plane + offs_n[None, :].to(tl.int64) * N + offs_m[:, None]
        else:
            ptrs = plane + offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
        tl.store(ptrs, acc, mask=mask_m[:, None] & mask_n[None, :])
    else:
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
            ACC_DTYPE,
        )


@triton.jit
def store_last_sums(
    acc,
    offs_m,
    offs_n,
    mask_m,
    mask_n,
    bias,
    out,  # the (M, N) output
    partials,  # the (SPLITS, M, N) workspace, in ACC_DTYPE
    counter,  # this output tile's int32 counter: zero before the launch, left at zero
    N,  # the planes' leading dimension: N (M with PLANES_M_FASTEST; the kernel's own
    # argument, so Triton knows its divisibility and vectorizes)
    SPLIT_STRIDE,  # M * N
    stride_om,
    stride_on,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    SPLITS: tl.constexpr,
    SPLIT_AXIS: tl.constexpr,  # the grid axis that numbers the pieces
    PLANES_M_FASTEST: tl.constexpr = False,  # planes (N, M), for a tile of runs of rows
):
    """A piece's end without a second kernel: every piece stores its sum to its plane and
    counts itself in; the last of a tile to arrive adds the planes in plane order and applies
    the epilogue. The sum's order is fixed, so the result is the same every run whichever
    piece is last; the atomic only orders them."""
    mask = mask_m[:, None] & mask_n[None, :]
    if PLANES_M_FASTEST:
        tile = partials + offs_n[None, :].to(tl.int64) * N + offs_m[:, None]
    else:
        tile = partials + offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
    piece = tl.program_id(SPLIT_AXIS)
    tl.store(tile + piece.to(tl.int64) * SPLIT_STRIDE, acc, mask=mask)
    tl.debug_barrier()  # all of the program's stores before its release below
    arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
    if arrived == SPLITS - 1:
        # from L2 (.cg): the other pieces' stores, never a stale L1 line
        total = tl.load(tile, mask=mask, other=0.0, cache_modifier=".cg")
        part = tile
        for _ in tl.static_range(1, SPLITS):  # in plane order
            part += SPLIT_STRIDE  # a step at a time: plane * SPLIT_STRIDE may pass int32
            total += tl.load(part, mask=mask, other=0.0, cache_modifier=".cg")
        tl.store(counter, 0)  # ready for the next launch on the stream
        _epilogue_store(
            total, offs_m, offs_n, mask_m, mask_n, bias, out, stride_om, stride_on, HAS_BIAS,
            ACTIVATION, ACC_DTYPE,
        )  # fmt: skip


@triton.jit
def end_piece(
    acc,
    offs_m,
    offs_n,
    mask_m,
    mask_n,
    bias,
    out,  # the (M, N) output
    partials,  # the (SPLITS, M, N) workspace in ACC_DTYPE: `workspace`, out for one piece
    counters,  # with FUSED an int32 a (row, column) tile, zero (tile_counters)
    N,  # the planes' leading dimension: N (M with PLANES_M_FASTEST; the kernel's own
    # argument, so Triton knows its divisibility and vectorizes)
    SPLIT_STRIDE,  # M * N
    stride_om,
    stride_on,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    SPLITS: tl.constexpr,
    FUSED: tl.constexpr,  # (SPLITS > 1) the last piece of a tile sums the planes
    PLANES_M_FASTEST: tl.constexpr = False,  # planes (N, M), FUSED only (sum_partials
    # reads (M, N) planes)
):
    """The end of a program of a (row tiles, column tiles, SPLITS) grid: act(acc + bias)
    into out when K is one piece, else the piece's plane, summed by the tile's last piece
    (FUSED) or by sum_partials after the launch."""
    if FUSED:
        counter = counters + tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)
        store_last_sums(
            acc, offs_m, offs_n, mask_m, mask_n, bias, out, partials, counter, N, SPLIT_STRIDE,
            stride_om, stride_on, HAS_BIAS, ACTIVATION, ACC_DTYPE, SPLITS, 2, PLANES_M_FASTEST,
        )  # fmt: skip
    else:
        store(
            acc, offs_m, offs_n, mask_m, mask_n, bias, partials, N, SPLIT_STRIDE, stride_om,
            stride_on, HAS_BIAS, ACTIVATION, ACC_DTYPE, SPLITS > 1, 2, PLANES_M_FASTEST,
        )  # fmt: skip


_COUNTERS: dict[tuple[int, int], torch.Tensor] = {}


def tile_counters(device: torch.device, tiles: int) -> torch.Tensor:
    """Zeroed int32 counters, one per output tile, for store_last_sums (which leaves them at
    zero): one buffer per device and stream, since launches on a stream run one at a time.
    While a CUDA graph is captured, a buffer of its own, zeroed in the graph: a kept one would
    be shared with graphs replayed on other streams, and freed under the graph when it grows."""
    if device.type == "cuda":
        if torch.cuda.is_current_stream_capturing():
            return torch.zeros(tiles, dtype=torch.int32, device=device)
        index = device.index if device.index is not None else torch.cuda.current_device()
        key = (index, torch.cuda.current_stream(index).cuda_stream)
    else:  # the interpreter runs one program at a time
        key = (-1, 0)
    counters = _COUNTERS.get(key)
    if counters is None or counters.numel() < tiles:
        counters = torch.zeros(max(tiles, 1024), dtype=torch.int32, device=device)
        _COUNTERS[key] = counters
    return counters


@triton.jit
def _sum_partials_kernel(
    partials,  # (SPLITS, M, N), contiguous, in the accumulator's type
    bias,
    out,  # (M, N): strides stride_om, stride_on
    M,
    N,
    SPLITS,
    SPLIT_STRIDE,  # M * N
    stride_om,
    stride_on,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    mask = mask_m[:, None] & mask_n[None, :]
    ptrs = partials + offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=partials.dtype.element_ty)
    for _ in range(SPLITS):  # in order: the same sum every run
        acc += tl.load(ptrs, mask=mask, other=0.0)
        ptrs += SPLIT_STRIDE  # a step at a time: split * SPLIT_STRIDE may pass int32
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
        partials.dtype.element_ty,
    )


def sum_partials(
    partials: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor, activation: str
) -> torch.Tensor:
    """out = act(partials.sum(0) + bias[:, None]), summing the planes in order."""
    splits, rows, cols = partials.shape
    block_n = min(64, triton.next_power_of_2(cols))
    _sum_partials_kernel[(cdiv(rows, 64), cdiv(cols, block_n))](
        partials,
        bias if bias is not None else partials,
        out,
        rows,
        cols,
        splits,
        rows * cols,
        out.stride(0),
        out.stride(1),
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        BLOCK_M=64,
        BLOCK_N=block_n,
    )
    return out
