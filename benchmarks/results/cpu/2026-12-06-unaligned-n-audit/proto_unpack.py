"""Prototype (audit only, not wired in): src/sparsekernels/kernels/spmm_nm_unpack.py's
_nm_unpack_kernel with B's tile masked on B_COLS instead of N (the stores keep N)."""
import sparsekernels.kernels.spmm_nm_unpack as _module

globals().update({k: v for k, v in vars(_module).items() if not k.startswith("__")})


@triton.jit
def _nm_unpack_bcols_kernel(
    values,  # (M, S) compressed 16-bit values, S = groups * n, unit stride along S
    units,  # (ceil(M / VECTOR), ...) the packed offsets as 8, 16 or 32-bit integers, unit stride
    b,  # (K, N): strides stride_bk, stride_bn
    bias,
    out,  # (M, N)
    partials,  # with SPLITS > 1 the (SPLITS, M, N) float32 workspace
    counters,  # with FUSED an int32 a tile, zero (split_k.tile_counters)
    M,
    N,
    B_COLS,  # B's padded width (a multiple of 16)
    K,
    GROUPS_PER_SPLIT,  # a multiple of BLOCK_G: program_id(2) takes its range of groups
    SPLIT_STRIDE,  # M * N
    stride_vm,
    stride_um,
    stride_bk,
    stride_bn,
    stride_om,
    stride_on,
    N_KEEP: tl.constexpr,
    M_GROUP: tl.constexpr,
    BITS: tl.constexpr,
    VECTOR: tl.constexpr,
    BLOCK: tl.constexpr,  # block-wise: kept runs of BLOCK columns, one offset each
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_G: tl.constexpr,  # groups a step: the dot is BLOCK_G * m deep
    BLOCK_N: tl.constexpr,
    SPLITS: tl.constexpr,  # pieces of the K range, program_id(2)
    FUSED: tl.constexpr,  # the last piece of a tile sums the pieces (else a second kernel)
    LOG_N: tl.constexpr,  # n a power of two
    LOG_M: tl.constexpr,  # m a power of two
    PERMUTE: tl.constexpr,  # n <= 2, m <= 8: the tile by byte permutes (_permuted_tile)
    PAIRS: tl.constexpr,  # even blocks: the tile from int32 pairs of values (_dense_tile)
    ASM: tl.constexpr,  # compiled, not the interpreter: prmt as inline assembly, 16-bit dots
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    mask_bn = offs_n < B_COLS
    rows = tl.minimum(offs_m, M - 1).to(tl.int64)  # rows past M repeat the last, not stored
    index_rows = rows // VECTOR
    b_cols = offs_n[None, :].to(tl.int64) * stride_bn
    groups_total = K // M_GROUP
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    first = tl.program_id(2) * GROUPS_PER_SPLIT
    end = tl.minimum(first + GROUPS_PER_SPLIT, groups_total)
    full = first + (end - first) // BLOCK_G * BLOCK_G
    for g0 in range(first, full, BLOCK_G):
        acc = _step(
            acc, values, units, b, rows, index_rows, b_cols, mask_bn, g0, end, K, stride_vm,
            stride_um, stride_bk, N_KEEP, M_GROUP, BITS, BLOCK_M, BLOCK_G, LOG_N, LOG_M, False,
            PERMUTE, ASM, BLOCK, PAIRS,
        )  # fmt: skip
    if full < end:
        acc = _step(
            acc, values, units, b, rows, index_rows, b_cols, mask_bn, full, end, K, stride_vm,
            stride_um, stride_bk, N_KEEP, M_GROUP, BITS, BLOCK_M, BLOCK_G, LOG_N, LOG_M, True,
            PERMUTE, ASM, BLOCK, PAIRS,
        )  # fmt: skip
    split_k.end_piece(
        acc, offs_m, offs_n, mask_m, mask_n, bias, out, partials, counters, N, SPLIT_STRIDE,
        stride_om, stride_on, HAS_BIAS, ACTIVATION, tl.float32, SPLITS, FUSED,
    )  # fmt: skip
