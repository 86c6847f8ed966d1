"""The split-K, tensor-core SDDMM and softmax kernels compiled for the H200 (sm_90), no GPU.

The interpreter accepts code the compiler rejects (a loop-carried value changing type, a constexpr
passed where a tensor is needed), and the GPU tests run only on the H200. Triton's wheel carries
ptxas, so CI compiles each variant of these kernels to a cubin here: a compile error shows before
any device time is spent. Variants: the one-hot kernel's slot and grouped forms, with and without
the partial plane; the decode kernel's own-row and shared-row walks in float32 and float64 sums, and
the own-row walk with its next step prefetched or one token gathered from shared memory; the second
pass in both sum types; the tensor-core SDDMM in each dtype it takes (a dot, then a gather along
each tile row); the row softmax, forward and backward (its single-read branch returns early) and
with a tail; the CSR one-token walk (bf16 with int16 columns, fp64 with int64); the general CSR
kernel with int32 and int64 offsets; the CSR few-token walk with B padded and strided; the per-entry
SDDMM with int32 and int64 offsets, and its blocked walk (fp32, bf16); the residual-add RMSNorm
in bf16 (with the add) and fp32;
the rotary embedding with the KV-cache writes and SwiGLU's gate in bf16 and fp32; the one-token
N:M select kernel on bf16 pairs (four rows, int64 group indices), fp64 (one row) and 1:8
pipelined by Triton (num_stages 3); the select kernel fed by a TMA ring (1:8 bf16 with a
TMA warp, 2:8 fp16 refilled by its warps, with bias, GELU and PDL; with the CSR one-token
kernel fed by a TMA ring, in _compile_cases_rings.py); the N:M unpack kernel by byte permutes
(2:8 split 4 summed by its last piece, 1:4 with four groups a byte into the split plane) and by
compare-selects (4:8); the densify through shared memory; the Gluon wgmma N:M kernel (2:8
split 4 summed by its last piece, 1:8 with bias and activation, 2:4 with a row-major B into the
split plane); the N:M mma.sp kernel (2:4, 2:8 and 1:8: B permuted in the kernel, split 4
summed by its last piece; fp16 with B permuted before, bias and activation); the block-sparse
attention forward's last merged pass, reading its fp32 scratch and storing bf16 (permuted rows
and keys), and its backward's dK/dV and dQ kernels; the condensed-K N:M kernel for 8-row
vectors (2:16 with bias and GELU, and into the split plane; its blocked step too).

The suite runs Triton in its interpreter on CPU machines (conftest.py), where @triton.jit makes
interpreted functions that cannot compile: one fresh Python without it compiles every case
(this file run as a script) and reports each one's outcome.
"""

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _compile_cases_csr_token import csr_token_cases
from _compile_cases_densify import DENSIFY_CASE_NAMES, densify_cases
from _compile_cases_rings import ring_cases
from _compile_cases_sddmm_staged import STAGED_CASE_NAMES, staged_cases


