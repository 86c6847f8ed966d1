"""Densify a CSR weight through shared memory: the dense backend's densify at the speed of a
memset (Gluon, CUDA only; kernels/densify.py is the fallback and the CPU path).

The Triton densify (densify.py) stores a row's zeros, then each stored value at its column
straight to global memory: a 2-byte store a stored entry, each a partial write of a 32-byte
sector in L2. On the H200 that ran at 41-64% of a memset's rate on CSR weights (74 us for
14336 x 4096 at 70%, the memset 36; results/nvidia-h200/2026-11-29-d/densify_sweep.txt), and
at 65-2048 tokens the dense backend pays it every call. Here a program owns ROWS whole rows:
it zeroes them in its shared memory, scatters their entries there (a PTX `st.shared` an
entry at its byte place: Gluon has no shared-memory scatter, as spmm_csr_scatter.py), then
copies the rows out with 16-byte stores, so global memory sees each dense byte once, written
whole. Values are moved as their bits (int16 or int32), so the copy is exact.

The place is an offset from the dynamic shared window's start (`global_smem`), so the rows
must be the kernel's only shared memory: the launcher checks the compiled kernel's shared
bytes and refuses it otherwise (as the scatter kernel does).
"""

from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ._gluon_bits import check_buffer_alone, cta_barrier
from ._sizes import cdiv


@gluon.jit
def _store_at(place, bits, ELEM: gl.constexpr):
    """bits (an int32 holding the value's ELEM bytes, low first) stored at byte `place` of the
    dynamic shared window, unless place is -1. The store is its effect (not pure)."""
    if ELEM == 2:
        return gl.inline_asm_elementwise(
            "{ .reg .pred p; .reg .b16 v, hi; .reg .u32 a; setp.ne.s32 p, $1, -1; "
            "mov.b32 {v, hi}, $2; mov.u32 a, global_smem; add.u32 a, a, $1; "
            "@p st.shared.b16 [a], v; mov.u32 $0, 0; }",
            "=r,r,r", [place, bits], dtype=gl.int32, is_pure=False, pack=1,
        )  # fmt: skip
    else:
        return gl.inline_asm_elementwise(
            "{ .reg .pred p; .reg .u32 a; setp.ne.s32 p, $1, -1; mov.u32 a, global_smem; "
            "add.u32 a, a, $1; @p st.shared.b32 [a], $2; mov.u32 $0, 0; }",
            "=r,r,r", [place, bits], dtype=gl.int32, is_pure=False, pack=1,
        )  # fmt: skip


@gluon.jit
def _densify_csr_shared_kernel(
    row_offsets,  # (M + 1,) int32/int64
    column_indices,  # (nnz,) int16/int32/int64, distinct within a row (any order)
    values,  # (nnz,) or (batch, nnz) as int16/int32 bits: stride_vb between matrices
    out,  # (batch, M, K) as the values' bits: strides stride_ob, stride_om, 1
    M,
    K,
    stride_vb,
    stride_ob,
    stride_om,
    ROWS: gl.constexpr,  # rows a program
    ROW_SPAN: gl.constexpr,  # a row's elements in shared memory (>= K, a power of two)
    PIECE: gl.constexpr,  # elements a zeroing or copying step (<= ROW_SPAN)
    BLOCK_NNZ: gl.constexpr,  # a row's entries a scatter step
    ELEM: gl.constexpr,  # bytes a value: 2 or 4
    BITS: gl.constexpr,  # gl.int16 or gl.int32
    FLAT: gl.constexpr,  # PIECE elements, 16 bytes a thread
    ENTRIES: gl.constexpr,  # (ROWS, BLOCK_NNZ) entries, the warps along the entries
    EVERY: gl.constexpr,  # (ROWS,) every row in each thread
    SHARED: gl.constexpr,  # the rows, plain
):
    # the rows one after another, ROW_SPAN elements each, as pieces (dynamic indices)
    SPAN_PIECES: gl.constexpr = ROW_SPAN // PIECE
    rows_shared = gl.allocate_shared_memory(BITS, [ROWS * SPAN_PIECES, PIECE], SHARED)
    first_row = gl.program_id(0) * ROWS
    batch = gl.program_id(1).to(gl.int64)
    pieces = (K + PIECE - 1) // PIECE
    zeros = gl.zeros([PIECE], BITS, FLAT)
    for r in range(ROWS):  # a row's columns up to K (the span's tail is never read)
        for p in range(pieces):
            rows_shared.index(r * SPAN_PIECES + p).store(zeros)
    cta_barrier()  # every zero is stored before any entry lands on it
    offs_r = first_row + gl.arange(0, ROWS, layout=gl.SliceLayout(1, ENTRIES))
    mask_r = offs_r < M
    start = gl.load(row_offsets + offs_r, mask=mask_r, other=0).to(gl.int64)
    end = gl.load(row_offsets + offs_r + 1, mask=mask_r, other=0).to(gl.int64)
    row_place = gl.expand_dims(gl.arange(0, ROWS, layout=gl.SliceLayout(1, ENTRIES)) * ROW_SPAN, 1)
    lane = gl.expand_dims(gl.arange(0, BLOCK_NNZ, layout=gl.SliceLayout(0, ENTRIES)), 0)
    values += batch * stride_vb
    # the longest row from every row's offsets in each thread: a maximum within a thread (one
    # across warps would take shared scratch beside the rows)
    every = first_row + gl.arange(0, ROWS, layout=EVERY)
    mask_every = every < M
    lengths = gl.load(row_offsets + every + 1, mask=mask_every, other=0).to(gl.int64) - gl.load(
        row_offsets + every, mask=mask_every, other=0).to(gl.int64)  # fmt: skip
    longest = gl.max(lengths, axis=0)
    for e0 in range(0, longest, BLOCK_NNZ):
        at = gl.expand_dims(start, 1) + e0 + lane
        mask = at < gl.expand_dims(end, 1)
        cols = gl.load(column_indices + at, mask=mask, other=0).to(gl.int32)
        bits = gl.load(values + at, mask=mask, other=0).to(gl.int32)
        _store_at(gl.where(mask, (row_place + cols) * ELEM, -1), bits, ELEM)
    cta_barrier()  # every entry is stored before the rows are read
    within = gl.arange(0, PIECE, layout=FLAT)
    out += batch * stride_ob
    for r in range(ROWS):
        row = first_row + r
        dest = out + row.to(gl.int64) * stride_om
        for p in range(pieces):
            piece = rows_shared.index(r * SPAN_PIECES + p).load(FLAT)
            cols = p * PIECE + within
            gl.store(dest + cols, piece, mask=(cols < K) & (row < M))


