"""N:M SpMM at decode sizes (N <= 16 columns of B), out = act(W @ B + bias).

At 1-16 tokens the product is bound by the bytes of the weight, so these kernels read the
compressed values and the bit-packed block offsets (`NMMatrix.packed_indices()`: `BITS` bits per
offset, 32 // BITS offsets per int32 word, never straddling a word) and nothing else of W. B is
tiny (K x N) and stays in L1/L2, so it is read with any strides (no copy of x^T).

Each stored value meets its B row through a gather (from L1: B is small). When the tile's rows
share one choice (vector-wise, BLOCK_M divides VECTOR) the columns are computed once per tile,
not once per row; that is what lets vector-wise patterns run at the weight's bandwidth. The
gather's offsets into B are int32 where every one fits (INT32_LIMIT), sparing a 64-bit multiply
a slot.

Both walk the whole row, or with `split` a range of its steps: each piece writes a partial
product and split_k.py adds them in order. Each output is a fixed sum order: deterministic, no
atomics. Split-K pays on long rows only (2:4 on 4096 x 14336 at one token: 51.3 -> 36.8 us);
nm_decode_tuning.spmm_nm_decode_split holds the measured rule.

With PREFETCH the own-row walk loads the next step's values and words before this step's
gather of B, so a step's weight loads are in flight a whole step before they are used (Nsight
Compute, cold caches: the one-token walk stalls on loads with no eligible warp 47% of cycles).
A hand-pipelined walk lost with the weight warm in L2 (20.3 against 16.6 us, 2:8 on 4096 x
14336); off by default until timed cold (benchmarks/sweeps/nm_decode_tall_cold.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import split_k
from ._activation import ACTIVATION_CODES
from ._sizes import cdiv, matrix_span, next_power_of_2
from .transpose import padded_b


@triton.jit
def _own_row_loads(
    row_values, words, group_rows, stride_wm, w0, stop, S, mask_m,
    BLOCK_W: tl.constexpr, SPW: tl.constexpr, STREAM_CACHE: tl.constexpr,
):  # fmt: skip
    """A step's compressed values (BLOCK_M, BLOCK_W, SPW) and packed words (BLOCK_M, BLOCK_W)
    for rows with their own choice; nothing loaded at or past `stop` (words) or S (slots).
    STREAM_CACHE: the loads' cache modifier ("" or ".cg", past L1: see the launcher)."""
    w = w0 + tl.arange(0, BLOCK_W)
    mask_w = w < stop
    slots = w[:, None] * SPW + tl.arange(0, SPW)[None, :]  # (BLOCK_W, SPW)
    mask_s = mask_w[:, None] & (slots < S)
    vals = tl.load(
        row_values + slots[None, :, :],
        mask=mask_m[:, None, None] & mask_s[None, :, :],
        other=0.0,
        cache_modifier=STREAM_CACHE,
    )
    word = tl.load(
        words + group_rows * stride_wm + tl.where(mask_w, w, 0)[None, :],
        mask=mask_w[None, :],
        other=0,
        cache_modifier=STREAM_CACHE,
    )
    return vals, word


