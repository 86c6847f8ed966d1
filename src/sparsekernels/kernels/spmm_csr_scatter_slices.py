"""CSR @ B on the tensor cores by scattering into shared memory, as spmm_csr_scatter.py, with
each warp owning one 16-column slice of every 64-column step ("warp-private K slices"): an
experiment, not routed.

spmm_csr_scatter.py is held by the L1/shared pipe and by four CTA barriers a step (the analysis
in benchmarks/results/cpu/2026-12-06-csr-scatter-analysis, "variant 1"): every warp reads the
whole (BLOCK_N, 64) B tile by ldmatrix (64 of ~338 wavefronts a 64 x 64 step at 70%), and every
step waits for the slowest warp's scatter. Here warp w takes all 64 rows x columns
[16 w, 16 w + 16) of each step: it zeroes, scatters into and ldmatrix-reads only its own 2 KB
(64, 16) slab of the weight and its own (BLOCK_N, 16) slab of B, so B is read once a step, and
no warp waits for another inside the loop: warp-level syncs (`bar.warp.sync`) order a warp's
own stores and reads. Each warp keeps a (64, BLOCK_N) float32 partial over its slices; after
the loop the four are summed once through shared memory, then the epilogue and split-K as the
other tensor-core kernels (split_k.end_piece).

Triton's barrier pass (membar) puts a CTA barrier between a write of shared memory it sees and a
later read of the same allocation, so every write in the loop is PTX (`inline_asm_elementwise`:
the zeros and B's slab by st.shared.v4, the entries by st.shared.b16) and only the ldmatrix
reads are Gluon's: membar sees reads alone and inserts nothing in the loop. The PTX stores
address the dynamic shared window (`global_smem`) from its start, so the kernel's one buffer
must be all of its shared memory (checked after the launch, as spmm_csr_scatter.py does): slabs
0-3 the weight's, slabs 4-7 B's (rows 0..BLOCK_N of each), and after the loop the four float32
partials over the same bytes.

The weight comes as `tiled_entries_slices`: each (64, 64) tile's entries in four sub-runs, one
a slice, each an int32 (its byte place in its warp's slab above its value's 16 bits). A tile's
four sub-runs are padded (-1: place 0xFFFF, not stored) to one length, the longest of them
rounded up to 4 (a 16-byte load a thread takes 4): a warp finds its sub-run from the tile's
first offset and that length alone (one offset loaded a step, no per-warp bounds), and a run
longer than a warp's chunk is walked in the same number of chunks by every warp. Within a
sub-run the entries are dealt over the banks as spmm_csr_scatter.py's "spread" order
(`csr_scatter_banks.spread_bank_order`: a warp's store writes places 128 b + 4 lane + j of its
sub-run, as there).

A slab's rows are 32 bytes: ldmatrix reads 8 rows at one 16-byte chunk, and rows r and r + 4
share banks, so chunk j of row r lies at chunk j ^ ((r >> 2) & 1) (Triton's
SwizzledSharedLayout(8, 4, 2)): the eight rows fill the 32 banks once. B's slab rows (a token's
16 values of k) are swizzled the same way.
"""

from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from . import split_k
from ._activation import ACTIVATION_CODES
from ._gluon_bits import REINTERPRET_PUBLIC, check_buffer_alone
from ._sizes import cdiv
from .csr_scatter_banks import BANK_ORDERS, placed_runs
from .spmm_csr_scatter import b_step_fits

BLOCK_M = 64  # rows a program: a warp's mma covers all of them (4 m16 tiles)
BLOCK_K = 64  # columns a step
SLICE = 16  # columns a warp owns of each step: one k16 mma
WARPS = BLOCK_K // SLICE
SLAB_BYTES = BLOCK_M * SLICE * 2  # one warp's (64, 16) slab of the weight
BLOCK_NS = (8, 16, 32)  # 64 would hold a 64 x 64 float32 partial a warp: 128 registers


