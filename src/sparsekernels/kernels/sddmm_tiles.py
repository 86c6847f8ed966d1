"""CSR SDDMM on tensor cores: the dense product of each output tile that holds stored entries,
then each tile row's entries gathered out of it and stored in CSR order.

out[b, e] = dot(x[b, row(e), :], y[b, col(e), :]). The first kernel (sddmm_csr.py) gathers a
row of y for every stored entry: K values of L2 traffic per entry on CUDA cores. Here a program
owns one (BLOCK_M, BLOCK_N) output tile that holds stored entries and computes all of it with
`tl.dot` over K (a GEMM main loop). A row's entries inside a tile sit next to each other in CSR
order, so the plan lists, per tile row, the place of its first entry and the columns of its
entries in order (uint8, 255 past the last): a gather along the row (warp shuffles, the row
lives in one warp) lines them up, and one masked store writes each row's run contiguously.

On the H200 this beat the per-entry kernel and cuBLAS's whole product plus a gather wherever
tiles are well filled (results/nvidia-h200/2026-11-30/at-e10ccc9/sddmm_tiles_sweep.txt): a
256-wide local window over 4096 positions, 16 heads, K = 64, bf16, 52.7 us against 245 for the
whole product plus a gather. Two forms lost there: a gather out of the flattened tile
(5-10x slower) and a scatter of each cell to its place (2-byte stores that do not coalesce).
Empty tiles are never visited; tiles are listed row-major, so neighbours share their x panel.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ._sizes import cdiv, operand_strides

ABSENT = 255  # the column of a rank past the row's last entry


@dataclass(frozen=True)
class TilePlan:
    """Where each stored entry lands from the tiling of the output by (block_m, block_n) tiles."""

    block_m: int
    block_n: int
    nnz: int
    tiles: torch.Tensor  # (T,) int32: row-major id (tile_row * tiles_n + tile_col), non-empty only
    row_starts: torch.Tensor  # (T, block_m) int32/int64: CSR place of each tile row's first entry
    columns: torch.Tensor  # (T, block_m, J) uint8: each tile row's columns by rank, then ABSENT

    @property
    def fill(self) -> float:
        """Stored entries per cell of the visited tiles."""
        cells = self.tiles.numel() * self.block_m * self.block_n
        return self.nnz / cells if cells else 0.0


def build_plan(
    row_offsets: torch.Tensor,
    column_indices: torch.Tensor,
    cols: int,
    block_m: int,
    block_n: int,
) -> TilePlan:
    """The TilePlan of a CSR pattern (rows = row_offsets.numel() - 1, `cols` columns). A row's
    entries inside one tile are consecutive in CSR order (columns ascend within a row), so the
    place of each is its row's first place in the tile plus its rank there. J, the ranks a row
    holds, is the longest run rounded up to a power of 2."""
    if not 16 <= block_n < ABSENT:
        raise ValueError(f"block_n must be in [16, {ABSENT}), got {block_n}")
    nnz = column_indices.numel()
    rows = row_offsets.numel() - 1
    device = column_indices.device
    lengths = row_offsets.diff().long()
    entry_rows = torch.repeat_interleave(
        torch.arange(rows, device=device), lengths, output_size=nnz
    )
    entry_cols = column_indices.long()
    tiles_n = cdiv(cols, block_n)
    tile_of = (entry_rows // block_m) * tiles_n + entry_cols // block_n
    tiles, visit = torch.unique(tile_of, return_inverse=True)
    tile_row = visit * block_m + entry_rows % block_m
    places = torch.arange(nnz, device=device)
    starts = torch.zeros(tiles.numel() * block_m, dtype=torch.int64, device=device)
    starts.scatter_reduce_(0, tile_row, places, "amin", include_self=False)
    rank = places - starts[tile_row]
    runs = triton.next_power_of_2(int(rank.max()) + 1) if nnz else 1
    columns = torch.full((tiles.numel(), block_m, runs), ABSENT, dtype=torch.uint8, device=device)
    columns.view(-1)[tile_row * runs + rank] = (entry_cols % block_n).to(torch.uint8)
    wide = nnz > torch.iinfo(torch.int32).max
    return TilePlan(
        block_m,
        block_n,
        nnz,
        tiles.to(torch.int32),
        (starts if wide else starts.to(torch.int32)).view(-1, block_m),
        columns,
    )


@triton.jit
def _sddmm_tiles_kernel(
    tiles,  # (T,) int32: program_id(0)'s tile, tile_row * tiles_n + tile_col
    row_starts,  # (T, BLOCK_M) int32/int64: CSR place of each tile row's first entry
    columns,  # (T, BLOCK_M, BLOCK_J) uint8: each tile row's columns by rank, 255 past the last
    x,  # (M, K) or (batch, M, K): strides stride_xb (0 when unbatched), stride_xm, stride_xk
    y,  # (N, K) or (batch, N, K): strides stride_yb (0 when unbatched), stride_yn, stride_yk
    out,  # (batch, nnz): stride_ob between matrices, unit stride along nnz
    M,
    N,
    K,
    tiles_n,
    n_tiles,
    stride_xb,
    stride_xm,
    stride_xk,
    stride_yb,
    stride_yn,
    stride_yk,
    stride_ob,
    PRECISION: tl.constexpr,  # tl.dot's input_precision for float32: "ieee" or "tf32"
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_J: tl.constexpr,
    UPCAST: tl.constexpr,  # the CPU interpreter miscomputes bf16 tl.dot: use fp32
    WALK: tl.constexpr,  # K one step (K <= BLOCK_K): each program walks every n-th tile
    STAGES: tl.constexpr,  # (WALK) the pipeliner's stages: tiles whose loads are in flight
    PREFETCH: tl.constexpr,  # (WALK) the next tile's loads into registers before this dot
):
    batch = tl.program_id(1).to(tl.int64)
    first = tl.program_id(0)
    wide = first.to(tl.int64) * 0  # (an int64 zero: tile offsets past 2^31)
    if WALK and PREFETCH:
        # plain loads at the top of each step for the next tile (its id read a step before),
        # the dot and the gather on the registers loaded a step ago: on sm_90 the pipeliner
        # issues its copies after a step's gather and stores, these before its dot
        step = tl.num_programs(0)
        last = n_tiles - 1
        a, b = _panels(tl.load(tiles + first), batch, x, y, M, N, K, tiles_n, stride_xb,
                       stride_xm, stride_xk, stride_yb, stride_yn, stride_yk, BLOCK_M, BLOCK_N,
                       BLOCK_K)  # fmt: skip
        column, start = _plan_rows(wide + first, row_starts, columns, BLOCK_M, BLOCK_J)
        tile_next = tl.load(tiles + tl.minimum(first + step, last))
        for t in tl.range(first, n_tiles, step, num_stages=1):
            t_next = tl.minimum(t + step, last)  # (past the end: the last tile, reloaded)
            a_next, b_next = _panels(tile_next, batch, x, y, M, N, K, tiles_n, stride_xb,
                                     stride_xm, stride_xk, stride_yb, stride_yn, stride_yk,
                                     BLOCK_M, BLOCK_N, BLOCK_K)  # fmt: skip
            column_next, start_next = _plan_rows(wide + t_next, row_starts, columns, BLOCK_M,
                                                 BLOCK_J)  # fmt: skip
            tile_after = tl.load(tiles + tl.minimum(t_next + step, last))
            acc = _product(a, b, PRECISION, UPCAST, BLOCK_M, BLOCK_N)
            _store_entries(acc, column, start, batch, out, stride_ob, BLOCK_J)
            a, b, column, start, tile_next = a_next, b_next, column_next, start_next, tile_after
    elif WALK:
        # a tile's work is then one load of each panel, one dot and the gather: a program a
        # tile waits on its loads alone; walking tiles, the pipeliner loads the next meanwhile
        # (on sm_90 from 5 stages: fewer wait on the next tile's copies at each step's top)
        for t in tl.range(first, n_tiles, tl.num_programs(0), num_stages=STAGES):
            column, start = _plan_rows(wide + t, row_starts, columns, BLOCK_M, BLOCK_J)
            a, b = _panels(tl.load(tiles + t), batch, x, y, M, N, K, tiles_n, stride_xb,
                           stride_xm, stride_xk, stride_yb, stride_yn, stride_yk, BLOCK_M,
                           BLOCK_N, BLOCK_K)  # fmt: skip
            acc = _product(a, b, PRECISION, UPCAST, BLOCK_M, BLOCK_N)
            _store_entries(acc, column, start, batch, out, stride_ob, BLOCK_J)
    else:
        pid = wide + first
        # the plan's columns and row starts first, beside the tile's id: read after the
        # product, they were a third round trip to memory in a program's life
        column, start = _plan_rows(pid, row_starts, columns, BLOCK_M, BLOCK_J)
        tile = tl.load(tiles + pid)
        rows = tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        offs_m = (tile // tiles_n) * BLOCK_M + rows
        offs_n = (tile % tiles_n) * BLOCK_N + cols
        mask_m = offs_m < M
        mask_n = offs_n < N
        x_rows = x + batch * stride_xb + offs_m.to(tl.int64)[:, None] * stride_xm
        y_cols = y + batch * stride_yb + offs_n.to(tl.int64)[None, :] * stride_yn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            offs_k = k + tl.arange(0, BLOCK_K).to(tl.int64)
            mask_k = offs_k < K
            a = tl.load(x_rows + offs_k[None, :] * stride_xk, mask_m[:, None] & mask_k[None, :],
                        0.0)  # fmt: skip
            b = tl.load(y_cols + offs_k[:, None] * stride_yk, mask_k[:, None] & mask_n[None, :],
                        0.0)  # fmt: skip
            if UPCAST:
                a, b = a.to(tl.float32), b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
        _store_entries(acc, column, start, batch, out, stride_ob, BLOCK_J)


@triton.jit
def _plan_rows(pid, row_starts, columns, BLOCK_M: tl.constexpr, BLOCK_J: tl.constexpr):
    """Tile `pid`'s columns by rank a row and its rows' first CSR places."""
    rows = tl.arange(0, BLOCK_M)
    js = tl.arange(0, BLOCK_J)
    column = tl.load(columns + pid * (BLOCK_M * BLOCK_J) + rows[:, None] * BLOCK_J + js[None, :])
    start = tl.load(row_starts + pid * BLOCK_M + rows).to(tl.int64)
    return column, start


@triton.jit
def _panels(tile, batch, x, y, M, N, K, tiles_n, stride_xb, stride_xm, stride_xk, stride_yb,
            stride_yn, stride_yk, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
            BLOCK_K: tl.constexpr):  # fmt: skip
    """The X rows and Y columns of output tile `tile`, K within one step (masked past K)."""
    offs_m = (tile // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K).to(tl.int64)
    mask_k = offs_k < K
    x_rows = x + batch * stride_xb + offs_m.to(tl.int64)[:, None] * stride_xm
    y_cols = y + batch * stride_yb + offs_n.to(tl.int64)[None, :] * stride_yn
    a = tl.load(x_rows + offs_k[None, :] * stride_xk, (offs_m < M)[:, None] & mask_k[None, :], 0.0)
    b = tl.load(y_cols + offs_k[:, None] * stride_yk, mask_k[:, None] & (offs_n < N)[None, :], 0.0)
    return a, b


@triton.jit
def _product(a, b, PRECISION: tl.constexpr, UPCAST: tl.constexpr, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr):  # fmt: skip
    if UPCAST:
        a, b = a.to(tl.float32), b.to(tl.float32)
    return tl.dot(a, b, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32), input_precision=PRECISION)


@triton.jit
def _store_entries(acc, column, start, batch, out, stride_ob, BLOCK_J: tl.constexpr):
    """Each tile row's entries gathered out of the product and stored as one run from its
    first CSR place; rows and columns past M or N hold no entry, so the mask covers the edges."""
    js = tl.arange(0, BLOCK_J)
    present = column != 255
    values = tl.gather(acc, tl.where(present, column, 0).to(tl.int32), 1)
    places = out + batch * stride_ob + start
    tl.store(places[:, None] + js[None, :], values.to(out.dtype.element_ty), mask=present)


def sddmm_tiles(
    *,
    plan: TilePlan,
    x: torch.Tensor,
    y: torch.Tensor,
    out: torch.Tensor,
    block_k: int,
    precision: str,
    num_warps: int,
    num_stages: int,
    programs: int | None = None,
    prefetch: bool = False,
) -> torch.Tensor:
    """Launch over out (batch, nnz), unit stride along nnz; x, y may be unbatched (stride 0).
    x and y are float16, bfloat16 or float32 (float32 at `precision`, "ieee" or "tf32").
    `programs` (K <= block_k only): that many programs each walk every programs-th tile, the
    next tiles' loads in flight (num_stages deep) while one tile's dot and gather run; None:
    a program a tile. `prefetch` (with `programs`): the next tile's loads as plain loads into
    registers before this tile's dot instead of the pipeliner's copies."""
    walk = programs is not None
    if walk and (programs < 1 or x.shape[-1] > block_k):
        raise ValueError(
            f"programs must be positive and K ({x.shape[-1]}) at most block_k ({block_k}), "
            f"got programs={programs}"
        )
    if prefetch and not walk:
        raise ValueError("prefetch needs programs (a walk over tiles)")
    batch, nnz = out.shape
    tiles = plan.tiles.numel()
    if tiles == 0 or batch == 0:
        return out
    assert out.stride(1) == 1 or nnz == 1, "out must have unit stride along nnz"
    rows, cols = x.shape[-2], y.shape[-2]
    upcast = x.device.type == "cpu" and x.dtype == torch.bfloat16  # (the interpreter's dot)
    if upcast:
        precision = "ieee"
    _sddmm_tiles_kernel[(min(programs, tiles) if walk else tiles, batch)](
        plan.tiles,
        plan.row_starts,
        plan.columns,
        x,
        y,
        out,
        rows,
        cols,
        x.shape[-1],
        cdiv(cols, plan.block_n),
        tiles,
        *operand_strides(x),
        *operand_strides(y),
        out.stride(0),
        PRECISION=precision,
        BLOCK_M=plan.block_m,
        BLOCK_N=plan.block_n,
        BLOCK_K=block_k,
        BLOCK_J=plan.columns.shape[-1],
        UPCAST=upcast,
        WALK=walk,
        STAGES=num_stages,
        PREFETCH=prefetch,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out