def _cases() -> dict:
    """name -> (kernel, pointer types in argument order, constexprs, warps); int32 for the
    other runtime arguments. Imports Triton, so only the script calls it."""
    import triton.language as tl

    from sparsekernels.kernels.attention_block import _attn_fwd_kernel
    from sparsekernels.kernels.attention_block_backward import (
        _attn_bwd_dkdv_kernel,
        _attn_bwd_dq_kernel,
    )
    from sparsekernels.kernels.nm_mma_sp_layouts import launch_layouts
    from sparsekernels.kernels.rms_norm import _rms_norm_kernel
    from sparsekernels.kernels.rope_cache import _rope_cache_kernel
    from sparsekernels.kernels.sddmm_blocked import _sddmm_blocked_kernel
    from sparsekernels.kernels.sddmm_csr import _sddmm_csr_kernel
    from sparsekernels.kernels.sddmm_tiles import _sddmm_tiles_kernel
    from sparsekernels.kernels.softmax_csr import _softmax_csr_backward_kernel, _softmax_csr_kernel
    from sparsekernels.kernels.split_k import _sum_partials_kernel
    from sparsekernels.kernels.spmm_csr import _spmm_csr_kernel
    from sparsekernels.kernels.spmm_csr_few import _spmm_csr_few_kernel
    from sparsekernels.kernels.spmm_csr_scatter import _csr_scatter_kernel
    from sparsekernels.kernels.spmm_csr_scatter import layouts as scatter_layouts
    from sparsekernels.kernels.spmm_nm import _spmm_nm_dot_kernel
    from sparsekernels.kernels.spmm_nm_decode import _nm_decode_kernel
    from sparsekernels.kernels.spmm_nm_expand import _nm_expand_dot_kernel
    from sparsekernels.kernels.spmm_nm_mma_sp import (
        MMA_SP_CONSTRAINTS,
        _mma_sp_asm,
        _nm_mma_sp_kernel,
    )
    from sparsekernels.kernels.spmm_nm_pairs import _nm_pairs_kernel
    from sparsekernels.kernels.spmm_nm_select import _nm_select_kernel
    from sparsekernels.kernels.spmm_nm_unpack import _nm_unpack_kernel
    from sparsekernels.kernels.spmm_nm_wgmma import _nm_wgmma_kernel, layouts
    from sparsekernels.kernels.swiglu import _swiglu_kernel

    cases = {}
    for (n, grouped), partial in itertools.product([(1, False), (2, True)], [False, True]):
        constants = dict(N_KEEP=n, M_GROUP=8, VECTOR=1, BLOCK=1, HAS_BIAS=True, ACTIVATION=1,
                         PRECISION="tf32", BLOCK_M=64, BLOCK_S=32 * n, BLOCK_N=16,
                         GROUPED=grouped, PARTIAL=partial, UPCAST=False)  # fmt: skip
        out = "*fp32" if partial else "*bf16"
        pointers = ["*bf16", "*u8", "*bf16", "*bf16", out]
        cases[f"one-hot n={n} partial={partial}"] = (_nm_expand_dot_kernel, pointers, constants, 4)
    for shared, partial, wide in itertools.product([False, True], repeat=3):
        data = "*fp64" if wide else "*bf16"
        out = ("*fp64" if wide else "*fp32") if partial else data
        constants = dict(N_KEEP=2, M_GROUP=8, VECTOR=8 if shared else 1, BLOCK=1, BITS=4,
                         SHARED=shared, WIDE=wide, PADDED_B=True, HAS_BIAS=True, ACTIVATION=2,
                         B_INDEX=tl.int64 if wide else tl.int32,
                         ACC_DTYPE=tl.float64 if wide else tl.float32,
                         BLOCK_M=8 if shared else 4, BLOCK_W=32, BLOCK_N=4,
                         PARTIAL=partial, KEEP_SUMS=not (shared or partial),
                         PREFETCH=False, STREAM_CACHE="", GATHER_EVICTION="",
                         GATHER_SHARED=False)  # fmt: skip
        name = f"decode shared={shared} partial={partial} fp64={wide}"
        cases[name] = (_nm_decode_kernel, [data, "*i32", data, data, out], constants, 1)
    for block_n in (1, 8):  # the own-row walk loading the next step before the gather
        constants = dict(N_KEEP=2, M_GROUP=8, VECTOR=1, BLOCK=1, BITS=4, SHARED=False,
                         WIDE=False, PADDED_B=True, HAS_BIAS=False, ACTIVATION=0,
                         B_INDEX=tl.int32, ACC_DTYPE=tl.float32, BLOCK_M=4, BLOCK_W=128,
                         BLOCK_N=block_n, PARTIAL=True, KEEP_SUMS=False,
                         PREFETCH=True, STREAM_CACHE="", GATHER_EVICTION="",
                         GATHER_SHARED=False)  # fmt: skip
        pointers = ["*bf16", "*i32", "*bf16", "*bf16", "*fp32"]
        cases[f"decode prefetch N={block_n}"] = (_nm_decode_kernel, pointers, constants, 2)
        hinted = dict(constants, PREFETCH=False, STREAM_CACHE=".cg", GATHER_EVICTION="evict_last")
        cases[f"decode cache hints N={block_n}"] = (_nm_decode_kernel, pointers, hinted, 2)
    for prefetch in (False, True):  # one token gathered from x's span in shared memory
        constants = dict(N_KEEP=2, M_GROUP=8, VECTOR=1, BLOCK=1, BITS=4, SHARED=False,
                         WIDE=False, PADDED_B=True, HAS_BIAS=False, ACTIVATION=0,
                         B_INDEX=tl.int32, ACC_DTYPE=tl.float32, BLOCK_M=4, BLOCK_W=128,
                         BLOCK_N=1, PARTIAL=False, KEEP_SUMS=False, PREFETCH=prefetch,
                         STREAM_CACHE="", GATHER_EVICTION="", GATHER_SHARED=True)  # fmt: skip
        pointers = ["*bf16", "*i32", "*bf16", "*bf16", "*bf16"]
        name = f"decode shared gather prefetch={prefetch}"
        cases[name] = (_nm_decode_kernel, pointers, constants, 2)
    for data in ("*bf16", "*fp32"):  # vector-wise rows past 8 tokens: 4 rows on four warps
        constants = dict(N_KEEP=4, M_GROUP=8, VECTOR=8, BLOCK=1, BITS=4, SHARED=True,
                         WIDE=False, PADDED_B=True, HAS_BIAS=True, ACTIVATION=0,
                         B_INDEX=tl.int32, ACC_DTYPE=tl.float32, BLOCK_M=4, BLOCK_W=32,
                         BLOCK_N=16, PARTIAL=False, KEEP_SUMS=False, PREFETCH=False,
                         STREAM_CACHE="", GATHER_EVICTION="", GATHER_SHARED=False)  # fmt: skip
        pointers = [data, "*i32", data, data, data]
        cases[f"decode vectors 4 rows 4 warps N=16 {data}"] = (
            _nm_decode_kernel, pointers, constants, 4
        )  # fmt: skip
    for block_n, warps in itertools.product((16, 32), (1, 2, 4)):  # fp32 2-row tiles, 9-32
        constants = dict(N_KEEP=1, M_GROUP=8, VECTOR=1, BLOCK=1, BITS=4, SHARED=False,
                         WIDE=False, PADDED_B=True, HAS_BIAS=True, ACTIVATION=0,
                         B_INDEX=tl.int32, ACC_DTYPE=tl.float32, BLOCK_M=2, BLOCK_W=32,
                         BLOCK_N=block_n, PARTIAL=False, KEEP_SUMS=False, PREFETCH=False,
                         STREAM_CACHE="", GATHER_EVICTION="", GATHER_SHARED=False)  # fmt: skip
        pointers = ["*fp32", "*i32", "*fp32", "*fp32", "*fp32"]
        cases[f"decode fp32 2 rows N={block_n} {warps} warps"] = (
            _nm_decode_kernel, pointers, constants, warps
        )  # fmt: skip
    for sums in ("*fp32", "*fp64"):
        constants = dict(HAS_BIAS=True, ACTIVATION=2, BLOCK_M=64, BLOCK_N=16)
        cases[f"sum partials {sums}"] = (
            _sum_partials_kernel,
            [sums, "*bf16", "*bf16"],
            constants,
            4,
        )
    for data, precision in (
        ("*bf16", "ieee"),
        ("*fp16", "ieee"),
        ("*fp32", "ieee"),
        ("*fp32", "tf32"),
    ):
        constants = dict(PRECISION=precision, BLOCK_M=64, BLOCK_N=64, BLOCK_K=64,
                         BLOCK_J=64 if data == "*fp32" else 8, UPCAST=False, WALK=False,
                         STAGES=3, PREFETCH=False)  # fmt: skip
        pointers = ["*i32", "*i32", "*u8", data, data, data]
        name = f"sddmm tiles {data} {precision}"
        cases[name] = (_sddmm_tiles_kernel, pointers, constants, 4)
    for data in ("*bf16", "*fp32"):  # programs walking tiles, K one step, loads pipelined
        for prefetch in (False, True):  # (or prefetched into registers)
            constants = dict(PRECISION="ieee" if data == "*bf16" else "tf32", BLOCK_M=64,
                             BLOCK_N=64, BLOCK_K=64, BLOCK_J=16, UPCAST=False, WALK=True,
                             STAGES=1 if prefetch else 5, PREFETCH=prefetch)  # fmt: skip
            pointers = ["*i32", "*i32", "*u8", data, data, data]
            name = f"sddmm tiles walk {data}" + (" prefetch" if prefetch else "")
            cases[name] = (_sddmm_tiles_kernel, pointers, constants, 4)
    for data in ("*bf16", "*fp32"):  # the row softmax: its single-read branch returns early
        constants = dict(ACC_DTYPE=tl.float32, INDEX=tl.int32, BLOCK=256, BLOCK_H=4)
        forward = dict(constants, TAIL=0, ALIGN=0, EDGE=16, LEVELS=0, WALK_PER=1, PHASED=False,
                       WALK_GROUPS=False)  # fmt: skip
        cases[f"softmax {data}"] = (_softmax_csr_kernel, ["*i32", data, data], forward, 4)
        pointers = ["*i32", data, data, data]
        backward = dict(constants, LEVELS=0)
        cases[f"softmax backward {data}"] = (_softmax_csr_backward_kernel, pointers, backward, 4)
    tail = dict(ACC_DTYPE=tl.float32, INDEX=tl.int64, BLOCK=128, BLOCK_H=2, TAIL=32, ALIGN=0,
                EDGE=16, LEVELS=0, WALK_PER=1, PHASED=False, WALK_GROUPS=False)  # fmt: skip
    cases["softmax tail"] = (_softmax_csr_kernel, ["*i32", "*bf16", "*bf16"], tail, 1)
    for warps in (4, 8):  # causal rows read once on 1024, 2048 or 4096 lanes (levels)
        levels = dict(tail, INDEX=tl.int32, BLOCK=1024, BLOCK_H=1, TAIL=0, LEVELS=2)
        name = f"softmax levels 1024 x 4 {warps} warps"
        cases[name] = (_softmax_csr_kernel, ["*i32", "*bf16", "*bf16"], levels, warps)
    levels = dict(ACC_DTYPE=tl.float32, INDEX=tl.int32, BLOCK=1024, BLOCK_H=1, LEVELS=2)
    cases["softmax backward levels 1024 x 4 8 warps"] = (
        _softmax_csr_backward_kernel,
        ["*i32", "*bf16", "*bf16", "*bf16"],
        levels,
        8,
    )
    for per in (1, 8):  # causal rows walked (the route at 1024 lanes), the max per lane or thread
        walk = dict(tail, INDEX=tl.int32, BLOCK=1024, BLOCK_H=1, TAIL=0, WALK_PER=per)
        name = f"softmax walk 1024 / {per}"
        cases[name] = (_softmax_csr_kernel, ["*i32", "*bf16", "*bf16"], walk, 4)
    walk = dict(tail, INDEX=tl.int32, BLOCK=1024, BLOCK_H=1, TAIL=0, ALIGN=8, EDGE=128,
                WALK_PER=8, WALK_GROUPS=True)  # fmt: skip
    cases["softmax walk groups 1024"] = (_softmax_csr_kernel, ["*i32", "*bf16", "*bf16"], walk, 4)
    for heads in (1, 2):  # (compile with UNALIGNED=stride_vb,stride_ob,nnz)
        phased_walk = dict(walk, PHASED=True, BLOCK_H=heads)
        cases[f"softmax phased walk groups 1024 x {heads}"] = (
            _softmax_csr_kernel,
            ["*i32", "*bf16", "*bf16"],
            phased_walk,
            4,
        )
    grouped = (  # whole 16-byte groups as routed: local:256, strided:128:128, random:0.1
        ("256", tl.int64, 256, 0, 2, 2),
        ("128+32", tl.int32, 128, 32, 4, 2),
        ("512", tl.int32, 512, 0, 2, 2),
    )
    for name, index, block, tail_lanes, heads, warps in grouped:
        edge = max(16, 32 * warps // heads)
        aligned = dict(tail, INDEX=index, BLOCK=block, BLOCK_H=heads, TAIL=tail_lanes, ALIGN=8,
                       EDGE=edge, WALK_GROUPS=True)  # fmt: skip
        cases[f"softmax grouped {name}"] = (
            _softmax_csr_kernel,
            ["*i32", "*bf16", "*bf16"],
            aligned,
            warps,
        )
        phased = dict(aligned, PHASED=True)  # unpadded (heads, nnz): groups from the arrays'
        cases[f"softmax phased {name}"] = (  # starts (compile with UNALIGNED=stride_vb,...)
            _softmax_csr_kernel,
            ["*i32", "*bf16", "*bf16"],
            phased,
            warps,
        )
    cases.update(csr_token_cases())
    for index in ("int32", "int64"):  # the general CSR kernel, padded B, both offset widths
        constants = dict(HAS_BIAS=True, ACTIVATION=1, ACC_DTYPE=tl.float32,
                         INDEX=getattr(tl, index), BLOCK_ROWS=4, BLOCK_NNZ=128, BLOCK_N=16,
                         PADDED_B=True)  # fmt: skip
        pointers = ["*i32", "*i16", "*bf16", "*bf16", "*bf16", "*i32", "*bf16"]
        cases[f"csr spmm {index}"] = (_spmm_csr_kernel, pointers, constants, 2)
    for index in ("int32", "int64"):  # the per-entry SDDMM, both offset widths
        constants = dict(ACC_DTYPE=tl.float32, INDEX=getattr(tl, index), BLOCK_NNZ=32, BLOCK_K=64)
        pointers = ["*i32", "*i16", "*bf16", "*bf16", "*i32", "*bf16"]
        cases[f"sddmm csr {index}"] = (_sddmm_csr_kernel, pointers, constants, 4)
    for data, index in (("fp32", "int32"), ("bf16", "int32"), ("fp32", "int64")):  # blocked
        constants = dict(ACC_DTYPE=tl.float32, INDEX=getattr(tl, index), BLOCK_NNZ=32,
                         BLOCK_K=16, EVEN_K=index == "int32", AHEAD=False, ONE_K=False)  # fmt: skip
        pointers = ["*i32"] * 5 + [f"*{data}"] * 3
        cases[f"sddmm blocked {data} {index}"] = (_sddmm_blocked_kernel, pointers, constants, 2)
    for data, block_k in (("fp32", 16), ("fp32", 64), ("bf16", 64)):  # loads a step ahead
        constants = dict(ACC_DTYPE=tl.float32, INDEX=tl.int32, BLOCK_NNZ=64, BLOCK_K=block_k,
                         EVEN_K=True, AHEAD=True, ONE_K=block_k == 64)  # fmt: skip
        pointers = ["*i32"] * 5 + [f"*{data}"] * 3
        name = f"sddmm blocked ahead {data} k{block_k}"
        cases[name] = (_sddmm_blocked_kernel, pointers, constants, 8)
    for padded, block_n in ((True, 16), (False, 4)):  # the few-token walk, B padded or strided
        hints = (".cg", "evict_last") if padded else ("", "")  # the cache-hint sweep's too
        constants = dict(HAS_BIAS=True, ACTIVATION=2, ACC_DTYPE=tl.float32, INDEX=tl.int32,
                         ROWS=2, BLOCK=64, BLOCK_N=block_n, PADDED_B=padded, GROUP=16,
                         STREAM_CACHE=hints[0], GATHER_EVICTION=hints[1])  # fmt: skip
        pointers = ["*i32", "*i16", "*bf16", "*bf16", "*bf16", "*i32", "*bf16"]
        cases[f"csr few padded={padded}"] = (_spmm_csr_few_kernel, pointers, constants, 2)
    for data, delta in (("*bf16", True), ("*fp32", False)):
        constants = dict(HAS_DELTA=delta, BLOCK=4096, PDL=int(delta))
        types = [data] * 5 + ["i32", "fp32"]  # then the strides, i32
        cases[f"rms norm {data}"] = (_rms_norm_kernel, types, constants, 8)
    for data in ("*bf16", "*fp32"):  # Llama-3-8B's heads
        pdl = int(data == "*bf16")
        constants = dict(HEADS=32, KV_HEADS=8, D=128, BLOCK_D=128, PDL=pdl)
        cases[f"rope cache {data}"] = (_rope_cache_kernel, [data] * 6, constants, 1)
        cases[f"swiglu {data}"] = (_swiglu_kernel, [data] * 2, dict(BLOCK=1024, PDL=pdl), 4)
    for data, pairs in (("*bf16", True), ("*fp64", False)):  # one token, x picked by selects
        constants = dict(N_KEEP=2, M_GROUP=4, LOG_M=2, BITS=2, PAIRS=pairs, VALUE_PAIRS=pairs,
                         OFFSET_BYTES=pairs, HAS_BIAS=True,
                         ACTIVATION=1, ACC_DTYPE=tl.float64 if data == "*fp64" else tl.float32,
                         BLOCK_M=4 if pairs else 1, BLOCK_G=256, WIDE=pairs,
                         STAGES=1, SPLITS=1, FUSED=False, PERMUTE=False,
                         PDL=int(pairs))  # fmt: skip
        pointers = [data, "*i32", data, data, data, "*fp64" if data == "*fp64" else "*fp32",
                    "*i32"]  # fmt: skip
        cases[f"nm select {data}"] = (_nm_select_kernel, pointers, constants, 2)
        split = dict(constants, SPLITS=4, FUSED=pairs)  # fused and with a second kernel
        cases[f"nm select {data} split 4"] = (_nm_select_kernel, pointers, split, 2)
    constants = dict(N_KEEP=1, M_GROUP=8, LOG_M=3, BITS=4, PAIRS=True, VALUE_PAIRS=False,
                     OFFSET_BYTES=True, HAS_BIAS=False, ACTIVATION=0, ACC_DTYPE=tl.float32,
                     BLOCK_M=2, BLOCK_G=128, WIDE=False, STAGES=3, SPLITS=1,
                     FUSED=False, PERMUTE=False, PDL=0)  # fmt: skip
    pointers = ["*bf16", "*i32", "*bf16", "*bf16", "*bf16", "*fp32", "*i32"]
    cases["nm select 1:8 pipelined"] = (_nm_select_kernel, pointers, constants, 1)
    for n, m, bits, data, block_m, block_g, permute in (
        (2, 8, 4, "bf16", 2, 128, False),
        (2, 8, 4, "bf16", 2, 128, True),
        (1, 8, 4, "fp16", 4, 256, True),
        (2, 8, 4, "bf16", 1, 256, True),
    ):  # the routed one-token tiles, x picked by selects and by byte permutes
        constants = dict(N_KEEP=n, M_GROUP=m, LOG_M=m.bit_length() - 1, BITS=bits, PAIRS=True,
                         VALUE_PAIRS=n % 2 == 0, OFFSET_BYTES=8 % (n * bits) == 0,
                         HAS_BIAS=False, ACTIVATION=0, ACC_DTYPE=tl.float32, BLOCK_M=block_m,
                         BLOCK_G=block_g, WIDE=n * bits == 8, STAGES=1, SPLITS=1, FUSED=False,
                         PERMUTE=permute, PDL=1)  # fmt: skip
        pointers = [f"*{data}", "*i32", f"*{data}", f"*{data}", f"*{data}", "*fp32", "*i32"]
        name = f"nm select {n}:{m} {block_m} x {block_g} {data}" + " permuted" * permute
        cases[name] = (_nm_select_kernel, pointers, constants, 1 if block_g == 128 else 2)
    for n, m, bits, permute, splits, block, pairs in (
        (2, 8, 4, True, 4, 1, False),
        (1, 4, 2, True, 2, 1, False),
        (4, 8, 4, False, 1, 1, False),
        (4, 8, 1, False, 4, 4, True),
        (4, 16, 2, False, 1, 4, True),
        (4, 8, 1, False, 1, 4, False),
        (8, 32, 8, False, 1, 1, False),
    ):  # element-wise, then the routed block-wise tiles (v = b = 4) from pairs and 16-bit values,
        # then several-word groups (8:32: two int32 words a group)
        constants = dict(N_KEEP=n, M_GROUP=m, BITS=bits, VECTOR=4 if block > 1 else 1,
                         BLOCK=block, HAS_BIAS=True, ACTIVATION=1, BLOCK_M=64,
                         BLOCK_G=16 if block > 1 else min(32, 256 // m), BLOCK_N=16, SPLITS=splits,
                         FUSED=splits == 4, LOG_N=n.bit_length() - 1, LOG_M=m.bit_length() - 1,
                         PERMUTE=permute, PAIRS=pairs, ASM=True)  # fmt: skip
        values = "*i32" if (permute and n == 2) or pairs else "*bf16"
        units = {8: "*u8", 2: "*u8", 1: "*u8", 16: "*i16", 64: "*i32"}[n // block * bits]
        pointers = [values, units, "*bf16", "*bf16", "*bf16", "*fp32", "*i32"]
        name = f"nm unpack {n}:{m}" + (f" b{block}" + " pairs" * pairs if block > 1 else "")
        cases[name] = (_nm_unpack_kernel, pointers, constants, 4)
    for n, m, splits, fused, k_contiguous in ((2, 8, 4, True, True), (1, 8, 1, False, True),
                                              (2, 4, 2, False, False)):  # fmt: skip
        constants = dict(N_KEEP=n, M_GROUP=m, BITS=m // 2, VECTOR=1, HAS_BIAS=splits != 2,
                         ACTIVATION=0 if splits == 2 else 2, BLOCK_G=32, SPLITS=splits,
                         FUSED=fused, **layouts(64, 32, 16, m, k_contiguous))  # fmt: skip
        pointers = ["*i32" if n == 2 else "*bf16", "*i32", "*bf16", "*bf16", "*bf16", "*fp32",
                    "*i32"]  # fmt: skip
        cases[f"nm wgmma {n}:{m}"] = (_nm_wgmma_kernel, pointers, constants, 4)
    for name, (n, m, tile, splits, natural, dtype, *flags) in {
        "natural B split 4": (2, 4, (1, 8, 1), 4, True, "bf16"),
        "permuted B bias fp16": (2, 4, (2, 4, 2), 1, False, "f16"),
        "2:8 natural B split 4": (2, 8, (1, 8, 1), 4, True, "bf16"),
        "2:8 permuted B bias": (2, 8, (1, 8, 2), 1, False, "bf16"),
        "1:8 natural B split 4": (1, 8, (1, 8, 1), 4, True, "bf16"),
        "wide B stores split 4": (2, 4, (1, 8, 1), 4, 2, "bf16"),
        "wide B stores 16 tokens bias": (2, 4, (1, 8, 2), 1, 2, "bf16"),
        "2:8 wide B stores 16 tokens": (2, 8, (1, 8, 2), 4, 2, "bf16"),
        "1:8 wide B stores bias": (1, 8, (1, 8, 1), 1, 2, "bf16"),
        "1:8 natural B prefetch split 4": (1, 8, (1, 8, 1), 4, 1, "bf16", "prefetch"),
        "2:8 wide B stores prefetch": (2, 8, (1, 8, 1), 1, 2, "bf16", "prefetch"),
        "out by rows split 4": (2, 4, (1, 8, 1), 4, 1, "bf16", "columns"),
        "2:8 out by rows 16 tokens bias": (2, 8, (1, 8, 2), 1, 0, "bf16", "columns"),
        "1:8 out by rows 32 tokens split 4": (1, 8, (2, 8, 4), 4, 0, "bf16", "columns"),
        # the route's forms with the out stored by rows
        "2:8 wide B stores by rows split 4": (2, 8, (1, 8, 1), 4, 2, "bf16", "columns"),
        "2:8 wide B stores 16 tokens by rows": (2, 8, (1, 8, 2), 4, 2, "bf16", "columns"),
        "2:8 by rows 16 tokens split 4": (2, 8, (1, 8, 2), 4, 0, "bf16", "columns"),
        "1:8 natural B by rows split 4 fp16": (1, 8, (1, 8, 1), 4, 1, "f16", "columns"),
        # two m16 tiles a warp: 1:8 at 1-8 tokens, 2:8 and 1:8 at 16 on tall weights
        "1:8 two tiles natural B by rows split 4": (1, 8, (2, 8, 1), 4, 1, "bf16", "columns"),
        "2:8 two tiles 16 tokens by rows split 4": (2, 8, (2, 8, 2), 4, 0, "bf16", "columns"),
        "1:8 two tiles 16 tokens split 4": (1, 8, (2, 8, 2), 4, 0, "bf16"),
        "1:8 two tiles natural B prefetch split 4": (1, 8, (2, 8, 1), 4, 1, "bf16", "prefetch"),
    }.items():
        m_tiles, blocks, n_tiles = tile
        constants = dict(HAS_BIAS=splits == 1, ACTIVATION=2 if splits == 1 else 0,
                         SPLITS=splits, FUSED=splits > 1, N_KEEP=n, M_GROUP=m, M_TILES=m_tiles,
                         KB=blocks, NT=n_tiles, B_NATURAL=natural, PREFETCH="prefetch" in flags,
                         OUT_M_FASTEST="columns" in flags, PDL=int("by rows" in name),
                         ASM=_mma_sp_asm(dtype, m == 4), CONSTRAINTS=MMA_SP_CONSTRAINTS,
                         **launch_layouts(m_tiles, blocks, n_tiles, natural, n, m))  # fmt: skip
        data = "*bf16" if dtype == "bf16" else "*fp16"
        pointers = ["*i32", "*i32", "*i32", "*i32", data, data, "*fp32", "*i32"]
        cases[f"nm mma.sp {name}"] = (_nm_mma_sp_kernel, pointers, constants, 4)
    constants = dict(ROW_PERM=True, COL_PERM=True, MERGE=True, STORE_FINAL=True, BLOCK_M=64,
                     BLOCK_N=64, BLOCK_D=64, BLOCK_DV=64, WORD_BITS=32, PRECISION="tf32",
                     UPCAST=False)  # fmt: skip
    # q, k, v, out (the fp32 scratch), final, lse, then the layout's int32 arrays; 25 ints
    # (sizes and strides) before the float scale
    types = ["*bf16"] * 3 + ["*fp32", "*bf16", "*fp32"] + ["*i32"] * 6 + ["i32"] * 25 + ["fp32"]
    cases["attention forward final bf16"] = (_attn_fwd_kernel, types, constants, 4)
    constants = dict(ROW_PERM=False, COL_PERM=False, ACCUMULATE=True, BLOCK_M=64,
                     BLOCK_N=64, BLOCK_D=64, BLOCK_DV=64, WORD_BITS=32, PRECISION="tf32",
                     UPCAST=False)  # fmt: skip
    # q, k, v, d_out, lse, delta, then dk and dv (dkdv) or dq in bf16 and the earlier passes'
    # fp32 sums (a merged layout's last pass), then the layout's int32 arrays
    inputs = ["*bf16"] * 4 + ["*fp32"] * 2
    cases["attention backward dk dv bf16"] = (
        _attn_bwd_dkdv_kernel, [*inputs, "*bf16", "*bf16", "*fp32", "*fp32", *["*i32"] * 6],
        constants, 4,
    )  # fmt: skip
    cases["attention backward dq bf16"] = (
        _attn_bwd_dq_kernel, [*inputs, "*bf16", "*fp32", *["*i32"] * 6], constants, 4,
    )  # fmt: skip
    for name, (block_n, swizzle, splits, fused, chunk) in {
        "swizzled split 4": (16, True, 4, True, 512),
        "plain 64 tokens bias": (64, False, 1, False, 1024),
        "swizzled 32 tokens partial planes": (32, True, 2, False, 2048),
        "swizzled 128 columns 16 tokens": (16, True, 4, True, 1024),
        "swizzled two ahead 16 tokens": (16, True, 4, True, 512),
        "swizzled 128 rows 16 tokens": (16, True, 4, True, 1024),
        "swizzled 128 rows on 4 warps 16 tokens": (16, True, 4, True, 512),
        "swizzled unscatter 16 tokens split 4": (16, True, 4, True, 2048),
        "swizzled unscatter 90% 16 tokens": (16, True, 1, False, 512),
    }.items():
        block_k = 128 if "128 columns" in name else 64
        block_m = 128 if "128 rows" in name else 64
        warps = 4 if "4 warps" in name else block_m // 16
        constants = dict(HAS_BIAS=splits == 1, ACTIVATION=2 if splits == 1 else 0,
                         SPLITS=splits, FUSED=fused, BLOCK_N=block_n, BM=block_m, BK=block_k,
                         CHUNK=chunk,
                         AHEAD=2 if "two ahead" in name else 1, UNSCATTER="unscatter" in name,
                         DTYPE=tl.bfloat16, **scatter_layouts(swizzle, warps))  # fmt: skip
        # tile offsets, entries, b, bias, out, partials, counters
        pointers = ["*i32", "*i32", "*bf16", "*bf16", "*bf16", "*fp32", "*i32"]
        cases[f"csr scatter {name}"] = (_csr_scatter_kernel, pointers, constants, warps)
    from sparsekernels.kernels import spmm_csr_scatter_slices as slices

    for name, (block_n, splits, fused, chunk, data) in {  # warp-private K slices (not routed)
        "16 tokens split 4": (16, 4, True, 512, "*bf16"),
        "8 tokens bias": (8, 1, False, 128, "*fp16"),
        "32 tokens partial planes": (32, 2, False, 256, "*bf16"),
    }.items():
        constants = dict(HAS_BIAS=splits == 1, ACTIVATION=2 if splits == 1 else 0,
                         SPLITS=splits, FUSED=fused, BLOCK_N=block_n, CHUNK=chunk,
                         BUFFER_SLABS=slices.buffer_slabs(block_n),
                         DTYPE=tl.bfloat16 if data == "*bf16" else tl.float16,
                         **slices.layouts(block_n))  # fmt: skip
        pointers = ["*i32", "*i32", data, data, data, "*fp32", "*i32"]
        cases[f"csr scatter slices {name}"] = (
            slices._csr_scatter_slices_kernel,
            pointers,
            constants,
            slices.WARPS,
        )
    for layout in ("rows", "in place"):  # the vector-wise small tiles into linear's column-major
        # out, B copied row-major or linear's x^T read in place (a launch specializes unit strides)
        unit = "stride_bn" if layout == "rows" else "stride_bk"
        constants = dict(N_KEEP=2, M_GROUP=8, VECTOR=64, BLOCK=1, HAS_BIAS=True, ACTIVATION=0,
                         PRECISION="tf32", UPCAST=False, BLOCK_M=16, BLOCK_S=64, BLOCK_N=32,
                         stride_om=1, **{unit: 1})  # fmt: skip
        pointers = ["*bf16", "*u8", "*bf16", "*bf16", "*bf16"]
        cases[f"nm vector-wise 16 x 32 B {layout}"] = (_spmm_nm_dot_kernel, pointers, constants, 4)
    for partial, blocked in itertools.product((False, True), ("", " blocked")):
        # the condensed-K kernel for 8-row vectors, 2:16; its blocked step (offsets as words)
        constants = dict(N_KEEP=2, M_GROUP=16, VECTOR=8, HAS_BIAS=True, ACTIVATION=2,
                         PRECISION="tf32", PAIRS=4, BLOCK_S=32, BLOCK_N=32, PARTIAL=partial,
                         UPCAST=False, BLOCKED=bool(blocked), WORDS=bool(blocked))  # fmt: skip
        pointers = ["*bf16", "*u8", "*bf16", "*bf16", "*fp32" if partial else "*bf16"]
        cases[f"nm pairs{blocked} partial={partial}"] = (_nm_pairs_kernel, pointers, constants, 4)
    # the route's blocked tiles: 2 pairs x 64 slots on 2 warps; 4:16, 2 pairs x 128 on 4
    for n_keep, pairs, block_s, warps in ((4, 2, 64, 2), (4, 2, 128, 4)):
        constants = dict(N_KEEP=n_keep, M_GROUP=16, VECTOR=8, HAS_BIAS=False, ACTIVATION=0,
                         PRECISION="tf32", PAIRS=pairs, BLOCK_S=block_s, BLOCK_N=32,
                         PARTIAL=False, UPCAST=False, BLOCKED=True, WORDS=True)  # fmt: skip
        pointers = ["*bf16", "*u8", "*bf16", "*bf16", "*bf16"]
        name = f"nm pairs blocked {pairs} x {block_s} {warps} warps"
        cases[name] = (_nm_pairs_kernel, pointers, constants, warps)
    cases.update(ring_cases(), **densify_cases(), **staged_cases())
    return cases


CASE_NAMES = [
    "nm vector-wise 16 x 32 B rows",
    "nm vector-wise 16 x 32 B in place",
    "nm pairs partial=False",
    "nm pairs partial=True",
    "nm pairs blocked partial=False",
    "nm pairs blocked partial=True",
    "nm pairs blocked 2 x 64 2 warps",
    "nm pairs blocked 2 x 128 4 warps",
    *(f"one-hot n={n} partial={p}" for n in (1, 2) for p in (False, True)),
    *(
        f"decode shared={s} partial={p} fp64={w}"
        for s, p, w in itertools.product([False, True], repeat=3)
    ),
    "decode prefetch N=1",
    "decode prefetch N=8",
    "decode cache hints N=1",
    "decode cache hints N=8",
    "decode shared gather prefetch=False",
    "decode shared gather prefetch=True",
    "decode vectors 4 rows 4 warps N=16 *bf16",
    "decode vectors 4 rows 4 warps N=16 *fp32",
    "decode fp32 2 rows N=16 2 warps",
    "decode fp32 2 rows N=32 4 warps",
    "sum partials *fp32",
    "sum partials *fp64",
    *(
        f"sddmm tiles {d} {p}"
        for d, p in (("*bf16", "ieee"), ("*fp16", "ieee"), ("*fp32", "ieee"), ("*fp32", "tf32"))
    ),
    "sddmm tiles walk *bf16",
    "sddmm tiles walk *fp32",
    "sddmm tiles walk *bf16 prefetch",
    "sddmm tiles walk *fp32 prefetch",
    *(f"softmax {b}{d}" for b in ("", "backward ") for d in ("*bf16", "*fp32")),
    "softmax tail",
    "softmax levels 1024 x 4 4 warps",
    "softmax levels 1024 x 4 8 warps",
    "softmax walk 1024 / 1",
    "softmax backward levels 1024 x 4 8 warps",
    "softmax walk 1024 / 8",
    "softmax walk groups 1024",
    "softmax phased walk groups 1024 x 1",
    "softmax phased walk groups 1024 x 2",
    "softmax grouped 256",
    "softmax grouped 128+32",
    "softmax grouped 512",
    "softmax phased 256",
    "softmax phased 128+32",
    "softmax phased 512",
    "csr token *bf16",
    "csr token *fp64",
    "csr token *bf16 lane-major",
    "csr token 1 x 256 asm",
    "csr token 2 x 256 asm",
    "csr token 1 x 256 unmasked",
    "csr token 1 x 256 asm unmasked",
    "csr token 2 x 256 asm unmasked",
    "csr token *fp64 lane-major",
    "csr token lines 1 x 256",
    "csr token lines 2 x 256",
    "csr token lines 1 x 512",
    "csr token lines 1 x 256 asm",
    "csr token lines 2 x 256 asm",
    "csr token lines 2 x 256 asm sequence ahead 2",
    "csr token lines 2 x 256 asm sequence 2 warps",
    "csr token lines 2 x 256 asm sequence 2 warps held in asm",
    "csr token lines 2 x 256 asm sequence 2 warps held in asm in place",
    "csr token lines 2 x 256 asm sequence 2 warps held in asm in place finite",
    "csr token lines 2 x 256 asm sequence 2 warps held in asm 16-slot lines",
    "csr few lines 4 tokens 2 x 256",
    "csr few lines 8 tokens 2 x 128",
    "csr few lines 16 tokens 2 x 64",
    "csr few lines 2 tokens 2 x 256 asm",
    "csr few lines 4 tokens 2 x 256 asm",
    "csr few lines 8 tokens 2 x 128 asm",
    "csr few lines 16 tokens 2 x 64 asm",
    "csr few lines 4 tokens 2 x 256 asm in place",
    "csr few lines 4 tokens 2 x 256 asm in place finite",
    "csr token stream pdl",
    "csr spmm int32",
    "csr spmm int64",
    "csr few padded=True",
    "csr few padded=False",
    "sddmm csr int32",
    "sddmm csr int64",
    "sddmm blocked fp32 int32",
    "sddmm blocked bf16 int32",
    "sddmm blocked fp32 int64",
    "sddmm blocked ahead fp32 k16",
    "sddmm blocked ahead fp32 k64",
    "sddmm blocked ahead bf16 k64",
    "rms norm *bf16",
    "rms norm *fp32",
    "rope cache *bf16",
    "rope cache *fp32",
    "swiglu *bf16",
    "swiglu *fp32",
    "nm select *bf16",
    "nm select *fp64",
    "nm select *bf16 split 4",
    "nm select *fp64 split 4",
    "nm select 1:8 pipelined",
    "nm select 2:8 2 x 128 bf16",
    "nm select 2:8 2 x 128 bf16 permuted",
    "nm select 1:8 4 x 256 fp16 permuted",
    "nm select 2:8 1 x 256 bf16 permuted",
    "nm select ring 1:8 8 x 256 bf16 producer",
    "nm select ring 1:8 16 x 128 bf16",
    "nm select ring 2:8 16 x 128 fp16",
    "nm select ring 1:8 16 x 128 bf16 permuted unmasked",
    "nm select ring 2:8 16 x 128 fp16 permuted unmasked",
    "nm unpack 2:8",
    "nm unpack 1:4",
    "nm unpack 4:8",
    "nm unpack 4:8 b4 pairs",
    "nm unpack 4:16 b4 pairs",
    "nm unpack 4:8 b4",
    "nm unpack 8:32",
    "nm wgmma 2:8",
    "nm wgmma 1:8",
    "nm wgmma 2:4",
    "nm mma.sp natural B split 4",
    "nm mma.sp permuted B bias fp16",
    "nm mma.sp 2:8 natural B split 4",
    "nm mma.sp 2:8 permuted B bias",
    "nm mma.sp 1:8 natural B split 4",
    "nm mma.sp wide B stores split 4",
    "nm mma.sp wide B stores 16 tokens bias",
    "nm mma.sp 2:8 wide B stores 16 tokens",
    "nm mma.sp 1:8 wide B stores bias",
    "nm mma.sp 1:8 natural B prefetch split 4",
    "nm mma.sp 2:8 wide B stores prefetch",
    "nm mma.sp out by rows split 4",
    "nm mma.sp 2:8 out by rows 16 tokens bias",
    "nm mma.sp 1:8 out by rows 32 tokens split 4",
    "nm mma.sp 2:8 wide B stores by rows split 4",
    "nm mma.sp 2:8 wide B stores 16 tokens by rows",
    "nm mma.sp 2:8 by rows 16 tokens split 4",
    "nm mma.sp 1:8 natural B by rows split 4 fp16",
    "nm mma.sp 1:8 two tiles natural B by rows split 4",
    "nm mma.sp 2:8 two tiles 16 tokens by rows split 4",
    "nm mma.sp 1:8 two tiles 16 tokens split 4",
    "nm mma.sp 1:8 two tiles natural B prefetch split 4",
    "attention forward final bf16",
    "attention backward dk dv bf16",
    "attention backward dq bf16",
    "csr scatter swizzled split 4",
    "csr scatter plain 64 tokens bias",
    "csr scatter swizzled 32 tokens partial planes",
    "csr scatter swizzled 128 columns 16 tokens",
    "csr scatter swizzled 128 rows on 4 warps 16 tokens",
    "csr scatter swizzled two ahead 16 tokens",
    "csr scatter slices 16 tokens split 4",
    "csr scatter slices 8 tokens bias",
    "csr scatter slices 32 tokens partial planes",
    "csr scatter swizzled 128 rows 16 tokens",
    "csr scatter swizzled unscatter 16 tokens split 4",
    "csr scatter swizzled unscatter 90% 16 tokens",
    *DENSIFY_CASE_NAMES,
    *STAGED_CASE_NAMES,
]


def _compile_all() -> dict[str, str]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.experimental.gluon._runtime import GluonASTSource, GluonJITFunction

    from _compile_shared import buffer_mismatch

    outcome = {}
    for name, (kernel, pointers, constants, warps) in _cases().items():
        pointers = list(pointers)
        signature = {
            arg: "constexpr" if arg in constants else (pointers.pop(0) if pointers else "i32")
            for arg in kernel.arg_names
        }
        gluon = isinstance(kernel, GluonJITFunction)
        source = (GluonASTSource if gluon else ASTSource)(
            fn=kernel, signature=signature, constexprs=constants
        )
        try:
            kernel = triton.compile(
                source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps}
            )
            outcome[name] = buffer_mismatch(name, constants, kernel.metadata.shared) or "ok"
        except Exception as error:  # noqa: BLE001 - reported per case by the test
            outcome[name] = f"{type(error).__name__}: {error}"[:2000]
    return outcome


@pytest.fixture(scope="module")
def compiled() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    run = subprocess.run(
        [sys.executable, __file__], env=env, capture_output=True, text=True, timeout=900
    )
    if "cannot target sm_90" in run.stdout:
        pytest.skip(run.stdout.strip())
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", CASE_NAMES)
def test_compiles_for_hopper(compiled, case):
    assert compiled.get(case) == "ok", compiled.get(case, f"{case} was not compiled")


if __name__ == "__main__":
    try:
        import triton.backends.nvidia  # noqa: F401 - the backend that carries ptxas
        from triton.compiler import ASTSource  # noqa: F401
    except ImportError as error:
        print(f"this Triton cannot target sm_90: {error}")
        sys.exit(0)
    print(json.dumps(_compile_all()))
