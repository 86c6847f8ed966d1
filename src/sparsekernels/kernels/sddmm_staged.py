"""CSR SDDMM (float32) over the blocked plan, each block's operand rows staged in shared memory
and gathered from there with inline PTX (Gluon, CUDA only; not routed: untimed).

Why: the per-entry kernel (sddmm_csr.py) reads each entry's Y row from L2 (~11 cycles an entry
an SM at K = 64 on an H100, L2-bound), and the blocked walk (sddmm_blocked.py), whose rows were
to come from L1, lost to it: its programs' blocks evict each other. Here a block's rows sit in
shared memory, read at 128 bytes a cycle (benchmarks/NOTES.md, sixty-eighth session: ~3 cycles
an entry, ~4x cuSPARSE at 2% if the gathers run conflict-light).

out[e] = dot(x[row(e), :], y[col(e), :]) for every stored entry e of a CSR pattern. The plan is
kernels/sddmm_blocked.py's BlockedPlan: one program a piece. A program:

1. stages its block's Y rows (block_cols of them, zeros past N) at byte 0 of the kernel's one
   shared buffer and its X rows (block_rows, zeros past M) after them, with its own PTX
   `st.shared.v4.f32` at offsets from the dynamic window's start (`global_smem`), so the buffer
   must be the kernel's only shared memory (check_buffer_alone after the first launch);
2. waits at a CTA barrier;
3. walks the piece's entries BLOCK_NNZ at a time in a (BLOCK_NNZ, 4) layout: an entry's 4 lanes
   each take K/16 of its row's 16-byte chunks (lane l chunks l, l + 4, ...: a step's 4 lanes
   read 64 consecutive bytes), gathered by PTX `ld.shared.v4.f32`, multiplied and added, then
   summed across the 4 lanes (shuffles within a warp: no shared scratch) and stored at the
   entries' CSR places.

Shared layout: a row's pitch is ROW floats, K rounded up to a power of two (K = 48 takes 256
bytes a row: Gluon's shared shapes are powers of two, and the swizzle below stays in the row);
16-byte chunk j of row r lies at chunk j ^ (r % PHASES), PHASES = min(8, ROW / 4) (8 from
K = 32 up; 4 at K = 16, where a row is 4 chunks). Row r of Y at byte r * ROW * 4, row r of X at
byte (BC + r) * ROW * 4. emulate.py reproduces these offsets on the CPU.
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ._gluon_bits import _along, check_buffer_alone, cta_barrier
from .sddmm_blocked import BlockedPlan

SHARED_MAX = 96 * 1024  # the most shared memory a program takes here
KS = (16, 32, 48, 64)


@gluon.jit
def _store_chunk(place, values):
    """values (4 consecutive float32 a thread, pack=4) stored as one 16-byte `st.shared.v4.f32`
    at byte `place` (the first of the 4 places, all equal) of the dynamic shared window, unless
    place is -1. The store is its effect (not pure)."""
    return gl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .u32 a; setp.ne.s32 p, $4, -1; mov.u32 a, global_smem; "
        "add.u32 a, a, $4; @p st.shared.v4.f32 [a], {$8, $9, $10, $11}; "
        "mov.u32 $0, 0; mov.u32 $1, 0; mov.u32 $2, 0; mov.u32 $3, 0; }",
        "=r,=r,=r,=r,r,r,r,r,f,f,f,f", [place, values], dtype=gl.int32, is_pure=False, pack=4,
    )  # fmt: skip


@gluon.jit
def _load_chunk(place):
    """The 4 float32 of the 16-byte chunk at byte `place` of the dynamic shared window
    (`ld.shared.v4.f32`), as 4 tensors. Not pure: it must stay after the barrier."""
    return gl.inline_asm_elementwise(
        "{ .reg .u32 a; mov.u32 a, global_smem; add.u32 a, a, $4; "
        "ld.shared.v4.f32 {$0, $1, $2, $3}, [a]; }",
        "=f,=f,=f,=f,r", [place], dtype=(gl.float32, gl.float32, gl.float32, gl.float32),
        is_pure=False, pack=1,
    )  # fmt: skip


@gluon.jit
def _stage_rows(src, first, limit, stride, base_row: gl.constexpr, ROWS_IN: gl.constexpr,
                K: gl.constexpr, ROW: gl.constexpr, PHASES: gl.constexpr,
                STAGE: gl.constexpr, CHUNKS: gl.constexpr):  # fmt: skip
    """Rows first .. first + ROWS_IN of src (zeros at and past `limit`) stored as buffer rows
    base_row .. base_row + ROWS_IN, STAGE rows a step, 16-byte chunks swizzled."""
    offs_k = _along(ROW, 1, 2, CHUNKS)  # (1, ROW): the float within a row
    chunk = offs_k // 4  # equal over a thread's 4 floats (one pack of _store_chunk)
    mask_k = offs_k < K
    for r0 in range(0, ROWS_IN, STAGE):
        local = r0 + _along(STAGE, 0, 2, CHUNKS)  # (STAGE, 1): the row within the block
        row = first + local
        mask = (row < limit) & mask_k
        ptrs = src + row.to(gl.int64) * stride + offs_k
        values = gl.load(ptrs, mask=mask, other=0.0)
        place = (base_row + local) * (ROW * 4) + (chunk ^ (local % PHASES)) * 16
        # chunks past K (K = 48's padding) are not stored; rows past the matrix store zeros
        place = gl.where(mask_k, place, -1)
        _store_chunk(place, values)


@gluon.jit
def _sddmm_staged_kernel(
    starts,  # (pieces + 1,) int32: piece p is entries[starts[p]:starts[p + 1]]
    first_rows,  # (pieces,) int32: the first row of piece p's block
    first_cols,  # (pieces,) int32: its first column
    entries,  # (nnz,) int32: CSR places in block order
    cells,  # (nnz,) int32: row in block << 16 | column in block
    x,  # (M, K) float32, unit stride along K, row stride stride_xm
    y,  # (N, K) float32, unit stride along K, row stride stride_yn
    out,  # (nnz,) float32
    M,
    N,
    stride_xm,
    stride_yn,
    K: gl.constexpr,  # 16, 32, 48 or 64
    ROW: gl.constexpr,  # a row's floats in shared memory: K rounded up to a power of two
    PHASES: gl.constexpr,  # min(8, ROW // 4)
    BR: gl.constexpr,  # block rows (the plan's)
    BC: gl.constexpr,  # block columns (the plan's)
    STAGE: gl.constexpr,  # rows a staging step
    BLOCK_NNZ: gl.constexpr,  # entries a walking step
    CHUNKS: gl.constexpr,  # (STAGE, ROW) staging layout: 4 consecutive floats a thread
    WALK: gl.constexpr,  # (BLOCK_NNZ, 4) layout: an entry's 4 lanes adjacent in a warp
    SHARED: gl.constexpr,  # the buffer, plain (only PTX touches it)
):
    # the kernel's only shared memory: Y's rows at byte 0, X's after them
    buffer = gl.allocate_shared_memory(gl.float32, [BC + BR, ROW], SHARED)
    piece = gl.program_id(0)
    start = gl.load(starts + piece)
    end = gl.load(starts + piece + 1)
    first_row = gl.load(first_rows + piece)
    first_col = gl.load(first_cols + piece)
    # keeps the allocation (only PTX addresses it otherwise): Y's row 0 zeroed through the
    # descriptor, then the barrier orders it before the PTX stores over it
    buffer.index(0).store(gl.zeros([ROW], gl.float32, gl.SliceLayout(0, CHUNKS)))
    cta_barrier()
    _stage_rows(y, first_col, N, stride_yn, 0, BC, K, ROW, PHASES, STAGE, CHUNKS)
    _stage_rows(x, first_row, M, stride_xm, BC, BR, K, ROW, PHASES, STAGE, CHUNKS)
    cta_barrier()  # every row staged before any gather
    lane = _along(4, 1, 2, WALK)  # (1, 4): the lane within an entry
    step = gl.arange(0, BLOCK_NNZ, layout=gl.SliceLayout(1, WALK))
    for e in range(start, end, BLOCK_NNZ):
        offs = e + step
        mask = offs < end
        places = gl.load(entries + offs, mask=mask, other=0)
        # lanes past the piece read cell 0 (the block's first row and column: staged) and are
        # not stored
        cell = gl.expand_dims(gl.load(cells + offs, mask=mask, other=0), 1)
        r = cell >> 16
        c = cell & 0xFFFF
        y_row = c * (ROW * 4)
        x_row = (BC + r) * (ROW * 4)
        y_phase = c % PHASES
        x_phase = r % PHASES
        acc = gl.zeros([BLOCK_NNZ, 4], gl.float32, WALK)
        for i in gl.static_range(K // 16):
            chunk = i * 4 + lane
            x0, x1, x2, x3 = _load_chunk(x_row + (chunk ^ x_phase) * 16)
            y0, y1, y2, y3 = _load_chunk(y_row + (chunk ^ y_phase) * 16)
            acc = gl.fma(x0, y0, acc)
            acc = gl.fma(x1, y1, acc)
            acc = gl.fma(x2, y2, acc)
            acc = gl.fma(x3, y3, acc)
        sums = gl.sum(acc, axis=1)
        gl.store(out + places, sums, mask=mask)


def config(k: int, warps: int = 4, block_nnz: int = 64, block: tuple | None = None) -> dict:
    """The kernel's constexprs at K = k: block 128 x 128 at K 48-64, 256 x 256 below."""
    if k not in KS:
        raise ValueError(f"K must be a multiple of 16 in [16, 64], got {k}")
    row = 64 if k == 48 else k
    br, bc = block if block is not None else ((128, 128) if k > 32 else (256, 256))
    for what, n in (("block_rows", br), ("block_cols", bc)):
        if n < 1 or n & (n - 1):
            raise ValueError(f"{what} must be a power of two, got {n}")
    if (br + bc) * row * 4 > SHARED_MAX:
        raise ValueError(f"a {br} x {bc} block at K = {k} takes {(br + bc) * row * 4} bytes of "
                         f"shared memory, past {SHARED_MAX}")  # fmt: skip
    if block_nnz < 8 * warps or block_nnz & (block_nnz - 1):
        raise ValueError(f"block_nnz must be a power of two >= {8 * warps}, got {block_nnz}")
    lanes_k = row // 4  # threads along a row, a chunk each
    stage = max(32 // lanes_k * warps, 1)
    stage = min(max(stage, 32), min(br, bc))  # up to 32 rows a step (loads in flight)
    if stage < 32 // lanes_k * warps:
        raise ValueError(f"blocks of {min(br, bc)} rows are under one staging step "
                         f"({32 // lanes_k * warps} rows)")  # fmt: skip
    return dict(
        K=k, ROW=row, PHASES=min(8, row // 4), BR=br, BC=bc, STAGE=stage, BLOCK_NNZ=block_nnz,
        CHUNKS=gl.BlockedLayout([1, 4], [32 // lanes_k, lanes_k], [warps, 1], [1, 0]),
        WALK=gl.BlockedLayout([1, 1], [8, 4], [warps, 1], [1, 0]),
        SHARED=gl.SwizzledSharedLayout(1, 1, 1, [0]),  # (a row of the 2-D buffer)
    )  # fmt: skip


def shared_bytes(constants: dict) -> int:
    return (constants["BR"] + constants["BC"]) * constants["ROW"] * 4


def sddmm_staged(*, plan: BlockedPlan, x: torch.Tensor, y: torch.Tensor, out: torch.Tensor,
                 num_warps: int = 4, block_nnz: int = 64) -> torch.Tensor:  # fmt: skip
    """out (nnz,) float32 (unit stride) from x (M, K), y (N, K) float32 on CUDA, K in 16..64 a
    multiple of 16; `plan` from build_plan with blocks as config(K) takes them (its defaults:
    128 x 128 at K > 32, else 256 x 256)."""
    if x.dim() != 2 or y.dim() != 2:
        raise ValueError(f"x and y must be 2-D (unbatched), got {tuple(x.shape)}, "
                         f"{tuple(y.shape)}")  # fmt: skip
    if x.dtype != torch.float32 or y.dtype != torch.float32 or out.dtype != torch.float32:
        raise TypeError(f"x, y and out must be float32, got {x.dtype}, {y.dtype}, {out.dtype}")
    if not (x.is_cuda and y.is_cuda and out.is_cuda):
        raise ValueError("x, y and out must be on CUDA (a Gluon kernel: no CPU path)")
    k = x.shape[1]
    if y.shape[1] != k:
        raise ValueError(f"x and y must share K, got {x.shape[1]} and {y.shape[1]}")
    if k % 16 or not 16 <= k <= 64:
        raise ValueError(f"K must be a multiple of 16 in [16, 64], got {k}")
    if out.dim() != 1 or out.numel() != plan.entries.numel():
        raise ValueError(f"out must be ({plan.entries.numel()},), got {tuple(out.shape)}")
    if x.stride(1) != 1 or y.stride(1) != 1 or (out.numel() > 1 and out.stride(0) != 1):
        raise ValueError("x, y need unit stride along K and out along nnz")
    constants = config(k, num_warps, block_nnz, (plan.block_rows, plan.block_cols))
    if plan.pieces == 0:
        return out
    compiled = _sddmm_staged_kernel[(plan.pieces,)](
        plan.starts, plan.first_rows, plan.first_cols, plan.entries, plan.cells, x, y, out,
        x.shape[0], y.shape[0], x.stride(0), y.stride(0), num_warps=num_warps, **constants,
    )  # fmt: skip
    check_buffer_alone(compiled, shared_bytes(constants), "sddmm_staged")
    return out
