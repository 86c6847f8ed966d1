"""The scatter kernel's walk over a program's column steps (spmm_csr_scatter.py): the
scatter of a step's entries into the shared tile, the product, and the two walks, one step
ahead or two in pairs. Split from the kernel's file to keep each file to one idea."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from ._gluon_bits import cta_barrier as _cta_barrier


@gluon.jit
def store_entry(entry):
    """Entry (int32: place in the tile's bytes above the value's 16 bits) stored into the
    tile at the dynamic shared window's offset 0 unless its place is 0xFFFF (padding). The
    store is its effect (not pure: kept though its zeros go unused)."""
    return gl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b16 v, at; .reg .u32 a; mov.b32 {v, at}, $1; "
        "setp.ne.u16 p, at, 0xFFFF; cvt.u32.u16 a, at; mov.u32 $0, global_smem; "
        "add.u32 a, a, $0; @p st.shared.b16 [a], v; mov.u32 $0, 0; }",
        "=r,r",
        [entry],
        dtype=gl.int32,
        is_pure=False,
        pack=1,
    )


@gluon.jit
def store_entry_at(entry):
    """store_entry, giving the shared address it stored at (-1 where skipped): the places a
    step's zeros go back to (one_ahead's UNSCATTER)."""
    return gl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b16 v, at; .reg .u32 a; mov.b32 {v, at}, $1; "
        "setp.ne.u16 p, at, 0xFFFF; cvt.u32.u16 a, at; mov.u32 $0, global_smem; "
        "add.u32 a, a, $0; @p st.shared.b16 [a], v; selp.b32 $0, a, -1, p; }",
        "=r,r",
        [entry],
        dtype=gl.int32,
        is_pure=False,
        pack=1,
    )


@gluon.jit
def zero_at(address):
    """A 16-bit zero stored at each shared address that is not -1 (store_entry_at's)."""
    return gl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b16 z; setp.ne.s32 p, $1, -1; mov.b16 z, 0; "
        "@p st.shared.b16 [$1], z; mov.u32 $0, 0; }",
        "=r,r",
        [address],
        dtype=gl.int32,
        is_pure=False,
        pack=1,
    )


@gluon.jit
def scatter_run(run, start, stop, entries, lane, CHUNK: gl.constexpr):
    """Store a step's run [start, stop) into the tile: `run` holds its first chunk (entries
    past stop, the next tile's where loaded to the range's end, are cut), a longer run's
    rest is loaded here."""
    store_entry(gl.where(start + lane < stop, run, -1))
    scatter_rest(start, stop, entries, lane, CHUNK)


@gluon.jit
def scatter_rest(start, stop, entries, lane, CHUNK: gl.constexpr, ZERO: gl.constexpr = False):
    """A run's entries past its first chunk, loaded and stored (ZERO: zeros at their places,
    the values' bits cleared; padding's place stays 0xFFFF, skipped)."""
    keep: gl.constexpr = -65536 if ZERO else -1  # (0xFFFF0000: the place alone)
    for e0 in range(start + CHUNK, stop, CHUNK):
        at = e0 + lane
        store_entry(gl.load(entries + at, mask=at < stop, other=-1) & keep)


@gluon.jit
def product(tile, b_tile, acc, a_layout: gl.constexpr, b_layout: gl.constexpr):
    """acc + the step's tiles' product, once every warp has stored its part of them; the
    tiles may be written again after."""
    _cta_barrier()
    a = tile.load(a_layout)
    b_op = b_tile.permute((1, 0)).load(b_layout)
    acc = mma_v2(a, b_op, acc)
    _cta_barrier()  # every warp has read the tiles before the next step writes them
    return acc


@gluon.jit
def one_ahead(tile, b_tile, zeros, acc, tiles, entries, b, b_offs, mask_bn, offs_bk, lane, first,
              end, K, K_TILES, stride_bk, BK: gl.constexpr, CHUNK: gl.constexpr,
              a_layout: gl.constexpr, b_layout: gl.constexpr,
              UNSCATTER: gl.constexpr = False):  # fmt: skip
    """The steps [first, end), each step's run and B's tile loaded during the step before.
    Bounds of step kt: [start, stop); `after` ends step kt + 1's run. UNSCATTER zeros the
    tile once, then after each step's product only the places its run wrote (its first
    chunk's addresses kept in registers, a longer run's rest reloaded): at 90% a 64 x 64
    step's zeros take 64 shared wavefronts, its run's places ~20 (results/cpu/
    2026-12-06-csr-scatter-analysis, variant 4)."""
    start = gl.multiple_of(gl.load(tiles + first), 4)
    stop = gl.multiple_of(gl.load(tiles + gl.minimum(first + 1, K_TILES)), 4)
    after = gl.multiple_of(gl.load(tiles + gl.minimum(first + 2, K_TILES)), 4)
    run = gl.load(entries + start + lane, mask=start + lane < stop, other=-1)  # -1: skipped
    b_step = b + first.to(gl.int64) * BK * stride_bk
    bt = gl.load(b_step + b_offs, mask=mask_bn & gl.expand_dims(offs_bk < K - first * BK, 0),
                 other=0.0)  # fmt: skip
    if UNSCATTER:
        tile.store(zeros)  # (ordered before the first scatter by the loop's first barrier)
    for kt in range(first, end):
        if not UNSCATTER:
            tile.store(zeros)
        b_tile.store(bt)
        _cta_barrier()
        if UNSCATTER:  # (the first chunk's addresses kept: two instructions a zero)
            placed = store_entry_at(gl.where(start + lane < stop, run, -1))
            scatter_rest(start, stop, entries, lane, CHUNK)
            placed_start = start
            placed_stop = stop
        else:
            scatter_run(run, start, stop, entries, lane, CHUNK)
        more = kt + 1 < end
        run = gl.load(entries + stop + lane, mask=(stop + lane < after) & more, other=-1)
        b_step += BK * stride_bk
        rows_left = gl.where(more, K - (kt + 1) * BK, 0)
        bt = gl.load(b_step + b_offs, mask=mask_bn & gl.expand_dims(offs_bk < rows_left, 0),
                     other=0.0)  # fmt: skip
        start = stop
        stop = after
        after = gl.multiple_of(gl.load(tiles + gl.minimum(kt + 3, K_TILES)), 4)
        acc = product(tile, b_tile, acc, a_layout, b_layout)
        if UNSCATTER:  # noqa: SIM102 (a compile-time branch around a run-time one)
            if more:  # after the product's last barrier: every warp has read the tile; the
                # next step's barrier orders these zeros before its scatter (after the last
                # step none: the epilogue's scratch reuses the buffer, and the compiler's
                # barriers do not see these stores)
                zero_at(placed)
                scatter_rest(placed_start, placed_stop, entries, lane, CHUNK, True)
    return acc