@gluon.jit
def _window(offset):
    """The shared address `offset` bytes into the dynamic shared window (the buffer's start)."""
    return gl.inline_asm_elementwise(
        "mov.u32 $0, global_smem; add.u32 $0, $0, $1;", "=r,r", [offset], dtype=gl.int32,
        is_pure=True, pack=1,
    )  # fmt: skip


@gluon.jit
def _warp_sync():
    """bar.warp.sync: the warp's shared stores and reads before it are done and visible to the
    warp's lanes after it (no other warp touches the warp's slabs, so nothing CTA-wide)."""
    gl.inline_asm_elementwise(
        "bar.warp.sync -1; // dummy $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1
    )


@gluon.jit
def _zero_slab(at):
    """A lane's four 16-byte pieces of its warp's slab (at, +512, +1024, +1536) set to zero."""
    gl.inline_asm_elementwise(
        "{ .reg .b32 z; mov.b32 z, 0; st.shared.v4.b32 [$1], {z, z, z, z}; "
        "st.shared.v4.b32 [$1+512], {z, z, z, z}; st.shared.v4.b32 [$1+1024], {z, z, z, z}; "
        "st.shared.v4.b32 [$1+1536], {z, z, z, z}; mov.u32 $0, 0; }",
        "=r,r", [at], dtype=gl.int32, is_pure=False, pack=1,
    )  # fmt: skip


@gluon.jit
def _store_b(at, bt):
    """A lane's 8 values of B (16 bytes, k-contiguous) stored at `at` (the shared address of
    its 8 elements, the same for all 8: only the first operand is read). pack=8 hands one
    asm the lane's 8 values as 4 registers ($12-$15) after the 8 addresses ($4-$11)."""
    gl.inline_asm_elementwise(
        "st.shared.v4.b32 [$4], {$12, $13, $14, $15}; mov.b32 $0, 0; mov.b32 $1, 0; "
        "mov.b32 $2, 0; mov.b32 $3, 0;",
        "=r,=r,=r,=r,r,r,r,r,r,r,r,r,r,r,r,r", [at, bt.to(gl.int16, bitcast=True)],
        dtype=gl.int16, is_pure=False, pack=8,
    )  # fmt: skip


@gluon.jit
def _store_entry(entry, slab):
    """Entry (int32: its byte place in the warp's slab above its value's 16 bits) stored into
    the slab at shared address `slab` unless its place is 0xFFFF (padding)."""
    gl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b16 v, at; .reg .u32 a; mov.b32 {v, at}, $1; "
        "setp.ne.u16 p, at, 0xFFFF; cvt.u32.u16 a, at; add.u32 a, a, $2; "
        "@p st.shared.b16 [a], v; mov.u32 $0, 0; }",
        "=r,r,r", [entry, slab], dtype=gl.int32, is_pure=False, pack=1,
    )  # fmt: skip


@gluon.jit
def _b_slab(b, kt, b_offs, mask_bn, offs_k, K, more, stride_bk, BK: gl.constexpr):
    """Step kt's rows of B as the warps' (BLOCK_N, 16) slabs (zeros past K, or all zeros where
    `more` is false: a step past the range)."""
    rows_left = gl.where(more, K - kt * BK, 0)
    return gl.load(b + kt.to(gl.int64) * BK * stride_bk + b_offs,
                   mask=mask_bn & (offs_k < rows_left), other=0.0)  # fmt: skip


