"""The layouts of the sparse-tensor-core kernel (spmm_nm_mma_sp.py): the accumulators', whose
registers the inline mma.sp reads four at a time, and each operand's load, a lane's vector
innermost."""

import functools

from triton.experimental.gluon import language as gl

from .nm_mma_sp_operands import SPAN_BLOCKS

WARPS = 4


def layouts(m_tiles: int, blocks: int, n_tiles: int, n: int = 2, m: int = 4) -> dict:
    """The kernel's layouts for 4 warps, each with `m_tiles` m16 tiles, `blocks` k32 blocks a
    step and `n_tiles` n8 tiles, for n:m: LAYOUT the accumulators' (WMT, RH, G, NT, Q, RC) (module
    docstring; registers rc, rh, nt, wmt: a pack of 4 is one instruction's); the loads' own,
    a lane's vector innermost."""

    def blocked(shape_regs, lanes, warp_axis, order):
        warps = [1] * len(shape_regs)
        warps[warp_axis] = WARPS
        return gl.BlockedLayout(shape_regs, lanes, warps, order)

    lanes7 = [1, 1, 1, 8, 1, 4, 1]
    return {
        "LAYOUT": blocked(
            [m_tiles, 2, 1, n_tiles, 1, 2], [1, 1, 8, 1, 4, 1], 0, [5, 1, 3, 0, 4, 2]
        ),  # fmt: skip
        # (WMT, SP, I, G, 1, Q, RC): SP spans of SPAN_BLOCKS[(n, m)] blocks
        "A_LOAD": blocked(
            [m_tiles, blocks // SPAN_BLOCKS[(n, m)], 4, 1, 1, 1, 2],
            lanes7,
            0,
            [2, 6, 1, 0, 5, 3, 4],
        ),  # fmt: skip
        # (WMT, KB / 4, KBL, G, 1, Q, 1)
        "META_LOAD": blocked(
            [m_tiles, blocks // 4, 4, 1, 1, 1, 1], lanes7, 0, [2, 1, 0, 5, 3, 4, 6]
        ),  # fmt: skip
        # (WMT, 1, 1, G, 1, Q, 1): 2:8's classes, a word a lane
        "CLASS_LOAD": blocked([m_tiles, 1, 1, 1, 1, 1, 1], lanes7, 0, [0, 1, 2, 5, 3, 4, 6]),
        # (NT, KB * 128): 128 threads, 16 bytes each
        "B_COPY": gl.BlockedLayout([1, 4], [1, 32], [1, WARPS], [1, 0]),
        # with B_NATURAL: (tokens, KB * 16 pairs), a warp 512 bytes of a token
        "B_NATURAL_COPY": gl.BlockedLayout([1, 4], [1, 32], [WARPS, 1], [1, 0]),
        # or (tokens, KB / SPAN, 2, 8 SPAN): a thread's two 16-byte loads hold whole fragments
        # of two lanes, so the permuted copy's shared stores are 16 bytes too
        "B_WIDE_COPY": gl.BlockedLayout(
            [1, 1, 2, 4],
            [max(1, 32 // (2 * blocks)), blocks // SPAN_BLOCKS[(n, m)], 1, 2 * SPAN_BLOCKS[(n, m)]],
            [WARPS, 1, 1, 1],
            [3, 2, 1, 0],
        ),  # fmt: skip
        # (NT, KB, G, Q, J): every warp reads all of it
        "B_LOAD": blocked([n_tiles, blocks, 1, 1, 4], [1, 1, 8, 4, 1], 0, [4, 0, 1, 3, 2]),
        "B_SHARED": gl.SwizzledSharedLayout(1, 1, 1, [1, 0]),
        # (BLOCK_M, BLOCK_N) for a column-major out: runs of 8 rows a thread (16 bytes of
        # bf16, 32 of a float32 plane), 4 on 8-token tiles
        "OUT_LAYOUT": gl.BlockedLayout(
            [8 if n_tiles > 1 else 4, 1],
            [8 if n_tiles > 1 else 16, 4 if n_tiles > 1 else 2],
            [1, WARPS],
            [0, 1],
        ),  # fmt: skip
    }


@functools.cache  # built once per tile: 64 us of host time a launch on the CPU box
def launch_layouts(m_tiles: int, blocks: int, n_tiles: int, natural_b: int, n: int, m: int) -> dict:
    """layouts() with B_COPY the one for B as given: permuted before (natural_b 0), as it
    lies (1), or as it lies loaded for 16-byte shared stores (2)."""
    chosen = layouts(m_tiles, blocks, n_tiles, n, m)  # (a fresh dict: popped below)
    natural, wide = chosen.pop("B_NATURAL_COPY"), chosen.pop("B_WIDE_COPY")
    if natural_b:
        chosen["B_COPY"] = wide if natural_b == 2 else natural
    return chosen