@gluon.jit
def step_then_load(
    tile,
    b_tile,
    zeros,
    acc,
    run,
    bt,
    start,
    stop,
    entries,
    lane,
    next_start,
    last,
    b,
    kt_next,
    end,
    K,
    stride_bk,
    b_offs,
    mask_bn,
    offs_bk,
    BK: gl.constexpr,
    CHUNK: gl.constexpr,
    a_layout: gl.constexpr,
    b_layout: gl.constexpr,
):
    """One step of the two-ahead walk: its tiles stored, then step kt_next's run (from
    next_start to the range's end) and B's tile loaded into the registers just freed, then
    the product."""
    tile.store(zeros)
    b_tile.store(bt)
    _cta_barrier()
    scatter_run(run, start, stop, entries, lane, CHUNK)
    more = kt_next < end
    run = gl.load(entries + next_start + lane, mask=(next_start + lane < last) & more, other=-1)
    rows_left = gl.where(more, K - kt_next * BK, 0)
    bt = gl.load(b + kt_next.to(gl.int64) * BK * stride_bk + b_offs,
                 mask=mask_bn & gl.expand_dims(offs_bk < rows_left, 0), other=0.0)  # fmt: skip
    acc = product(tile, b_tile, acc, a_layout, b_layout)
    return acc, run, bt


@gluon.jit
def two_ahead(tile, b_tile, zeros, acc, tiles, entries, b, b_offs, mask_bn, offs_bk, lane, first,
              end, K, K_TILES, stride_bk, BK: gl.constexpr, CHUNK: gl.constexpr,
              a_layout: gl.constexpr, b_layout: gl.constexpr):  # fmt: skip
    """The steps [first, end) in pairs, each step's run and B's tile loaded two steps ahead
    into the registers its step of the pair before freed (run_a / bt_a even steps, run_b /
    bt_b odd). Nothing loaded rotates through the loop's carried values: a rotation (the
    former two-ahead walk, and offsets carried ahead) makes the compiler copy a register
    at each step, and a copy waits for its load (that walk was one step ahead again). So
    the offsets of steps kt..kt + 3 are loaded again in each pair, from L1 (a program's
    offsets are a line or two), runs are loaded to the range's end (`last`) and cut when
    scattered, and no load waits on the pair before's. An odd range's last pair has an
    empty second step (stop = start, its loads masked)."""
    last = gl.multiple_of(gl.load(tiles + end), 4)
    o0 = gl.multiple_of(gl.load(tiles + first), 4)
    o1 = gl.multiple_of(gl.load(tiles + gl.minimum(first + 1, K_TILES)), 4)
    run_a = gl.load(entries + o0 + lane, mask=o0 + lane < last, other=-1)
    run_b = gl.load(entries + o1 + lane, mask=(o1 + lane < last) & (first + 1 < end), other=-1)
    bt_a = gl.load(
        b + first.to(gl.int64) * BK * stride_bk + b_offs,
        mask=mask_bn & gl.expand_dims(offs_bk < K - first * BK, 0),
        other=0.0,
    )
    rows_b = gl.where(first + 1 < end, K - (first + 1) * BK, 0)
    bt_b = gl.load(
        b + (first + 1).to(gl.int64) * BK * stride_bk + b_offs,
        mask=mask_bn & gl.expand_dims(offs_bk < rows_b, 0),
        other=0.0,
    )
    for kt in range(first, end, 2):
        o0 = gl.multiple_of(gl.load(tiles + kt), 4)
        o1 = gl.multiple_of(gl.load(tiles + gl.minimum(kt + 1, K_TILES)), 4)
        o2 = gl.multiple_of(gl.load(tiles + gl.minimum(kt + 2, K_TILES)), 4)
        o3 = gl.multiple_of(gl.load(tiles + gl.minimum(kt + 3, K_TILES)), 4)
        acc, run_a, bt_a = step_then_load(
            tile, b_tile, zeros, acc, run_a, bt_a, o0, o1, entries, lane, o2, last, b, kt + 2,
            end, K, stride_bk, b_offs, mask_bn, offs_bk, BK, CHUNK, a_layout, b_layout,
        )  # fmt: skip
        stop_b = gl.where(kt + 1 < end, o2, o1)  # past the range: an empty step
        acc, run_b, bt_b = step_then_load(
            tile, b_tile, zeros, acc, run_b, bt_b, o1, stop_b, entries, lane, o3, last, b,
            kt + 3, end, K, stride_bk, b_offs, mask_bn, offs_bk, BK, CHUNK, a_layout, b_layout,
        )  # fmt: skip
    return acc