@gluon.jit
def _csr_scatter_slices_kernel(
    slab_offsets,  # (cdiv(M, 64) * K_TILES * 4 + 1,) int32: tiled_entries_slices()
    entries,  # (padded nnz,) int32: tiled_entries_slices()
    b,  # (K, N): strides stride_bk, stride_bn
    bias,
    out,  # (M, N)
    partials,  # with SPLITS > 1 the (SPLITS, M, N) float32 workspace
    counters,  # with FUSED an int32 a tile, zero (split_k.tile_counters)
    M,
    N,
    K,
    K_TILES,
    TILES_PER_SPLIT,  # program_id(2) takes its range of column steps
    SPLIT_STRIDE,  # M * N
    stride_bk,
    stride_bn,
    stride_om,
    stride_on,
    HAS_BIAS: gl.constexpr,
    ACTIVATION: gl.constexpr,
    SPLITS: gl.constexpr,
    FUSED: gl.constexpr,
    BLOCK_N: gl.constexpr,
    CHUNK: gl.constexpr,  # entries a warp loads at once: 4, 8 or 16 a lane
    BUFFER_SLABS: gl.constexpr,  # buffer_slabs(BLOCK_N)
    DTYPE: gl.constexpr,  # the values' type
    RUN: gl.constexpr,  # layouts()
    ZERO: gl.constexpr,
    B_LOAD: gl.constexpr,
    MMA: gl.constexpr,
    SLABS: gl.constexpr,
    SUMS: gl.constexpr,
    SUM_LOAD: gl.constexpr,
):
    BM: gl.constexpr = 64
    BK: gl.constexpr = 64
    # the kernel's only shared memory: slab w (2 KB) warp w's of the weight, slab 4 + w warp
    # w's of B (its first BLOCK_N rows: a token's 16 values of k a row)
    buffer = gl.allocate_shared_memory(DTYPE, [BUFFER_SLABS, BM, 16], SLABS)
    a_slabs = buffer.slice(0, 4)
    b_slabs = buffer.slice(4, 4).slice(0, BLOCK_N, dim=1)
    a_layout: gl.constexpr = gl.DotOperandLayout(0, MMA, 2)
    b_layout: gl.constexpr = gl.DotOperandLayout(1, MMA, 2)

    # each layout puts slab w in warp w (warps_per_cta [4, ...])
    warp = gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(1, RUN)), 1)
    lane = gl.expand_dims(gl.arange(0, CHUNK, layout=gl.SliceLayout(0, RUN)), 0)
    slab = _window(warp * 2048)  # the scatter's base: places are slab-local
    zero_w = gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(1, ZERO)), 1)
    zero_lane = gl.expand_dims(gl.arange(0, 32, layout=gl.SliceLayout(0, ZERO)), 0)
    zero_at = _window(zero_w * 2048 + zero_lane * 16)

    # B's slabs: (4, BLOCK_N, 16), a lane's 8 values of k one 16-byte load where B^T is
    # row-major (linear's x); int32 offsets from the step's first row (b_step_fits)
    offs_w = gl.arange(0, 4, layout=gl.SliceLayout(1, gl.SliceLayout(2, B_LOAD)))
    offs_w = gl.expand_dims(gl.expand_dims(offs_w, 1), 2)
    offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, gl.SliceLayout(2, B_LOAD)))
    offs_n = gl.expand_dims(gl.expand_dims(offs_n, 0), 2)
    offs_kk = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(1, B_LOAD)))
    offs_kk = gl.expand_dims(gl.expand_dims(offs_kk, 0), 1)
    offs_k = offs_w * 16 + offs_kk  # (4, 1, 16): the column in the step
    token = gl.program_id(1) * BLOCK_N + offs_n
    b_offs = token * stride_bn + offs_k * stride_bk
    mask_bn = token < N
    # a lane's 8 values: row n, 16-byte chunk kk // 8 swizzled as the weight's slab
    chunk = (offs_kk // 8) ^ ((offs_n // 4) % 2)
    b_at = _window((offs_w + 4) * 2048 + offs_n * 32 + chunk * 16)

    acc = gl.zeros([4, BM, BLOCK_N], gl.float32, MMA)
    first = gl.program_id(2) * TILES_PER_SPLIT
    end = gl.minimum(first + TILES_PER_SPLIT, K_TILES)
    tiles = slab_offsets + gl.program_id(0) * K_TILES * 4
    # a step's sub-runs: [start + w length, start + (w + 1) length), length = (stop - start) / 4
    start = gl.multiple_of(gl.load(tiles + first * 4), 4)
    stop = gl.multiple_of(gl.load(tiles + gl.minimum(first + 1, K_TILES) * 4), 4)
    after = gl.multiple_of(gl.load(tiles + gl.minimum(first + 2, K_TILES) * 4), 4)
    length = gl.multiple_of((stop - start) >> 2, 4)
    sub_run = start + warp * length
    run = gl.load(entries + sub_run + lane, mask=lane < length, other=-1)  # -1: skipped
    bt = _b_slab(b, first, b_offs, mask_bn, offs_k, K, first < end, stride_bk, BK)
    for kt in range(first, end):
        _zero_slab(zero_at)
        _store_b(b_at, bt)
        _warp_sync()  # the zeros before the entries over them
        _store_entry(run, slab)
        for e0 in range(CHUNK, length, CHUNK):  # a run longer than a chunk: the rest
            at = e0 + lane
            _store_entry(gl.load(entries + sub_run + at, mask=at < length, other=-1), slab)
        # the next step's run and B's slabs while this step's stores drain
        more = kt + 1 < end
        length = gl.multiple_of(gl.where(more, (after - stop) >> 2, 0), 4)
        sub_run = stop + warp * length
        run = gl.load(entries + sub_run + lane, mask=lane < length, other=-1)
        bt = _b_slab(b, kt + 1, b_offs, mask_bn, offs_k, K, more, stride_bk, BK)
        stop = after
        after = gl.multiple_of(gl.load(tiles + gl.minimum(kt + 3, K_TILES) * 4), 4)
        _warp_sync()  # the slabs written before the warp's ldmatrix
        a = a_slabs.load(a_layout)
        b_op = b_slabs.permute((0, 2, 1)).load(b_layout)
        _warp_sync()  # read before the next step's zeros
        acc = mma_v2(a, b_op, acc)

    # the four warps' partials summed through the buffer (membar puts the CTA barriers around
    # the store: every warp's last reads before it, the store before the loads)
    if REINTERPRET_PUBLIC:
        sums = buffer.reinterpret(gl.float32, [4, BM, BLOCK_N], SUMS)
    else:
        sums = buffer._reinterpret(gl.float32, [4, BM, BLOCK_N], SUMS)
    sums.store(acc)
    total = gl.sum(sums.load(SUM_LOAD), axis=0)  # a lane's four partials: no shuffle
    out_layout: gl.constexpr = gl.SliceLayout(0, SUM_LOAD)
    offs_m = gl.program_id(0) * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, out_layout))
    offs_n = gl.program_id(1) * BLOCK_N + gl.arange(
        0, BLOCK_N, layout=gl.SliceLayout(0, out_layout)
    )
    split_k.end_piece(
        total, offs_m, offs_n, offs_m < M, offs_n < N, bias, out, partials, counters, N,
        SPLIT_STRIDE, stride_om, stride_on, HAS_BIAS, ACTIVATION, gl.float32, SPLITS, FUSED,
    )  # fmt: skip


