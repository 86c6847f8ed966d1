"""Which kernel/tile linear's Triton route (ops/_triton_nm.spmm_nm) picks for a bf16 N:M weight,
without a GPU: the chain of spmm_nm with the device checks taken as an H200 (sm_90, 132 SMs).
Prints the decode kernel's launch (constexprs + warps) where the chain reaches _decode."""
import sys
import torch
import triton.language as tl
from sparsekernels.kernels import nm_decode_tuning, nm_mma_sp_tuning, nm_unpack_tuning, nm_wgmma_tuning, tuning
from sparsekernels.kernels import spmm_nm_decode as decode
from sparsekernels.kernels import spmm_nm_unpack as unpack
from sparsekernels.kernels import spmm_nm_expand as expand
from sparsekernels.kernels._sizes import next_power_of_2
from sparsekernels.ops._nm_alias import routed_pattern, sparse_core_pattern
from sparsekernels.ops import _triton_nm as route

SMS = 132


def mma_sp_supports(n, m, block, dtype, k):
    half = dtype in (torch.float16, torch.bfloat16)
    pattern = (n, m) in ((2, 4), (2, 8)) or ((n, m) == (1, 8) and k % 16 == 0)
    return pattern and block == 1 and half and k < 2**31


def wgmma_supports(n, m, block, dtype, k):
    half = dtype in (torch.float16, torch.bfloat16)
    return block == 1 and half and n in (1, 2) and m in (4, 8) and k < 2**31


def decode_launch(rows, k, tokens, n, m, vector, block=1, dtype=torch.bfloat16, column_major_out=True):
    """The decode kernel's launch as _decode/spmm_nm_decode build it."""
    slots = k * n // m
    bits = nm_decode_tuning.decode_bits(m, block)
    config = nm_decode_tuning.spmm_nm_decode_config(
        tokens, vector, rows, slots, n, m, block, column_major_out=column_major_out, itemsize=2)
    spw = 32 // bits * block
    block_w = max(1, config.block_slots // spw)
    steps = -(-slots // (block_w * spw))
    split = nm_decode_tuning.spmm_nm_decode_split(rows, config.block_m, steps, config.split_programs)
    bn = next_power_of_2(tokens)
    const = dict(
        N_KEEP=n, M_GROUP=m, VECTOR=vector, BLOCK=block, BITS=bits,
        SHARED=vector % config.block_m == 0, WIDE=False, PADDED_B=True, B_INDEX=tl.int32,
        HAS_BIAS=False, ACTIVATION=0, ACC_DTYPE=tl.float32, BLOCK_M=config.block_m,
        BLOCK_W=block_w, BLOCK_N=bn, PARTIAL=split > 1,
        KEEP_SUMS=False and tokens > 1 and vector % config.block_m != 0,  # _decode passes no keep_sums
        PREFETCH=config.prefetch, STREAM_CACHE="", GATHER_EVICTION="",
        GATHER_SHARED=config.gather_shared and decode.span_gather_fits(n, m, block, tokens, vector, config.block_m),
    )
    grid = (-(-rows // config.block_m), split)
    return dict(config=config, const=const, warps=config.num_warps, stages=config.num_stages,
                grid=grid, steps=steps, slots_a_step=block_w * spw, bits=bits)


def route_of(rows, k, tokens, n, m, vector, block=1, dtype=torch.bfloat16):
    n0, m0 = n, m
    routed = routed_pattern(n, m, vector, block, k, tokens, dtype)
    if routed != (n, m):
        n, m = routed
    if route._ring_config.__wrapped__ if hasattr(route._ring_config, "__wrapped__") else False:
        pass
    ring = nm_decode_tuning.spmm_nm_select_ring_config(tokens, n, m, vector, block, dtype, k, rows)
    if ring is not None:
        return f"select ring {ring}"
    core_n, core_m = sparse_core_pattern(n, m, block, k)
    if mma_sp_supports(core_n, core_m, block, dtype, k):
        sc = nm_mma_sp_tuning.spmm_nm_mma_sp_config(tokens, core_n, core_m, vector, block, dtype, rows, k, SMS)
        if sc is not None:
            return f"mma.sp {sc}"
    if wgmma_supports(n, m, block, dtype, k):
        w = nm_wgmma_tuning.spmm_nm_wgmma_config(tokens, n, m, vector, block, dtype, rows, k, SMS)
        if w is not None:
            return f"wgmma {w}"
    u = nm_unpack_tuning.spmm_nm_unpack_config(tokens, n, m, vector, block, dtype, rows)
    if u is not None and unpack.supports(n, m, block, dtype, k):
        return f"unpack {u}"
    sized = route._size_for_tiles(rows, k, tokens, vector, dtype)
    config = tuning.spmm_nm_config(tokens, vector, False, *sized, density=n / m, block=block, kept=n)
    elements = rows * k if decode.supports(block) else 0
    takes = tuning.spmm_nm_expand_takes(tokens, n, m, vector, True, elements, block)
    if takes and expand.supports(k, dtype):
        return "expand"
    decodes = tokens <= tuning.decode_max_n(n / m) and decode.supports(block)
    if not config.use_dot and decodes:
        sel = nm_decode_tuning.spmm_nm_select_config(tokens, n, m, vector, block, dtype, k, rows)
        if sel is not None:
            return f"select {sel}"
        return "decode"
    return f"spmm_nm dot={config.use_dot} {config}"


if __name__ == "__main__":
    for (n, m, v) in [(4, 8, 8), (2, 8, 8), (1, 8, 8), (2, 8, 64), (4, 8, 64)]:
        for t in (1, 2, 4, 5, 8):
            r = route_of(4096, 4096, t, n, m, v)
            line = f"{n}:{m} v={v} t={t}: {r}"
            if r == "decode" or "--all" in sys.argv:
                d = decode_launch(4096, 4096, t, n, m, v)
                line += f"  | decode: {d['config']} grid {d['grid']} steps {d['steps']} slots/step {d['slots_a_step']} bits {d['bits']} BLOCK_W {d['const']['BLOCK_W']} BLOCK_N {d['const']['BLOCK_N']} SHARED {d['const']['SHARED']}"
            print(line)
