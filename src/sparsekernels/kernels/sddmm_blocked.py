"""CSR SDDMM walked in 2-D blocks of the output, so that the operands' rows come from L1.

The per-entry kernel (sddmm_csr.py) walks a whole row: every stored entry reads its column's Y
row (K values) from L2, 256 bytes an entry at K = 64 in float32, and L2's rate bounds it (fp32
2% of 4096^2: 86 MB at ~5.2 TB/s). Here a program takes the entries of one block of the output,
R rows x C columns, in CSR order within the block: its Y rows are C of them, read from L2 once
and then from L1 (global loads are cached there), its X rows R of them. L2 then moves (R + C) x K
values a block for R x C x density entries: at 10% stored, R = C = 256, about 20 bytes an entry
instead of 256, and the gathers' L1 reads bound the walk. X's rows are gathered per entry too,
but consecutive entries mostly share a row, and lanes of one load reading one address cost one
read.

The plan (build_plan, cached per pattern by ops/_sddmm_plans.py): the entries' CSR places in
block order (`entries`, int32), each entry's row and column within its block (`cells`, one
int32: the walk reads no column indices, so no load waits on another), and the pieces: a
block's entries cut into runs of at most `chunk` entries, piece p being
entries[starts[p]:starts[p + 1]] of the block whose first row and column are first_rows[p] and
first_cols[p]. A launch takes a program a piece, or fewer programs each walking every n-th piece
(persistent: as many blocks resident on an SM as programs placed there). Blocks without entries
get no piece. The output is written at the CSR places, as the per-entry kernel writes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ._sizes import cdiv, matrix_span, operand_strides

# an entry's place in its block is one int32: its row (15 bits) above its column (16 bits)
MAX_BLOCK_ROWS = 2**15
MAX_BLOCK_COLS = 2**16


@dataclass(frozen=True)
class BlockedPlan:
    """The entries of a CSR pattern grouped by (block_rows x block_cols) blocks of the output."""

    block_rows: int
    block_cols: int
    chunk: int  # the most entries a piece holds
    entries: torch.Tensor  # (nnz,) int32: CSR places, block by block, in CSR order within one
    cells: torch.Tensor  # (nnz,) int32: each entry's row in its block << 16 | its column there
    starts: torch.Tensor  # (pieces + 1,) int32: each piece's first place in `entries`
    first_rows: torch.Tensor  # (pieces,) int32: the first row of each piece's block
    first_cols: torch.Tensor  # (pieces,) int32: its first column

    @property
    def pieces(self) -> int:
        return self.first_rows.numel()


def build_plan(
    row_offsets: torch.Tensor,
    column_indices: torch.Tensor,
    cols: int,
    block_rows: int,
    block_cols: int,
    chunk: int,
) -> BlockedPlan:
    """The BlockedPlan of a CSR pattern (rows = row_offsets.numel() - 1, `cols` columns).
    Blocks are visited row block by row block, column blocks left to right within one; a stable
    sort by block keeps CSR order (row, then column) inside each block."""
    if not 1 <= block_rows <= MAX_BLOCK_ROWS:
        raise ValueError(f"block_rows must be in [1, {MAX_BLOCK_ROWS}], got {block_rows}")
    if not 1 <= block_cols <= MAX_BLOCK_COLS:
        raise ValueError(f"block_cols must be in [1, {MAX_BLOCK_COLS}], got {block_cols}")
    if chunk < 1:
        raise ValueError(f"chunk must be positive, got {chunk}")
    nnz = column_indices.numel()
    if nnz > torch.iinfo(torch.int32).max:
        raise ValueError(f"the blocked plan holds int32 places; the pattern has {nnz} entries")
    rows = row_offsets.numel() - 1
    device = column_indices.device
    entry_rows = torch.repeat_interleave(
        torch.arange(rows, device=device), row_offsets.diff().long(), output_size=nnz
    )
    entry_cols = column_indices.long()
    block_of = (entry_rows // block_rows) * cdiv(cols, block_cols) + entry_cols // block_cols
    block_of, entries = torch.sort(block_of, stable=True)
    blocks, counts = torch.unique_consecutive(block_of, return_counts=True)
    first_rows = (blocks // cdiv(cols, block_cols)) * block_rows
    first_cols = (blocks % cdiv(cols, block_cols)) * block_cols
    cells = (entry_rows[entries] % block_rows) << 16 | entry_cols[entries] % block_cols
    # each block cut into ceil(count / chunk) pieces of `chunk` entries, the last one shorter
    pieces = (counts + chunk - 1) // chunk
    total = int(pieces.sum())
    piece_block = torch.repeat_interleave(torch.arange(blocks.numel(), device=device), pieces,
                                          output_size=total)  # fmt: skip
    block_starts = torch.cumsum(counts, 0) - counts
    piece_rank = torch.arange(total, device=device)
    piece_rank -= (torch.cumsum(pieces, 0) - pieces).repeat_interleave(pieces, output_size=total)
    starts = torch.empty(total + 1, dtype=torch.int64, device=device)
    starts[:-1] = block_starts[piece_block] + piece_rank * chunk
    starts[-1] = nnz
    return BlockedPlan(
        block_rows,
        block_cols,
        chunk,
        entries.to(torch.int32),
        cells.to(torch.int32),
        starts.to(torch.int32),
        first_rows[piece_block].to(torch.int32),
        first_cols[piece_block].to(torch.int32),
    )


@triton.jit
def _sddmm_blocked_kernel(
    starts,  # (pieces + 1,) int32: piece p is entries[starts[p]:starts[p + 1]]
    first_rows,  # (pieces,) int32: the first row of piece p's block
    first_cols,  # (pieces,) int32: its first column
    entries,  # (nnz,) int32: CSR places in block order
    cells,  # (nnz,) int32: each entry's row in its block << 16 | its column in its block
    x,  # (M, K) or (batch, M, K): strides stride_xb (0 when unbatched), stride_xm, stride_xk
    y,  # (N, K) or (batch, N, K): strides stride_yb (0 when unbatched), stride_yn, stride_yk
    out,  # (batch, nnz): stride_ob between matrices, unit stride along nnz
    pieces,
    K,
    stride_xb,
    stride_xm,
    stride_xk,
    stride_yb,
    stride_yn,
    stride_yk,
    stride_ob,
    ACC_DTYPE: tl.constexpr,
    INDEX: tl.constexpr,  # int32 when every offset within a matrix fits, else int64
    BLOCK_NNZ: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,  # K % BLOCK_K == 0: no mask on the operands' loads
    AHEAD: tl.constexpr,  # cells loaded two steps ahead, operands (where K is one step) one
    ONE_K: tl.constexpr,  # K == BLOCK_K (with EVEN_K): a step's operands are one load each
):
    batch = tl.program_id(1).to(tl.int64)
    x += batch * stride_xb
    y += batch * stride_yb
    out += batch * stride_ob
    offs_k = tl.arange(0, BLOCK_K).to(INDEX)  # INDEX before the strides
    # a launch of fewer programs than pieces walks them in turn (persistent programs: as many
    # blocks resident on an SM as programs placed there, whose rows then share its L1)
    for piece in range(tl.program_id(0), pieces, tl.num_programs(0)):
        start = tl.load(starts + piece)
        end = tl.load(starts + piece + 1)
        x_block = x + tl.load(first_rows + piece).to(INDEX) * stride_xm
        y_block = y + tl.load(first_cols + piece).to(INDEX) * stride_yn
        if AHEAD:
            # loads issued ahead: a step's operands during the step before, its cells two
            # steps before (the operands' addresses wait on them), so a warp's next gathers
            # are in flight while it sums this step's products (few warps an SM, whose blocks
            # then fit L1)
            offs = start + tl.arange(0, BLOCK_NNZ)
            mask = offs < end
            places = tl.load(entries + offs, mask=mask, other=0).to(INDEX)
            cell = tl.load(cells + offs, mask=mask, other=0)
            offs_next = offs + BLOCK_NNZ
            mask_next = offs_next < end
            places_next = tl.load(entries + offs_next, mask=mask_next, other=0).to(INDEX)
            cell_next = tl.load(cells + offs_next, mask=mask_next, other=0)
            x_tile, y_tile = _operands(x_block, y_block, cell, offs_k, stride_xm, stride_xk,
                                       stride_yn, stride_yk, INDEX, ONE_K)  # fmt: skip
            for e in range(start, end, BLOCK_NNZ):
                offs_later = e + 2 * BLOCK_NNZ + tl.arange(0, BLOCK_NNZ)
                mask_later = offs_later < end
                places_later = tl.load(entries + offs_later, mask=mask_later, other=0).to(INDEX)
                cell_later = tl.load(cells + offs_later, mask=mask_later, other=0)
                x_next, y_next = _operands(
                    x_block, y_block, cell_next, offs_k, stride_xm, stride_xk, stride_yn,
                    stride_yk, INDEX, ONE_K,
                )  # fmt: skip
                if ONE_K:
                    sums = tl.sum(x_tile.to(ACC_DTYPE) * y_tile.to(ACC_DTYPE), axis=1)
                else:
                    sums = _dot_rows(x_block, y_block, cell, offs_k, K, stride_xm, stride_xk,
                                     stride_yn, stride_yk, ACC_DTYPE, INDEX, BLOCK_NNZ, BLOCK_K,
                                     EVEN_K)  # fmt: skip
                tl.store(out + places, sums.to(out.dtype.element_ty), mask=mask)
                places, cell, mask, x_tile, y_tile = (places_next, cell_next, mask_next,
                                                      x_next, y_next)  # fmt: skip
                places_next, cell_next, mask_next = places_later, cell_later, mask_later
        else:
            for e in range(start, end, BLOCK_NNZ):
                offs = e + tl.arange(0, BLOCK_NNZ)
                mask = offs < end
                places = tl.load(entries + offs, mask=mask, other=0).to(INDEX)
                # lanes past the piece read cell 0 (the block's first row and column, which
                # exist) and are not stored: the operands' loads need no mask on entries
                cell = tl.load(cells + offs, mask=mask, other=0)
                sums = _dot_rows(x_block, y_block, cell, offs_k, K, stride_xm, stride_xk,
                                 stride_yn, stride_yk, ACC_DTYPE, INDEX, BLOCK_NNZ, BLOCK_K,
                                 EVEN_K)  # fmt: skip
                tl.store(out + places, sums.to(out.dtype.element_ty), mask=mask)


@triton.jit
def _operands(x_block, y_block, cell, offs_k, stride_xm, stride_xk, stride_yn, stride_yk,
              INDEX: tl.constexpr, ONE_K: tl.constexpr):  # fmt: skip
    """A step's X and Y tiles where K is one step (ONE_K), else nothing loaded (zeros)."""
    if ONE_K:
        rows = (cell >> 16).to(INDEX)
        cols = (cell & 0xFFFF).to(INDEX)
        x_tile = tl.load(x_block + rows[:, None] * stride_xm + offs_k[None, :] * stride_xk)
        y_tile = tl.load(y_block + cols[:, None] * stride_yn + offs_k[None, :] * stride_yk)
    else:
        x_tile = tl.zeros((cell.shape[0], offs_k.shape[0]), dtype=x_block.dtype.element_ty)
        y_tile = tl.zeros((cell.shape[0], offs_k.shape[0]), dtype=y_block.dtype.element_ty)
    return x_tile, y_tile


