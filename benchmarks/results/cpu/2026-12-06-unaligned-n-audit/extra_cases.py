"""Extra sm_90 compiles not in tests/test_compile_hopper.py: the vector-wise kernel's routed
tiles (usual 64 x 256, few-token 16 x 128 x 32, 32 x 128 x 16), the general CSR kernel with an
unpadded row-major B (N > 16), and the prototype B_COLS fixes (proto_*.py), each under the
aligned / N / N+row-stride variants. Reuses sm90_compile_stats.stats.

    cd /work/main && PYTHONPATH=...:src:tests:scratch/unaligned_audit /tmp/t36/bin/python \
        scratch/unaligned_audit/extra_cases.py > scratch/unaligned_audit/extra_cases.txt
"""
import os
import re
import sys
from pathlib import Path

ROOT = Path("/work/main")
sys.path[:0] = [str(ROOT / "benchmarks/sweeps"), str(ROOT / "scratch/unaligned_audit")]
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import sm90_compile_stats as sweep  # noqa: E402
from audit import sass_stats  # noqa: E402
from proto_spmm_nm import _spmm_nm_dot_bcols_kernel  # noqa: E402
from proto_unpack import _nm_unpack_bcols_kernel  # noqa: E402
from sparsekernels.kernels.spmm_csr import _spmm_csr_kernel  # noqa: E402
from sparsekernels.kernels.spmm_nm import _spmm_nm_dot_kernel  # noqa: E402
from sparsekernels.kernels.spmm_nm_unpack import _nm_unpack_kernel  # noqa: E402

DUMP = ROOT / "scratch/unaligned_audit/raw/extra"


def cases():
    out = {}
    vw = dict(N_KEEP=2, M_GROUP=8, VECTOR=64, BLOCK=1, HAS_BIAS=True, ACTIVATION=0,
              PRECISION="tf32", UPCAST=False, stride_bn=1)
    ptr = ["*bf16", "*u8", "*bf16", "*bf16", "*bf16"]
    for tag, (bm, bs, bn, warps, stages) in {
        "usual 64x32x256 8w": (64, 32, 256, 8, 3),
        "usual 64x32x64 8w (33-63 tok)": (64, 32, 64, 8, 3),
        "few 16x128x32 (17-32 tok)": (16, 128, 32, 4, 3),
        "few 32x128x16 (tall, <=16)": (32, 128, 16, 4, 3),
        "small 16x64x32": (16, 64, 32, 4, 2),
    }.items():
        c = dict(vw, BLOCK_M=bm, BLOCK_S=bs, BLOCK_N=bn)
        out[f"vector-wise {tag}"] = (_spmm_nm_dot_kernel, ptr, c, warps, stages, "stride_bk")
        out[f"vector-wise+B_COLS {tag}"] = (_spmm_nm_dot_bcols_kernel, ptr, c, warps, stages,
                                           "stride_bk")
    c = dict(HAS_BIAS=True, ACTIVATION=1, ACC_DTYPE=tl.float32, INDEX=tl.int32, BLOCK_ROWS=4,
             BLOCK_NNZ=32, BLOCK_N=32, PADDED_B=False, stride_bn=1)
    out["csr spmm unpadded 4x32x32 (17-255 tok)"] = (
        _spmm_csr_kernel, ["*i32", "*i16", "*bf16", "*bf16", "*bf16", "*i32", "*bf16"], c, 4, 3,
        "stride_bk")
    for n, m, bits, block, pairs in ((2, 8, 4, 1, False), (4, 8, 1, 4, False)):
        c = dict(N_KEEP=n, M_GROUP=m, BITS=bits, VECTOR=4 if block > 1 else 1, BLOCK=block,
                 HAS_BIAS=True, ACTIVATION=1, BLOCK_M=64, BLOCK_G=16 if block > 1 else 32,
                 BLOCK_N=16, SPLITS=1, FUSED=False, LOG_N=n.bit_length() - 1,
                 LOG_M=m.bit_length() - 1, PERMUTE=block == 1, PAIRS=pairs, ASM=True,
                 stride_bn=1)
        units = {8: "*u8", 4: "*u8", 1: "*u8"}.get(n // block * bits, "*u8")
        p = ["*i32" if (block == 1 and n == 2) else "*bf16", units, "*bf16", "*bf16", "*bf16",
             "*fp32", "*i32"]
        out[f"unpack rows {n}:{m} b{block}"] = (_nm_unpack_kernel, p, c, 4, 3, "stride_bk")
        out[f"unpack+B_COLS rows {n}:{m} b{block}"] = (_nm_unpack_bcols_kernel, p, c, 4, 3,
                                                      "stride_bk")
    return out


def compile_one(kernel, pointers, constants, warps, stages, unaligned):
    pointers = list(pointers)
    sig = {a: "constexpr" if a in constants else (pointers.pop(0) if pointers else "i32")
           for a in kernel.arg_names}
    names = list(kernel.arg_names)
    attrs = {(names.index(a),): [["tt.divisibility", 16]]
             for a in names if sig[a] != "constexpr" and a not in unaligned}
    src = ASTSource(fn=kernel, signature=sig, constexprs=constants, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": warps, "num_stages": stages})


def main():
    wanted = sys.argv[1:]
    for name, (kernel, ptr, c, warps, stages, row) in cases().items():
        if wanted and not any(w in name for w in wanted):
            continue
        for variant, un in {"aligned": [], "N": ["N"], "N+stride": ["N", row]}.items():
            compiled = compile_one(kernel, ptr, c, warps, stages, un)
            dump = DUMP / re.sub(r"\W+", "_", f"{name} {variant}")
            dump.parent.mkdir(parents=True, exist_ok=True)
            line = sweep.stats(compiled.asm["ptx"], dump)
            s = sass_stats(dump.with_suffix(".sass").read_text())
            regs = re.search(r"registers (\S+) spill (\d+)", line)
            print(f"{name}\t{variant}\t{regs.group(1)}\t{regs.group(2)}\t{s['instructions']}\t"
                  f"{s['loop']}\t{s['loads']}", flush=True)


if __name__ == "__main__":
    main()
