"""The `triton` backend of spmm/linear for N:M weights: on the GPU the sparse-tensor-core
kernel for 2:4, 2:8 and 1:8 (1:2 and 1:4 read as 2:4 and 2:8; vector-wise too) at 1-32
tokens (nm_mma_sp_tuning), on Hopper the wgmma kernel where it
measured faster at 4-32 tokens (nm_wgmma_tuning), the unpack kernel where it measured faster
at 4-64 tokens (nm_unpack_tuning), the decode kernel at 1-16 tokens (to 32
at 1:8 and sparser in fp32), the condensed-K pairs kernel for 8-row vectors at m = 16 / 32
and 17-48 tokens (nm_pairs_tuning), the one-hot tensor-core kernel in half precision at 13-128
tokens for 1:8 and sparser and at 13-64 for 2:4, 2:8 and 4:8 (tuning.spmm_nm_expand_takes;
from 17 on element-wise weights of up to 4096 x 4096 at 1:4 and sparser; split-K on few-row
weights), the vector-wise tensor-core kernel, else the gather kernel
(kernels/spmm_nm*.py); W^T @ B (the backward of x) through the CSR kernel on W^T's pattern,
built once per weight."""

from __future__ import annotations

import functools

import torch

from .._cache_mode import building
from ..kernels import (
    nm_decode_tuning,
    nm_mma_sp_tuning,
    nm_pairs_tuning,
    nm_unpack_tuning,
    nm_wgmma_tuning,
    tuning,
)
from ..kernels import nm_mma_sp_operands as mma_sp_operands
from ..kernels import spmm_nm as kernel
from ..kernels import spmm_nm_decode as decode
from ..kernels import spmm_nm_expand as expand
from ..kernels import spmm_nm_mma_sp as mma_sp
from ..kernels import spmm_nm_pairs as pairs
from ..kernels import spmm_nm_select as select
from ..kernels import spmm_nm_select_ring as select_ring
from ..kernels import spmm_nm_unpack as unpack
from ..kernels import spmm_nm_wgmma as wgmma
from ..kernels._pdl import hopper
from ..kernels.nm_small_tiles import vector_wise_small_tiles
from . import _dispatch, _layout
from ._identity_cache import IdentityCache, version
from ._layout import aligned_rows, column_major, padded_rows, rows_contiguous, spmm_out
from ._nm_alias import aliased_indices, routed_pattern, sparse_core_pattern
from ._nm_stored_as import stored_as, stored_pattern
from ._nm_transpose import transposed_pattern
from ._weight_pdl import weight_pdl