@triton.jit
def _own_row_step(
    acc, slot_sums, vals, word, w0, S, b, b_row, b_col, offs_n, mask_n, stride_bk,
    N_KEEP: tl.constexpr, M_GROUP: tl.constexpr, BLOCK: tl.constexpr, BITS: tl.constexpr,
    WIDE: tl.constexpr, PADDED_B: tl.constexpr, B_INDEX: tl.constexpr,
    ACC_DTYPE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_W: tl.constexpr,
    BLOCK_N: tl.constexpr, SPW: tl.constexpr, KEEP_SUMS: tl.constexpr,
    GATHER_EVICTION: tl.constexpr, GATHER_SHARED: tl.constexpr,
):  # fmt: skip
    """Unpack a step's offsets, gather its B rows and add the products (the loads' masks
    already zeroed the values of slots past the row or the range). GATHER_EVICTION: the
    gather's eviction policy ("" or "evict_last"). GATHER_SHARED (one token, element-wise,
    n and m powers of two): the step's slots of every row cover the same span of x, which is
    loaded whole (contiguous) and gathered from shared memory (tl.gather) instead of from L1."""
    j = tl.arange(0, SPW)
    slots = (w0 + tl.arange(0, BLOCK_W))[:, None] * SPW + j[None, :]  # (BLOCK_W, SPW)
    mask_s = slots < S
    slots = tl.where(mask_s, slots, 0)
    within = slots % N_KEEP
    groups = slots // N_KEEP
    if WIDE:
        groups = groups.to(tl.int64)
    first = groups * M_GROUP + within % BLOCK
    offsets = (word[:, :, None] >> ((j // BLOCK) * BITS)[None, None, :]) & ((1 << BITS) - 1)
    cols = first[None, :, :] + offsets * BLOCK
    vals = vals.to(ACC_DTYPE)
    if BLOCK_N == 1 and GATHER_SHARED:  # one token, x's span of the step staged in shared
        SPAN: tl.constexpr = BLOCK_W * SPW // N_KEEP * M_GROUP
        first_col = w0 * SPW // N_KEEP * M_GROUP  # a step starts on a group: SPW % N_KEEP == 0
        span_cols = first_col + tl.arange(0, SPAN)
        chunk = tl.load(  # b_row: 1 at compile time for a padded b, so vector loads
            b + span_cols.to(B_INDEX) * b_row,
            mask=span_cols < tl.cdiv(S, N_KEEP) * M_GROUP,
            other=0.0,
        )
        local = tl.where(mask_s[None, :, :], cols - first_col, 0).to(tl.int32)
        flat = tl.reshape(local, (BLOCK_M * BLOCK_W * SPW,))
        x = tl.reshape(tl.gather(chunk, flat, 0), (BLOCK_M, BLOCK_W, SPW))
        acc += tl.sum(tl.sum(vals * x.to(ACC_DTYPE), axis=2), axis=1)[:, None]
    elif BLOCK_N == 1:  # decode of one token: a plain gather, no column axis
        x = tl.load(
            b + cols.to(B_INDEX) * stride_bk,
            mask=mask_s[None, :, :],
            other=0.0,
            eviction_policy=GATHER_EVICTION,
        )
        acc += tl.sum(tl.sum(vals * x.to(ACC_DTYPE), axis=2), axis=1)[:, None]
    else:
        flat_cols = tl.reshape(cols, (BLOCK_M, BLOCK_W * SPW))
        flat_mask = tl.reshape(mask_s, (BLOCK_W * SPW,))
        b_rows = b + flat_cols.to(B_INDEX)[:, :, None] * b_row
        x_mask = flat_mask[None, :, None]
        if not PADDED_B:
            x_mask = x_mask & mask_n[None, None, :]
        x = tl.load(
            b_rows + offs_n[None, None, :] * b_col,
            mask=x_mask,
            other=0.0,
            eviction_policy=GATHER_EVICTION,
        )
        flat_vals = tl.reshape(vals, (BLOCK_M, BLOCK_W * SPW))
        if KEEP_SUMS:
            slot_sums += flat_vals[:, :, None] * x.to(ACC_DTYPE)
        else:
            acc += tl.sum(flat_vals[:, :, None] * x.to(ACC_DTYPE), axis=1)
    return acc, slot_sums


@triton.jit
def _nm_decode_kernel(
    values,  # (M, S) compressed values, unit stride along S
    words,  # (ceil(M / VECTOR), ceil(S / BLOCK / (32 // BITS))) int32 packed block offsets
    b,  # (K, N), any strides (row-contiguous is fastest for N > 1: one vector load a slot)
    bias,
    out,  # (M, N)
    M,
    N,
    S,
    STEPS_PER_SPLIT,  # program_id(1) walks its range of this many steps
    SPLIT_STRIDE,  # M * N: PARTIAL writes out[program_id(1)] of the (splits, M, N) workspace
    stride_vm,
    stride_wm,
    stride_bk,
    stride_bn,
    stride_om,
    stride_on,
    N_KEEP: tl.constexpr,
    M_GROUP: tl.constexpr,
    VECTOR: tl.constexpr,
    BLOCK: tl.constexpr,
    BITS: tl.constexpr,  # a power of two, so a word holds a power-of-two number of offsets
    SHARED: tl.constexpr,  # BLOCK_M divides VECTOR: the tile's rows share their columns
    WIDE: tl.constexpr,  # K > 2^31 - 1: columns need 64 bits (int32 is cheaper when they fit)
    PADDED_B: tl.constexpr,  # b is (K, BLOCK_N) row-major, zero past column N (see the launcher)
    B_INDEX: tl.constexpr,  # int32 when every offset into b fits, else int64
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_W: tl.constexpr,  # packed words per step
    BLOCK_N: tl.constexpr,
    PARTIAL: tl.constexpr,  # write the sum in ACC_DTYPE to the workspace, no epilogue
    KEEP_SUMS: tl.constexpr,  # element-wise, N > 1: each slot's sums kept to the end
    PREFETCH: tl.constexpr,  # own-row walk: the next step's weight loads before this gather
    STREAM_CACHE: tl.constexpr,  # own-row walk: the weight's loads' cache modifier
    GATHER_EVICTION: tl.constexpr,  # own-row walk: the gather's eviction policy
    GATHER_SHARED: tl.constexpr,  # own-row walk at one token: x's span gathered from shared
):
    # Each row its own choice: a step covers BLOCK_W words, a (BLOCK_W, SPW) grid of slots
    # (slot = word * SPW + j); each word is loaded once and unpacked by shifts (2:8 at one
    # token: 13.8 us against 19.3 us re-reading the word per slot, H200).
    SPW: tl.constexpr = (32 // BITS) * BLOCK  # slots per word (a block's slots share an offset)
    pid = tl.program_id(0)
    offs_m = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    rows = offs_m.to(tl.int64)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_DTYPE)
    # KEEP_SUMS: a step adds into per-slot sums, reduced across slots once after the walk (the
    # CSR few-token kernel's way) instead of at every step.
    slot_sums = tl.zeros((BLOCK_M, BLOCK_W * SPW if KEEP_SUMS else 1, BLOCK_N), dtype=ACC_DTYPE)
    # A padded b's row stride is a compile-time power of two with no column mask, so each
    # gathered row is one aligned vector load; a runtime stride like 8 or 12 is not known to be
    # aligned, and an N of 8 ran 1.8x slower than 16 (H200, nm_decode_vs_gather.py, 2026-11-30).
    if PADDED_B:
        b_row = BLOCK_N
        b_col = 1
    else:
        b_row = stride_bk
        b_col = stride_bn
    if SHARED:
        # One choice for the whole tile: each slot's column is found once, its word re-read
        # from L1 per slot (cheaper here than unpacking: 8.2 vs 13.2 us, 2:8 v=64 on the H200).
        PER_WORD: tl.constexpr = 32 // BITS
        group_row = (pid * BLOCK_M // VECTOR).to(tl.int64)
        STEP: tl.constexpr = BLOCK_W * SPW
        start = tl.program_id(1)
        if WIDE:  # (a row's slots may pass 2^31: its walk's bounds too)
            start = start.to(tl.int64)
        start = start * STEPS_PER_SPLIT * STEP
        for s0 in range(start, tl.minimum(start + STEPS_PER_SPLIT * STEP, S), STEP):
            slots = s0 + tl.arange(0, BLOCK_W * SPW)
            mask_s = slots < S
            vals = tl.load(
                values + rows[:, None] * stride_vm + slots[None, :],
                mask=mask_m[:, None] & mask_s[None, :],
                other=0.0,
            ).to(ACC_DTYPE)
            slots = tl.where(mask_s, slots, 0)
            within = slots % N_KEEP
            index_col = slots // BLOCK  # n is a multiple of BLOCK: runs share an offset
            word = tl.load(words + group_row * stride_wm + index_col // PER_WORD)
            offsets = (word >> ((index_col % PER_WORD) * BITS)) & ((1 << BITS) - 1)
            groups = slots // N_KEEP
            if WIDE:
                groups = groups.to(tl.int64)
            cols = groups * M_GROUP + within % BLOCK + offsets * BLOCK
            x_mask = mask_s[:, None]
            if not PADDED_B:
                x_mask = x_mask & mask_n[None, :]
            x = tl.load(
                b + cols.to(B_INDEX)[:, None] * b_row + offs_n[None, :] * b_col,
                mask=x_mask,
                other=0.0,
            ).to(ACC_DTYPE)
            acc += tl.sum(vals[:, :, None] * x[None, :, :], axis=1)
    else:
        group_rows = tl.where(mask_m, rows // VECTOR, 0)[:, None]
        row_values = values + rows[:, None, None] * stride_vm
        words_total = tl.cdiv(S, SPW)
        start = tl.program_id(1) * STEPS_PER_SPLIT * BLOCK_W
        stop = tl.minimum(start + STEPS_PER_SPLIT * BLOCK_W, words_total)
        if PREFETCH:
            # the next step's values and words are loaded before this step's gather of B, so
            # the weight's loads of two steps are in flight while the gather waits
            vals, word = _own_row_loads(
                row_values, words, group_rows, stride_wm, start, stop, S, mask_m, BLOCK_W, SPW,
                STREAM_CACHE,
            )  # fmt: skip
            for w0 in range(start, stop, BLOCK_W):
                next_vals, next_word = _own_row_loads(
                    row_values, words, group_rows, stride_wm, w0 + BLOCK_W, stop, S, mask_m,
                    BLOCK_W, SPW, STREAM_CACHE,
                )  # fmt: skip
                acc, slot_sums = _own_row_step(
                    acc, slot_sums, vals, word, w0, S, b, b_row, b_col, offs_n, mask_n,
                    stride_bk, N_KEEP, M_GROUP, BLOCK, BITS, WIDE, PADDED_B, B_INDEX,
                    ACC_DTYPE, BLOCK_M, BLOCK_W, BLOCK_N, SPW, KEEP_SUMS, GATHER_EVICTION,
                    GATHER_SHARED,
                )  # fmt: skip
                vals, word = next_vals, next_word
        else:
            for w0 in range(start, stop, BLOCK_W):
                vals, word = _own_row_loads(
                    row_values, words, group_rows, stride_wm, w0, stop, S, mask_m, BLOCK_W, SPW,
                    STREAM_CACHE,
                )  # fmt: skip
                acc, slot_sums = _own_row_step(
                    acc, slot_sums, vals, word, w0, S, b, b_row, b_col, offs_n, mask_n,
                    stride_bk, N_KEEP, M_GROUP, BLOCK, BITS, WIDE, PADDED_B, B_INDEX,
                    ACC_DTYPE, BLOCK_M, BLOCK_W, BLOCK_N, SPW, KEEP_SUMS, GATHER_EVICTION,
                    GATHER_SHARED,
                )  # fmt: skip
        if KEEP_SUMS:
            acc += tl.sum(slot_sums, axis=1)
    split_k.store(
        acc,
        offs_m,
        offs_n,
        mask_m,
        mask_n,
        bias,
        out,
        N,
        SPLIT_STRIDE,
        stride_om,
        stride_on,
        HAS_BIAS,
        ACTIVATION,
        ACC_DTYPE,
        PARTIAL,
        1,
    )


INT32_LIMIT = 2**31  # offsets into b below it are computed in int32


def packed_bits(m: int, block: int) -> int:
    """Bits per offset in the kernel's packing: enough for m / block positions, rounded up to a
    power of two so that a word holds a power-of-two number of offsets."""
    needed = max(1, (m // block - 1).bit_length())
    return next_power_of_2(needed)


def supports(block: int) -> bool:
    """The word-wise walk needs a power-of-two number of slots per word."""
    return block & (block - 1) == 0


def span_gather_fits(n: int, m: int, block: int, cols: int, vector: int, block_m: int) -> bool:
    """The shared-memory gather's cases: one token, rows with their own element-wise choice,
    n and m powers of two (a step's span of x is then a power of two) and a word holding whole
    groups (so a step starts on a group)."""
    powers = n & (n - 1) == 0 and m & (m - 1) == 0
    whole_groups = (32 // packed_bits(m, block)) % n == 0
    return cols == 1 and block == 1 and vector % block_m != 0 and powers and whole_groups


def spmm_nm_decode(
    *,
    values: torch.Tensor,
    words: torch.Tensor,
    bits: int,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    n: int,
    m: int,
    vector: int,
    block: int,
    activation: str,
    block_m: int,
    block_w: int,
    num_warps: int,
    num_stages: int,
    split: int = 1,
    keep_sums: bool = False,
    prefetch: bool = False,
    stream_cache: str = "",
    gather_eviction: str = "",
    gather_shared: bool = False,
) -> torch.Tensor:
    """Launch over out (M, N <= 16); b (K, N), or (K, BLOCK_N) padded with zero columns (see
    `transpose.padded_b`), which loads fastest. values (M, S) and words
    (`NMMatrix.packed_indices(bits)`, bits from `packed_bits`) need unit stride along their
    last dim. `split` > 1 cuts each row's walk into that many ranges of steps (fewer where a
    range would be empty), summed in order by split_k.sum_partials. `prefetch`: rows with
    their own choice load the next step's values and words before this step's gather.
    `stream_cache` (".cg": the weight's values and words past L1) and `gather_eviction`
    ("evict_last": B's rows kept) are for benchmarks/sweeps/nm_decode_tall_cold.py (forms "/c"):
    at one token x is 28 KB and the weight streams ~280 KB through each multiprocessor's L1,
    which may evict x between gathers (Nsight Compute: L1TEX stalls, at-02f1e78/ncu.txt). Timed
    cold (at-54e4fc2/nm_cold_hints.txt) they gained nothing on the routes' tiles (2:8 4096 x
    14336 18.4 -> 18.8 us); only 2:4's 1024-slot 2-warp tile gained (49.5 -> 35.4), and 512-slot
    one-warp steps match that without them (nm_decode_tuning.DECODE_HALF_DENSE): unused.
    `gather_shared` (one token, element-wise, n and m powers of two, else ignored): each step
    loads the span of x its slots cover (2:8 at 1024 slots: 4096 columns, 8 KB) and gathers
    from shared memory, where a warp's 32 scattered reads cost a few bank conflicts, not up to
    32 L1 sectors (benchmarks/sweeps/nm_decode_tall_cold.py, forms "/g"): the route's choice
    for half-dense weights (nm_decode_tuning.DECODE_HALF_DENSE_SHARED)."""
    rows, cols = out.shape
    if rows == 0 or cols == 0:
        return out
    slots_a_step = block_w * (32 // bits) * block
    steps_per_split, splits = split_k.ranges(cdiv(values.shape[1], slots_a_step), split)
    wide_sums = values.dtype == torch.float64
    partials = split_k.workspace(out, splits, torch.float64 if wide_sums else torch.float32)
    _nm_decode_kernel[(cdiv(rows, block_m), splits)](
        values,
        words,
        b,
        bias if bias is not None else values,
        partials,
        rows,
        cols,
        values.shape[1],
        steps_per_split,
        rows * cols,
        values.stride(0),
        words.stride(0),
        b.stride(0),
        b.stride(1),
        out.stride(0),
        out.stride(1),
        N_KEEP=n,
        M_GROUP=m,
        VECTOR=vector,
        BLOCK=block,
        BITS=bits,
        SHARED=vector % block_m == 0,
        WIDE=b.shape[0] > 2**31 - 1,
        PADDED_B=padded_b(b, cols),
        B_INDEX=tl.int32 if matrix_span(b) < INT32_LIMIT else tl.int64,
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        ACC_DTYPE=tl.float64 if wide_sums else tl.float32,
        BLOCK_M=block_m,
        BLOCK_W=block_w,
        BLOCK_N=next_power_of_2(cols),
        PARTIAL=splits > 1,
        KEEP_SUMS=keep_sums and cols > 1 and vector % block_m != 0,
        PREFETCH=prefetch,
        STREAM_CACHE=stream_cache,
        GATHER_EVICTION=gather_eviction,
        GATHER_SHARED=gather_shared and span_gather_fits(n, m, block, cols, vector, block_m),
        num_warps=num_warps,
        num_stages=num_stages,
    )
    if splits > 1:
        split_k.sum_partials(partials, bias, out, activation)
    return out
