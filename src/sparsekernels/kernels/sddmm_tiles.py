"""CSR SDDMM on tensor cores: the dense product of each output tile that holds stored entries,
then a gather of those entries out of the tile.

out[b, e] = dot(x[b, row(e), :], y[b, col(e), :]). The first kernel (sddmm_csr.py) gathers a
row of y for every stored entry: K values of traffic per entry on CUDA cores. Here a program
owns one (BLOCK_M, BLOCK_N) tile of the output that holds stored entries, computes the whole
tile with `tl.dot` over K (the loads of a GEMM main loop), flattens it and gathers its entries
by their place in the tile ("load as dense, compute as dense, keep the sparse"). A tile whose
entries are a few percent of its cells still costs less on tensor cores than the per-entry
gathers; empty tiles are never visited. Tiles are listed row-major, so neighbouring programs
share their x panel in L2.

The plan (build_plan) lists the non-empty tiles and, for each, its entries' places in the tile
and in CSR order: 6 bytes per entry, computed once per pattern by the caller's cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ._sizes import cdiv


@dataclass(frozen=True)
class TilePlan:
    """Where each stored entry sits in the tiling of the output by (block_m, block_n) tiles."""

    block_m: int
    block_n: int
    tiles: torch.Tensor  # (T,) int32: row-major id (tile_row * tiles_n + tile_col), non-empty only
    tile_starts: torch.Tensor  # (T + 1,) int32/int64: each tile's range in `local` and `dest`
    local: torch.Tensor  # (nnz,) int16/int32: row_in_tile * block_n + col_in_tile, tile order
    dest: torch.Tensor  # (nnz,) int32/int64: the entry's position in CSR order

    @property
    def fill(self) -> float:
        """Stored entries per cell of the visited tiles."""
        cells = self.tiles.numel() * self.block_m * self.block_n
        return self.local.numel() / cells if cells else 0.0


def build_plan(
    row_offsets: torch.Tensor, column_indices: torch.Tensor, cols: int, block_m: int, block_n: int
) -> TilePlan:
    """The TilePlan of a CSR pattern (rows = row_offsets.numel() - 1, `cols` columns): a stable
    sort of the entries by tile, so each tile's entries stay in CSR order (row-major)."""
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
    order = torch.argsort(tile_of, stable=True)
    tiles, counts = torch.unique_consecutive(tile_of[order], return_counts=True)
    starts = torch.zeros(tiles.numel() + 1, dtype=torch.int64, device=device)
    torch.cumsum(counts, 0, out=starts[1:])
    local = (entry_rows[order] % block_m) * block_n + entry_cols[order] % block_n
    wide = nnz > torch.iinfo(torch.int32).max
    return TilePlan(
        block_m,
        block_n,
        tiles.to(torch.int32),
        starts if wide else starts.to(torch.int32),
        local.to(torch.int16 if block_m * block_n <= 1 << 15 else torch.int32),
        order if wide else order.to(torch.int32),
    )


@triton.jit
def _sddmm_tiles_kernel(
    tiles,  # (T,) int32: program_id(0)'s tile, tile_row * tiles_n + tile_col
    tile_starts,  # (T + 1,) int32/int64
    local,  # (nnz,) int16/int32: place in the flattened (BLOCK_M, BLOCK_N) tile
    dest,  # (nnz,) int32/int64: place in out's nnz axis
    x,  # (M, K) or (batch, M, K): strides stride_xb (0 when unbatched), stride_xm, stride_xk
    y,  # (N, K) or (batch, N, K): strides stride_yb (0 when unbatched), stride_yn, stride_yk
    out,  # (batch, nnz): stride_ob between matrices, unit stride along nnz
    M,
    N,
    K,
    tiles_n,
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
    BLOCK_E: tl.constexpr,  # entries gathered a step
):
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    tile = tl.load(tiles + pid)
    offs_m = (tile // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    x_rows = x + batch * stride_xb + offs_m.to(tl.int64)[:, None] * stride_xm
    y_cols = y + batch * stride_yb + offs_n.to(tl.int64)[None, :] * stride_yn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        offs_k = k + tl.arange(0, BLOCK_K).to(tl.int64)
        mask_k = offs_k < K
        a = tl.load(x_rows + offs_k[None, :] * stride_xk, mask_m[:, None] & mask_k[None, :], 0.0)
        b = tl.load(y_cols + offs_k[:, None] * stride_yk, mask_k[:, None] & mask_n[None, :], 0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)

    flat = tl.reshape(acc, (BLOCK_M * BLOCK_N,))
    start = tl.load(tile_starts + pid).to(tl.int64)
    end = tl.load(tile_starts + pid + 1).to(tl.int64)
    out += batch * stride_ob
    for e in range(start, end, BLOCK_E):
        offs = e + tl.arange(0, BLOCK_E).to(tl.int64)
        mask = offs < end
        place = tl.load(local + offs, mask=mask, other=0).to(tl.int32)
        values = tl.gather(flat, place, 0)
        to = tl.load(dest + offs, mask=mask, other=0).to(tl.int64)
        tl.store(out + to, values.to(out.dtype.element_ty), mask=mask)


def sddmm_tiles(
    *,
    plan: TilePlan,
    x: torch.Tensor,
    y: torch.Tensor,
    out: torch.Tensor,
    block_k: int,
    block_e: int,
    precision: str,
    num_warps: int,
    num_stages: int,
) -> torch.Tensor:
    """Launch over out (batch, nnz), unit stride along nnz; x, y may be unbatched (stride 0).
    x and y are float16, bfloat16 or float32 (float32 at `precision`, "ieee" or "tf32")."""
    batch, nnz = out.shape
    tiles = plan.tiles.numel()
    if tiles == 0 or batch == 0:
        return out
    assert out.stride(1) == 1 or nnz == 1, "out must have unit stride along nnz"
    rows, cols = x.shape[-2], y.shape[-2]
    _sddmm_tiles_kernel[(tiles, batch)](
        plan.tiles,
        plan.tile_starts,
        plan.local,
        plan.dest,
        x,
        y,
        out,
        rows,
        cols,
        x.shape[-1],
        cdiv(cols, plan.block_n),
        x.stride(0) if x.dim() == 3 else 0,
        x.stride(-2),
        x.stride(-1),
        y.stride(0) if y.dim() == 3 else 0,
        y.stride(-2),
        y.stride(-1),
        out.stride(0),
        PRECISION=precision,
        BLOCK_M=plan.block_m,
        BLOCK_N=plan.block_n,
        BLOCK_K=block_k,
        BLOCK_E=block_e,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out