@triton.jit
def _dot_rows(x_block, y_block, cell, offs_k, K, stride_xm, stride_xk, stride_yn, stride_yk,
              ACC_DTYPE: tl.constexpr, INDEX: tl.constexpr, BLOCK_NNZ: tl.constexpr,
              BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):  # fmt: skip
    """Each cell's X row dotted with its Y row, K a step of BLOCK_K."""
    rows = (cell >> 16).to(INDEX)
    cols = (cell & 0xFFFF).to(INDEX)
    x_ptrs = x_block + rows[:, None] * stride_xm + offs_k[None, :] * stride_xk
    y_ptrs = y_block + cols[:, None] * stride_yn + offs_k[None, :] * stride_yk
    # products summed along K per lane, then across lanes once an entry (not once a K step:
    # the cross-lane sum's shuffles were a third of a step's instructions)
    acc = tl.zeros((BLOCK_NNZ, BLOCK_K), dtype=ACC_DTYPE)
    for k in range(0, K, BLOCK_K):
        if EVEN_K:
            x_tile = tl.load(x_ptrs)
            y_tile = tl.load(y_ptrs)
        else:
            mask_k = (k + offs_k < K)[None, :]
            x_tile = tl.load(x_ptrs, mask=mask_k, other=0.0)
            y_tile = tl.load(y_ptrs, mask=mask_k, other=0.0)
        acc += x_tile.to(ACC_DTYPE) * y_tile.to(ACC_DTYPE)
        x_ptrs += BLOCK_K * stride_xk
        y_ptrs += BLOCK_K * stride_yk
    return tl.sum(acc, axis=1)


