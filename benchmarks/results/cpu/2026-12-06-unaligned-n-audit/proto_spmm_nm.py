"""Prototype (audit only, not wired in): src/sparsekernels/kernels/spmm_nm.py's
_spmm_nm_dot_kernel with B's tile masked on B_COLS (B's padded width) instead of N, as the
expand kernel does. Compiled by extra_cases.py to check the fix restores the async copies."""
import triton
import triton.language as tl

from sparsekernels.kernels.spmm_nm import _epilogue_store, _slot_columns


@triton.jit
def _spmm_nm_dot_bcols_kernel(
    values,
    indices,
    b,
    bias,
    out,  # as in _spmm_nm_gather_kernel
    M,
    N,
    B_COLS,  # B's padded width (a multiple of 16), read past N, never stored
    S,
    stride_vm,
    stride_im,
    stride_bk,
    stride_bn,
    stride_om,
    stride_on,
    N_KEEP: tl.constexpr,
    M_GROUP: tl.constexpr,
    VECTOR: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,  # the CPU interpreter miscomputes bf16 tl.dot (triton 3.9): use fp32
    BLOCK_M: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0).to(tl.int64)  # M may come within BLOCK_M of 2^31
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    mask_bn = offs_n < B_COLS
    rows = offs_m.to(tl.int64)
    group_row = (pid_m * BLOCK_M // VECTOR).to(tl.int64)  # the tile's rows share this choice
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for s0 in range(0, S, BLOCK_S):
        slots = s0 + tl.arange(0, BLOCK_S)
        mask_s = slots < S
        vals = tl.load(
            values + rows[:, None] * stride_vm + slots[None, :],
            mask=mask_m[:, None] & mask_s[None, :],
            other=0.0,
        )
        cols = _slot_columns(
            tl.where(mask_s, slots, 0), group_row, indices, stride_im, N_KEEP, M_GROUP, BLOCK
        )
        tile = tl.load(
            b + cols[:, None] * stride_bk + offs_n[None, :].to(tl.int64) * stride_bn,
            mask=mask_s[:, None] & mask_bn[None, :],
            other=0.0,
        )
        if UPCAST:
            vals = vals.to(tl.float32)
            tile = tile.to(tl.float32)
        acc = tl.dot(vals, tile, acc, input_precision=PRECISION)
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
        tl.float32,
    )