def spmm_nm(values, indices, b, bias, activation, n, m, vector, block, transpose):
    if transpose:
        return _transposed(values, indices, b, bias, activation, n, m, vector, block)
    out = spmm_out(b, values.shape[0])
    if out.numel() == 0:  # (no rows or no tokens: the tile rules divide by the programs)
        return out
    paired = nm_pairs_tuning.spmm_nm_pairs_config(
        b.shape[1], n, m, vector, block, values.dtype, values.shape[0], b.shape[0]
    )
    if paired is not None and pairs.supports(vector, block, b.shape[0], values.dtype):
        return _pairs(values, indices, b, bias, out, activation, n, m, vector, paired)
    routed = routed_pattern(n, m, vector, block, b.shape[0], b.shape[1], values.dtype)
    if routed != (n, m):  # 1:m as 2:2m past the sparse tensor cores' tokens (_nm_alias)
        n, m, indices = *routed, aliased_indices(indices, m)
    stored = stored_pattern(n, m, vector, block, b.shape[1], values.dtype)
    if stored is not None:  # 2:16 through its copy stored as 2:8 (_nm_stored_as)
        (values, indices), (n, m) = stored_as(values, indices, n, m, vector, stored), stored
    if _ring_config(values, b, n, m, vector, block) is not None:  # before mma.sp: faster there
        return _decode(values, indices, b, bias, out, activation, n, m, vector, block)
    core_n, core_m = sparse_core_pattern(n, m, block, b.shape[0])  # (1:4 as 2:8)
    if mma_sp.supports(core_n, core_m, block, values.dtype, b.shape[0], b.device):
        sparse_cores = nm_mma_sp_tuning.spmm_nm_mma_sp_config(
            b.shape[1], core_n, core_m, vector, block, values.dtype, values.shape[0], b.shape[0],
            _sm_count(b.device),
        )  # fmt: skip
        if sparse_cores is not None:
            rows = values.shape[0]
            core = indices if (core_n, core_m) == (n, m) else aliased_indices(indices, m)
            classes = class_words(core, rows, vector, core_n) if core_m == 8 else None
            tile = dict(vars(sparse_cores))  # (asdict deep-copies: 11 us a call)
            out_m_fastest = tile.pop("out_by_rows") and out.stride(0) == 1
            mma_sp.spmm_nm_mma_sp(
                values=values, metadata=metadata_words(core, rows, vector, core_n, core_m), b=b,
                n=core_n, m=core_m, classes=classes,
                bias=bias.contiguous() if bias is not None else None, out=out,
                activation=activation, out_m_fastest=out_m_fastest,
                pdl=weight_pdl(values, indices), **tile,
            )  # fmt: skip
            return out
    on_registers = None
    if wgmma.supports(n, m, block, values.dtype, b.shape[0], b.device):
        on_registers = nm_wgmma_tuning.spmm_nm_wgmma_config(
            b.shape[1], n, m, vector, block, values.dtype, values.shape[0], b.shape[0],
            _sm_count(b.device),
        )  # fmt: skip
    if on_registers is not None:
        launch = wgmma.spmm_nm_wgmma
        return _dense_tile(
            launch, values, indices, b, bias, out, activation, n, m, vector, on_registers
        )
    unpacking = nm_unpack_tuning.spmm_nm_unpack_config(
        b.shape[1], n, m, vector, block, values.dtype, values.shape[0]
    )
    if unpacking is not None and unpack.supports(n, m, block, values.dtype, b.shape[0]):
        launch = unpack.spmm_nm_unpack
        return _dense_tile(
            launch, values, indices, b, bias, out, activation, n, m, vector, unpacking, block
        )
    half = b.dtype in (torch.float16, torch.bfloat16)
    sized = _size_for_tiles(values.shape[0], b.shape[0], b.shape[1], vector, b.dtype)
    config = tuning.spmm_nm_config(
        b.shape[1], vector, values.dtype == torch.float64, *sized, density=n / m, block=block,
        kept=n,
    )  # fmt: skip
    # (the size only counts where the decode kernel could take the product instead)
    elements = values.shape[0] * b.shape[0] if decode.supports(block) else 0
    takes = tuning.spmm_nm_expand_takes(b.shape[1], n, m, vector, half, elements, block)
    if takes and expand.supports(b.shape[0], b.dtype):
        return _expand(values, indices, b, bias, out, activation, n, m, vector, block)
    # Vector-wise tiles at 16 tokens still prefer tensor cores (13.9 us vs 36 us, 2:8 v=64).
    decodes = b.shape[1] <= tuning.decode_max_n(n / m) and decode.supports(block)
    if not config.use_dot and decodes:
        return _decode(values, indices, b, bias, out, activation, n, m, vector, block)
    if config.b_in_place:
        b_read = b
    elif config.use_dot:  # (x^T copied 16-column aligned: the tile's B loads stay wide)
        b_read = aligned_rows(b)
    else:
        b_read = rows_contiguous(b)
    kernel.spmm_nm(
        values=values.contiguous(),
        indices=indices.contiguous(),
        b=b_read,
        bias=bias.contiguous() if bias is not None else None,
        out=out,
        n=n,
        m=m,
        vector=vector,
        block=block,
        activation=activation,
        use_dot=config.use_dot,
        block_m=config.block_m,
        block_s=config.block_s,
        block_n=config.block_n,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return out


def _transposed(values, indices, b, bias, activation, n, m, vector, block):
    """W^T @ b (the backward of x) with the CSR kernel on W^T's pattern, built once per weight,
    and W's values gathered into its order: no dense copy of W."""
    from .spmm import _triton_csr

    pattern, perm = transposed_pattern(indices, values.shape[0], n, m, vector, block)
    t_values = values.reshape(-1)[perm]
    product = _triton_csr(
        pattern.row_offsets,
        pattern.column_indices,
        t_values,
        b,
        bias,
        pattern.row_order(),
        activation,
    )
    if not column_major(b) or product.t().is_contiguous():  # already in b's order
        return product
    return spmm_out(b, pattern.shape[0]).copy_(product)  # the order the op promises (_layout)


def _expand(values, indices, b, bias, out, activation, n, m, vector, block):
    rows, slots = values.shape
    config = tuning.spmm_nm_expand_config(b.shape[1], n, m, rows, slots, values.element_size())
    expand.spmm_nm_expand(
        values=values.contiguous(),
        indices=indices.contiguous(),
        b=aligned_rows(b),
        bias=bias.contiguous() if bias is not None else None,
        out=out,
        n=n,
        m=m,
        vector=vector,
        block=block,
        activation=activation,
        block_m=config.block_m,
        block_s=config.block_s,
        block_n=config.block_n,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        grouped=config.grouped,
        split=config.split,
    )
    return out


def _pairs(values, indices, b, bias, out, activation, n, m, vector, config):
    """8-row vectors at m = 16 / 32 through the condensed-K pairs kernel (nm_pairs_tuning)."""
    pairs.spmm_nm_pairs(
        values=values.contiguous(), indices=indices.contiguous(), b=aligned_rows(b),
        bias=bias.contiguous() if bias is not None else None, out=out, n=n, m=m,
        vector=vector, activation=activation, **vars(config),
    )  # fmt: skip
    return out


def _sm_count(device: torch.device) -> int:
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _sm_count_of(index)


@functools.cache
def _sm_count_of(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _dense_tile(launch, values, indices, b, bias, out, activation, n, m, vector, config, block=1):
    """A dense-tile kernel (the wgmma kernel: element-wise; the unpack kernel: also block-wise)
    on bit-packed offsets with its tuned tile (a config dataclass whose fields are the launch's
    tile arguments). linear's x^T is read in place (masked along tokens, its loads stay
    wide); with _layout.ALIGN_ROW_MAJOR_B any other B as aligned_rows."""
    bits = decode.packed_bits(m, block)
    blocks = {"block": block} if block > 1 else {}  # (the wgmma launch takes no block)
    return launch(
        values=values.contiguous(),
        words=packed_words(indices, bits),
        bits=bits,
        b=aligned_rows(b) if _layout.ALIGN_ROW_MAJOR_B and not column_major(b) else b,
        bias=bias.contiguous() if bias is not None else None,
        out=out,
        n=n,
        m=m,
        vector=vector,
        activation=activation,
        **vars(config),
        **blocks,
    )


def _ring_config(values, b, n, m, vector, block) -> dict | None:
    """The TMA-ring select kernel's launch where it measured fastest at one token (ahead of the
    sparse tensor cores: 1:8 on 4096 x 14336 8.4 us against mma.sp's 11.9), on Hopper."""
    ring = nm_decode_tuning.spmm_nm_select_ring_config(
        b.shape[1], n, m, vector, block, values.dtype, b.shape[0], values.shape[0]
    )
    return ring if ring is not None and hopper(values.device) else None


def _decode(values, indices, b, bias, out, activation, n, m, vector, block):
    bits = nm_decode_tuning.decode_bits(m, block)  # (select and ring: block 1, packed_bits')
    words = packed_words(indices, bits)
    ring = _ring_config(values, b, n, m, vector, block)
    if ring is not None and select_ring.supports(values, words, n, m, bits):
        return select_ring.spmm_nm_select_ring(
            values=values, words=words, x=b, bias=bias.contiguous() if bias is not None else None,
            out=out, n=n, activation=activation, pdl=weight_pdl(values, indices), **ring,
        )  # fmt: skip
    picking = nm_decode_tuning.spmm_nm_select_config(
        b.shape[1], n, m, vector, block, values.dtype, b.shape[0], values.shape[0]
    )
    if picking is not None:
        return select.spmm_nm_select(
            values=values.contiguous(),
            words=words,
            bits=bits,
            x=b,
            bias=bias.contiguous() if bias is not None else None,
            out=out,
            n=n,
            m=m,
            activation=activation,
            block_m=picking.block_m,
            block_g=picking.block_g,
            num_warps=picking.num_warps,
            permute=not _dispatch.triton_interpreter_enabled(),  # inline PTX: compiled only
            pdl=weight_pdl(values, indices),
        )
    config = nm_decode_tuning.spmm_nm_decode_config(
        b.shape[1],
        vector,
        values.shape[0],
        values.shape[1],
        n,
        m,
        block,
        column_major_out=column_major(out),
        itemsize=values.element_size(),
    )
    slots_per_word = 32 // bits * block
    block_w = max(1, config.block_slots // slots_per_word)
    steps = -(-values.shape[1] // (block_w * slots_per_word))
    split = nm_decode_tuning.spmm_nm_decode_split(
        values.shape[0], config.block_m, steps, config.split_programs
    )
    decode.spmm_nm_decode(
        values=values.contiguous(),
        words=words,
        bits=bits,
        b=padded_rows(b),
        bias=bias.contiguous() if bias is not None else None,
        out=out,
        n=n,
        m=m,
        vector=vector,
        block=block,
        activation=activation,
        block_m=config.block_m,
        block_w=block_w,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        split=split,
        prefetch=config.prefetch,
        gather_shared=config.gather_shared,
    )
    return out


# Where spmm_nm_config is given the weight's size (its small and few-token tiles): 16-bit
# values, and fp32 at 8-16 tokens. There fp32's few-token tensor-core tiles (ieee dots) beat the
# decode kernel (v = 64, densities 1/4-1/2 on 8192+ rows or 64-column blocks, and at 16 tokens
# on any rows) and the usual tiles at 16; through linear, H100, cold L2, TF32 off, us, the
# route -> these (benchmarks/sweeps/nm_fp32_few.py and nm_route_cliffs.py, results/
# nvidia-h100/2026-12-06/at-100f813/nm_fp32_few.txt and at-98f9b2a/):
#                         8 tokens     12 tokens    16 tokens    dense at 8 / 16
#   14336 x 4096  4:8     687 -> 90    1625 -> 91    111 -> 81   137 / 153
#                 8:32    362 -> 50     821 -> 50     59 -> 45   137 / 150
#   4096^2        4:8       (decode)      (decode)     81 -> 34    47 / 50
#   4096 x 14336  4:8       (decode)      (decode)    278 -> 103  164 / 133
#   64:128 b=64   4096^2 174 -> 32, 14336 x 4096 687 -> 89, 4096 x 14336 729 -> 101 (8 tokens)
# The decode kernel's 4 x 4-warp tile (nm_decode_tuning.DECODE_FOUR_WARPS) ran 107, 189 and 111
# us on 14336 x 4096 4:8 (29 against 32 on 64:128 b=64 4096^2). At 1-4 tokens these tiles lost
# (14336 x 4096 4:8 at 1: 310 against 41; at 4: 90 against 83, and 64 with 4 x 4 warps). The
# small weights' tiles (K <= 1536, nm_small_tiles) were not timed in fp32: not given there.
SIZED_TILE_DTYPES = (torch.float16, torch.bfloat16)
FP32_SIZED_TOKENS = (8, 16)


def _size_for_tiles(rows: int, k: int, n_cols: int, vector: int, dtype: torch.dtype) -> tuple:
    """(rows, k) where spmm_nm_config may pick tiles by the weight's size, else (None, None)."""
    if dtype in SIZED_TILE_DTYPES:
        return rows, k
    fewest, most = FP32_SIZED_TOKENS
    few = dtype == torch.float32 and fewest <= n_cols <= most
    small = vector_wise_small_tiles(n_cols, vector, rows, k)
    return (rows, k) if few and not small else (None, None)


# indices tensor -> (its version, bits, packed words): packing costs a few passes over the
# offsets, so it happens once per weight (keyed by identity; an in-place edit bumps the version).
_PACKED = IdentityCache()


# indices tensor -> {(what, rows, vector, n, m): (its version, the sparse MMA's operand)}, likewise
_MMA_SP = IdentityCache()


def _mma_sp_operand(what: str, indices: torch.Tensor, rows: int, vector: int, n: int, m: int):
    cached = _MMA_SP.get(indices)
    if cached is None:
        cached = {}
        _MMA_SP[indices] = cached
    hit = cached.get((what, rows, vector, n, m))
    seen = version(indices)
    if hit is None or hit[0] != seen or seen is None:
        with building(indices):
            if what == "metadata":
                operand = mma_sp_operands.metadata_words(indices, rows, vector, n, m)
            else:
                operand = mma_sp_operands.class_words(indices, rows, vector, n)
        hit = (seen, operand)
        if seen is not None:  # (an inference tensor's: built for the call)
            cached[(what, rows, vector, n, m)] = hit
    return hit[1]


def metadata_words(
    indices: torch.Tensor, rows: int, vector: int, n: int = 2, m: int = 4
) -> torch.Tensor:
    return _mma_sp_operand("metadata", indices, rows, vector, n, m)


def class_words(indices: torch.Tensor, rows: int, vector: int, n: int = 2) -> torch.Tensor:
    return _mma_sp_operand("classes", indices, rows, vector, n, 8)


def packed_words(indices: torch.Tensor, bits: int) -> torch.Tensor:
    from ..formats.nm import pack_offsets

    seen = version(indices)
    hit = _PACKED.get(indices)
    if hit is None or hit[0] != seen or hit[1] != bits or seen is None:
        with building(indices):
            hit = (seen, bits, pack_offsets(indices, bits))
        if seen is not None:  # (an inference tensor's: built for the call)
            _PACKED[indices] = hit
    return hit[2]


def reasons(problem: _dispatch.Problem, forced: bool) -> list[str]:
    reasons = _dispatch.triton_device_reasons(problem, forced)
    if -(-problem.facts["n"] // 16) > tuning.MAX_GRID_YZ:
        reasons.append(f"N = {problem.facts['n']} needs more column tiles than the grid allows")
    return reasons