INT32_LIMIT = 2**31  # offsets within a matrix below it are computed in int32


def sddmm_blocked(
    *,
    plan: BlockedPlan,
    x: torch.Tensor,
    y: torch.Tensor,
    out: torch.Tensor,
    block_nnz: int,
    block_k: int,
    num_warps: int,
    programs: int | None = None,
    ahead: bool = False,
) -> torch.Tensor:
    """Launch over out (batch, nnz), unit stride along nnz; x, y may be unbatched (stride 0).
    `programs`: how many programs walk the plan's pieces (persistent, each taking every
    programs-th piece); None: one a piece. `ahead`: a step's cells loaded two steps before it,
    its operands (where K is one step of block_k) one step before."""
    batch, nnz = out.shape
    if plan.pieces == 0 or nnz == 0 or batch == 0:
        return out
    assert out.stride(1) == 1 or nnz == 1, "out must have unit stride along nnz"
    assert plan.entries.numel() == nnz, "the plan is another pattern's"
    if programs is not None and programs < 1:
        raise ValueError(f"programs must be positive, got {programs}")
    reach = max(nnz + block_nnz, matrix_span(x), matrix_span(y))
    k = x.shape[-1]
    _sddmm_blocked_kernel[(min(programs or plan.pieces, plan.pieces), batch)](
        plan.starts,
        plan.first_rows,
        plan.first_cols,
        plan.entries,
        plan.cells,
        x,
        y,
        out,
        plan.pieces,
        k,
        *operand_strides(x),
        *operand_strides(y),
        out.stride(0),
        ACC_DTYPE=tl.float64 if out.dtype == torch.float64 else tl.float32,
        INDEX=tl.int32 if reach < INT32_LIMIT else tl.int64,
        BLOCK_NNZ=block_nnz,
        BLOCK_K=block_k,
        EVEN_K=k % block_k == 0,
        AHEAD=ahead,
        ONE_K=k == block_k,
        num_warps=num_warps,
    )
    return out