@functools.cache  # built once: callers spread it (**), never change it
def layouts(elem: int, warps: int, rows: int, block_nnz: int) -> dict:
    """FLAT 16 bytes a thread; ENTRIES a (rows, block_nnz) step, the warps along its entries
    (block_nnz / warps each, up to 32 lanes along them, the rest over rows), up to 4
    consecutive entries a thread; EVERY every row in each thread; SHARED the rows unswizzled
    (a 16-byte access a thread: no bank twice)."""
    per_warp = max(1, block_nnz // warps)
    lanes = min(32, per_warp)
    return {
        "FLAT": gl.BlockedLayout([16 // elem], [32], [warps], [0]),
        "ENTRIES": gl.BlockedLayout(
            [1, max(1, min(4, per_warp // lanes))], [32 // lanes, lanes], [1, warps], [1, 0]
        ),
        "EVERY": gl.BlockedLayout([rows], [32], [warps], [0]),
        "SHARED": gl.SwizzledSharedLayout(1, 1, 1, [0]),
    }


def shared_bytes(rows: int, row_span: int, elem: int) -> int:
    """The kernel's one shared buffer: its rows."""
    return rows * row_span * elem


SHARED_LIMIT = 227 * 1024  # a program's most shared memory on sm_90


def densify_csr_shared(
    *,
    row_offsets: torch.Tensor,
    column_indices: torch.Tensor,
    values: torch.Tensor,
    out: torch.Tensor,
    rows_per_program: int,
    row_span: int,
    block_nnz: int,
    num_warps: int,
) -> torch.Tensor:
    """Write out (batch, M, K) (rows contiguous, every element) from CSR on CUDA; values (nnz,)
    or (batch, nnz) with unit stride along nnz, 2 or 4 bytes an element (out's dtype).
    row_span: a power of two >= K (a row's room in shared memory); rows_per_program x
    row_span x the element's bytes is the program's shared memory."""
    batch, rows, cols = out.shape
    elem = values.element_size()
    if elem not in (2, 4) or out.dtype != values.dtype:
        raise TypeError(f"values and out must share a 2- or 4-byte dtype, got {values.dtype}, "
                        f"{out.dtype}")  # fmt: skip
    if row_span < cols or row_span & (row_span - 1):
        raise ValueError(f"row_span must be a power of two >= K ({cols}), got {row_span}")
    if shared_bytes(rows_per_program, row_span, elem) > SHARED_LIMIT:
        raise ValueError(
            f"rows_per_program x row_span x {elem} bytes must fit the SM's {SHARED_LIMIT} bytes "
            f"of shared memory, got {rows_per_program} x {row_span}"
        )
    if rows_per_program & (rows_per_program - 1) or rows_per_program < 1:
        raise ValueError(f"rows_per_program must be a power of two, got {rows_per_program}")
    if rows == 0 or cols == 0 or batch == 0:
        return out
    if values.shape[-1] == 0:  # no stored entries to point at
        return out.zero_()
    assert out.stride(2) == 1 and values.stride(-1) == 1
    bits = torch.int16 if elem == 2 else torch.int32
    piece = min(row_span, 16 // elem * 32 * num_warps)
    compiled = _densify_csr_shared_kernel[(cdiv(rows, rows_per_program), batch)](
        row_offsets, column_indices, values.view(bits), out.view(bits), rows, cols,
        values.stride(0) if values.dim() == 2 else 0, out.stride(0), out.stride(1),
        ROWS=rows_per_program, ROW_SPAN=row_span, PIECE=piece, BLOCK_NNZ=block_nnz, ELEM=elem,
        BITS=gl.int16 if elem == 2 else gl.int32, num_warps=num_warps,
        **layouts(elem, num_warps, rows_per_program, block_nnz),
    )  # fmt: skip
    check_buffer_alone(compiled, shared_bytes(rows_per_program, row_span, elem),
                       "densify_csr_shared")  # fmt: skip
    return out