@functools.cache  # built once: callers spread it (**), never change it
def layouts(block_n: int) -> dict:
    """The kernel's layouts, every one with warp w on slab w: RUN a warp's chunk of its
    sub-run (4 consecutive entries a lane), ZERO a lane a warp, B_LOAD B's slabs (8 values of k
    a lane), MMA a warp's (64, block_n) partial (rank 3: the warp is the batch), SLABS the
    swizzled slabs, SUMS and SUM_LOAD the partials' sum (rows along the lanes: a lane reads
    its four partials and adds them itself)."""
    return {
        "RUN": gl.BlockedLayout([1, 4], [1, 32], [4, 1], [1, 0]),
        "ZERO": gl.BlockedLayout([1, 1], [1, 32], [4, 1], [1, 0]),
        "B_LOAD": gl.BlockedLayout([1, 1, 8], [1, 16, 2], [4, 1, 1], [2, 1, 0]),
        "MMA": gl.NVMMADistributedLayout(
            version=[2, 0], warps_per_cta=[4, 1, 1], instr_shape=[1, 16, 8]
        ),  # fmt: skip
        "SLABS": gl.SwizzledSharedLayout(8, 4, 2, [2, 1, 0]),
        # the partials' rows swizzled in 8-word chunks by (n >> 1) & 3: an accumulator
        # register's four n-lanes were 64 words apart, one bank (a helper's count: ~640
        # wavefronts a CTA, ~10%; results/cpu/2026-12-06-csr-slices-analysis; untimed)
        "SUMS": gl.SwizzledSharedLayout(8, 2, 4, [1, 2, 0]),
        "SUM_LOAD": gl.BlockedLayout([4, 1, block_n // 2], [1, 32, 1], [1, 2, 2], [1, 2, 0]),
    }


def buffer_slabs(block_n: int) -> int:
    """(64, 16) slabs in the kernel's buffer: 4 of the weight and 4 of B, or the four float32
    (64, block_n) partials where they need more."""
    return max(8, 4 * BLOCK_M * block_n * 4 // SLAB_BYTES)


def buffer_bytes(block_n: int) -> int:
    """The kernel's one shared buffer."""
    return buffer_slabs(block_n) * SLAB_BYTES


def slab_place(r: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Byte place of element (r, c) (c < 16) in a (64, 16) slab: 32-byte rows, 16-byte chunk
    c // 8 of row r at chunk (c // 8) ^ ((r >> 2) & 1)."""
    return r * 32 + (((c >> 3) ^ ((r >> 2) & 1)) << 4) + ((c & 7) << 1)


def tiled_entries_slices(
    row_offsets: torch.Tensor,
    column_indices: torch.Tensor,
    values: torch.Tensor,
    k: int,
    banks: str = "greedy",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(slab_offsets, entries) of a CSR weight (M, k) of 16-bit values: each (64, 64) tile's
    entries in four sub-runs, one a 16-column slice (c // 16), row tiles outer, column steps
    then slices inner; each entry an int32 whose high 16 bits are its byte place in its slice's
    (64, 16) slab (`slab_place`) and whose low 16 bits are its value's. A tile's four sub-runs
    are padded with -1 (place 0xFFFF: skipped) to one length, the longest rounded up to 4;
    slab_offsets (row tiles * column steps * 4 + 1,) int32 marks them. Within a sub-run the
    entries are placed for the banks as tiled_entries' (kernels/csr_scatter_banks.py: `banks`
    "greedy" or "spread"), or by row and column ("plain")."""
    if values.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"values must be fp16 or bf16, got {values.dtype}")
    if banks not in BANK_ORDERS:  # (before any work)
        raise ValueError(f"banks must be one of {BANK_ORDERS}, got {banks!r}")
    rows = row_offsets.numel() - 1
    row_tiles, k_tiles = cdiv(rows, BLOCK_M), cdiv(k, BLOCK_K)
    tiles, nnz = row_tiles * k_tiles, column_indices.numel()
    if tiles * WARPS >= 2**31:
        raise ValueError(f"the weight must have under 2^29 tiles of 64 x 64, got {(rows, k)}")
    device, i32 = values.device, torch.int32
    entry_rows = torch.repeat_interleave(
        torch.arange(rows, device=device, dtype=i32), row_offsets.diff().long(), output_size=nnz
    )
    cols = column_indices.to(i32)
    slab_of = (entry_rows // BLOCK_M * k_tiles + cols // BLOCK_K) * WARPS + cols % BLOCK_K // SLICE
    place = slab_place(entry_rows % BLOCK_M, cols % SLICE)
    del entry_rows, cols
    # places are under 2048: shifted by 16 they stay positive int32
    packed = (place << 16) | (values.reshape(-1).view(torch.int16).to(i32) & 0xFFFF)
    counts = torch.bincount(slab_of, minlength=tiles * WARPS)
    # a tile's sub-runs one length: the kernel finds warp w's at start + w * length
    longest = (counts.view(tiles, WARPS).amax(1) + 3) // 4 * 4
    offsets = torch.zeros(tiles * WARPS + 1, dtype=torch.long, device=device)
    offsets[1:] = longest.repeat_interleave(WARPS).cumsum(0)
    total = int(offsets[-1])
    if total >= 2**31:
        raise ValueError(f"the weight must hold under 2^31 padded entries, got {total}")
    # (a slab's words: its bank is word % 32, the slabs 2 KB apart)
    entries = placed_runs(slab_of, place, packed, counts, offsets, banks)
    return offsets.to(i32), entries


def spmm_csr_scatter_slices(
    *,
    slab_offsets: torch.Tensor,
    entries: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    activation: str,
    block_n: int = 16,
    split: int = 1,
    fused: bool = True,
    entries_per_thread: int | None = None,
) -> torch.Tensor:
    """Launch over out (M, N) = act(A @ B + bias) for a weight A (M, K) given as
    `tiled_entries_slices` and B (K, N) in any strides, of the values' 16-bit dtype (B's).
    block_n 8, 16 or 32 (a warp's float32 partial is 64 x block_n); `split` > 1 cuts the column
    steps into that many ranges (split_k). `entries_per_thread` (4, 8 or 16) sets how much of
    a warp's sub-run is loaded a step ahead (32 lanes' worth), the rest of a longer one in its
    step; by default what a mean sub-run needs."""
    rows, cols = out.shape
    k = b.shape[0]
    row_tiles, k_tiles = cdiv(rows, BLOCK_M), cdiv(k, BLOCK_K)
    want = row_tiles * k_tiles * WARPS + 1
    if slab_offsets.shape != (want,) or slab_offsets.dtype != torch.int32:
        raise ValueError(
            f"slab_offsets must be tiled_entries_slices()'s for a ({rows}, {k}) weight: "
            f"({want},) int32, got {tuple(slab_offsets.shape)} {slab_offsets.dtype}"
        )
    if entries.dtype != torch.int32 or entries.dim() != 1:
        raise ValueError(
            f"entries must be tiled_entries_slices()'s int32 vector, got {entries.dtype}"
        )
    if block_n not in BLOCK_NS:
        raise ValueError(f"block_n must be one of {BLOCK_NS}, got {block_n}")
    if not b_step_fits(b, block_n, BLOCK_K):
        raise ValueError(f"b's step of {BLOCK_K} rows must span under 2^31 elements, got "
                         f"strides {tuple(b.stride())}")  # fmt: skip
    if entries_per_thread is None:
        mean_sub_run = entries.numel() / max(1, (want - 1))
        loads = cdiv(int(mean_sub_run), 4 * 32)  # 16-byte loads a lane
        entries_per_thread = 4 if loads <= 1 else 8 if loads == 2 else 16
    if entries_per_thread not in (4, 8, 16):
        raise ValueError(f"entries_per_thread must be 4, 8 or 16, got {entries_per_thread}")
    if b.dtype not in (torch.float16, torch.bfloat16) or out.dtype != b.dtype:
        raise TypeError(f"b and out must share a 16-bit dtype, got {b.dtype}, {out.dtype}")
    if rows == 0 or cols == 0:
        return out
    steps_per_split, splits = split_k.ranges(k_tiles, split)
    partials = split_k.workspace(out, splits, torch.float32)
    grid = (row_tiles, cdiv(cols, block_n), splits)
    fused = fused and splits > 1
    counters = split_k.tile_counters(out.device, grid[0] * grid[1]) if fused else slab_offsets
    compiled = _csr_scatter_slices_kernel[grid](
        slab_offsets, entries, b, bias if bias is not None else b, out, partials, counters,
        rows, cols, k, k_tiles, steps_per_split, rows * cols, b.stride(0), b.stride(1),
        out.stride(0), out.stride(1), HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation], SPLITS=splits, FUSED=fused, BLOCK_N=block_n,
        CHUNK=entries_per_thread * 32, BUFFER_SLABS=buffer_slabs(block_n),
        DTYPE=gl.bfloat16 if b.dtype == torch.bfloat16 else gl.float16, num_warps=WARPS,
        **layouts(block_n),
    )  # fmt: skip
    check_buffer_alone(compiled, buffer_bytes(block_n), "spmm_csr_scatter_slices")
    if splits > 1 and not fused:
        split_k.sum_partials(partials, bias, out, activation)
    return out
