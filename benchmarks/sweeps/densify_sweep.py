"""Densify for the dense fallback (issues 3 and 4): torch indexing (the old path) against the
Triton kernels (kernels/densify.py) in a few configurations and, for CSR, the densify through
shared memory (kernels/densify_shared.py, "shared"), then the dense backend end to end.

For 4096 x 4096, 14336 x 4096 and 4096 x 14336 bf16 weights (SHAPES, TOKENS: environment),
CSR at 50/70/90% (CSR=0: none) and N:M 2:4, 2:8, 1:8 (PATTERNS) with v = 1 and v = 64
(VECTORS): CUDA-graph medians of each densify (checked bitwise against torch indexing
first), GB/s over the bytes it must move (the dense output once, the format read once) next
to a plain memset of the output, and sk.linear(x, W, backend="dense") at 2048 tokens with the
old and the new densify against F.linear on the dense weight. A table closes the output.
Run from the repository root on the GPU machine: `PYTHONPATH=src python3 FILE` (~60-90 s);
    CSR=0 PATTERNS=4:16,8:16,16:32,8:32 VECTORS=1 TOKENS=24 ... (the large-n select form)
"""

import os
import time

import torch
import torch.nn.functional as F
from triton.testing import do_bench, do_bench_cudagraph

import sparsekernels as sk
from sparsekernels import reference
from sparsekernels.formats.nm import nm_columns
from sparsekernels.kernels import densify as kernel
from sparsekernels.kernels import densify_tuning
from sparsekernels.kernels.densify_shared import densify_csr_shared
from sparsekernels.kernels.densify_tuning import (
    DensifyCsrConfig,
    DensifyCsrSharedConfig,
    DensifyNmConfig,
    densify_csr_config,
    densify_csr_shared_config,
    densify_nm_config,
)
from sparsekernels.ops import _dense as dense_module
from sparsekernels.ops import _launch_plans

_launch_plans.ENABLED = False  # a recorded densify would replay whatever the switch says
densify_tuning.SHARED_LEAST_ELEMENTS = 0  # the shared densify on small weights too (measured)

torch.manual_seed(0)
START = time.time()
ALTERNATIVES_UNTIL_S = 150  # past this, only the default and shared configurations are timed
TOKENS = int(os.environ.get("TOKENS", "2048"))
SHAPES = [tuple(map(int, s.split("x"))) for s in os.environ.get(
    "SHAPES", "4096x4096,14336x4096,4096x14336").split(",")]  # fmt: skip
DTYPE = torch.bfloat16
# N:M patterns and vectors (the dense backend's 17-64-token cases densify 4:16, 8:16, 16:32
# and 8:32 too: the select form loads a group's n offsets and values in turn), CSR=0 skips CSR
PATTERNS = [
    tuple(map(int, p.split(":"))) for p in os.environ.get("PATTERNS", "2:4,2:8,1:8").split(",")
]
VECTORS = [int(v) for v in os.environ.get("VECTORS", "1,64").split(",")]
CSR = os.environ.get("CSR", "1") == "1"


def bench_us(fn):
    try:
        return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3
    except Exception:  # not capturable: eager medians
        return do_bench(fn, warmup=5, rep=20, return_mode="median") * 1e3


# ------------------------------------------------------------------ the old path (torch indexing)
def old_csr(A, cols):
    rows = reference.row_indices(A.row_offsets, A.nnz)
    weight = A.values.new_zeros(A.shape)
    weight[rows, cols.long()] = A.values
    return weight


def old_nm(W):
    weight = W.values.new_zeros(W.shape)
    columns = nm_columns(W.indices, W.shape[0], W.n, W.m, W.vector, W.block)
    return weight.scatter_(1, columns, W.values)


# ------------------------------------------------------------------ the kernels
def csr_configs(A):
    default = densify_csr_config(*A.shape, A.nnz)
    return {
        "default": default,
        "r2-k1024-w8": DensifyCsrConfig(True, 2, 1024, 512, 8),
        "zeros+scatter": DensifyCsrConfig(
            False, default.block_rows, default.block_k, default.block_nnz, default.num_warps
        ),
        **shared_configs(A),
    }


def shared_configs(A):
    """The shared densify's configuration, one row a program, and as many rows as 64 KB hold
    (at most 16), 1024 entries a step over a program's rows."""
    shared = densify_csr_shared_config(*A.shape, A.nnz, 2)
    if shared is None:  # a row past 64 KB
        return {}
    most = min(16, 65536 // (shared.row_span * 2))
    return {
        "shared": shared,
        "shared-1row": DensifyCsrSharedConfig(1, shared.row_span, 1024, 4),
        f"shared-{most}rows": DensifyCsrSharedConfig(most, shared.row_span, 1024 // most, 4),
    }


def run_csr(A, cols, config):
    if isinstance(config, DensifyCsrSharedConfig):
        out = torch.empty(A.shape, dtype=A.dtype, device="cuda")
        densify_csr_shared(
            row_offsets=A.row_offsets,
            column_indices=cols,
            values=A.values,
            out=out.view(1, *A.shape),
            rows_per_program=config.rows_per_program,
            row_span=config.row_span,
            block_nnz=config.block_nnz,
            num_warps=config.num_warps,
        )
        return out
    make = torch.empty if config.write_zeros else torch.zeros
    out = make(A.shape, dtype=A.dtype, device="cuda")
    kernel.densify_csr(
        row_offsets=A.row_offsets,
        column_indices=cols,
        values=A.values,
        out=out.view(1, *A.shape),
        write_zeros=config.write_zeros,
        block_rows=config.block_rows,
        block_k=config.block_k,
        block_nnz=config.block_nnz,
        num_warps=config.num_warps,
    )
    return out


def nm_configs(W):
    return {
        "default": densify_nm_config(*W.shape, W.n, W.m, W.block),
        "select-m2-k1024-w4": DensifyNmConfig(True, True, 2, 1024, 16, 2048, 4),
        "select-m4-k512-w4": DensifyNmConfig(True, True, 4, 512, 16, 2048, 4),
        "scatter-m4-s256": DensifyNmConfig(False, True, 4, 1024, 256, 2048, 4),
    }


def run_nm(W, config):
    zeroed = config.write_zeros or config.select
    out = (torch.empty if zeroed else torch.zeros)(W.shape, dtype=W.dtype, device="cuda")
    return kernel.densify_nm(
        values=W.values,
        indices=W.indices,
        out=out,
        n=W.n,
        m=W.m,
        vector=W.vector,
        block=W.block,
        write_zeros=config.write_zeros,
        select=config.select,
        block_m=config.block_m,
        block_k=config.block_k,
        block_s=config.block_s,
        program_cols=config.program_cols,
        num_warps=config.num_warps,
    )


# ------------------------------------------------------------------ one case
def best_config(name, run, configs, want, nbytes):
    results = {}
    for label, config in configs.items():
        if label not in ("default", "shared", "shared-1row") and (
            time.time() - START > ALTERNATIVES_UNTIL_S
        ):
            continue
        try:
            if not torch.equal(run(config), want):
                print(f"  {name} {label}: MISMATCH against torch indexing", flush=True)
                continue
            results[label] = bench_us(lambda config=config: run(config))
        except Exception as error:  # a configuration that does not compile here
            print(f"  {name} {label}: failed {str(error)[:80]}", flush=True)
    line = "  ".join(f"{k} {v:.1f}us ({nbytes / v / 1e3:.0f} GB/s)" for k, v in results.items())
    print(f"  {name}: {line}", flush=True)
    return results


def dense_backend_us(W, x, triton_densify, shared=True):
    original = dense_module.triton_densifies
    dense_module.triton_densifies = lambda values: triton_densify
    densify_tuning.SHARED_ROWS = shared
    densify_tuning.densify_csr_shared_config.cache_clear()
    try:
        return bench_us(lambda: sk.linear(x, W, backend="dense"))
    finally:
        dense_module.triton_densifies = original
        densify_tuning.SHARED_ROWS = True
        densify_tuning.densify_csr_shared_config.cache_clear()


rows_out = []
for M, K in SHAPES:
    w = torch.randn(M, K, device="cuda", dtype=DTYPE)
    x = torch.randn(TOKENS, K, device="cuda", dtype=DTYPE)
    out_bytes = M * K * w.element_size()
    memset = bench_us(lambda: torch.empty_like(w).zero_())
    gemm = bench_us(lambda: F.linear(x, w))
    print(
        f"{M}x{K} bf16: memset {memset:.1f}us ({out_bytes / memset / 1e3:.0f} GB/s), "
        f"F.linear at {TOKENS} tokens {gemm:.1f}us",
        flush=True,
    )
    cases = []
    for sparsity in (0.5, 0.7, 0.9) if CSR else ():
        A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), sparsity))
        cols = A.pattern.column_indices_int16()
        cases.append((f"csr {int(sparsity * 100)}%", A, cols))
    for vector in VECTORS:
        for n, m in PATTERNS:
            mask = sk.prune.nm_mask(w.float(), n, m, vector=vector)
            W = sk.NMMatrix.from_dense(w, n, m, vector, mask=mask)
            cases.append((f"{n}:{m} v={vector}", W, None))
    for name, W, cols in cases:
        if cols is not None:  # CSR: int16 columns, bf16 values, int32 offsets
            nbytes = out_bytes + W.nnz * 4 + (M + 1) * W.row_offsets.element_size()
            want = old_csr(W, cols)
            old = bench_us(lambda W=W, cols=cols: old_csr(W, cols))
            results = best_config(
                name, lambda c, W=W, cols=cols: run_csr(W, cols, c), csr_configs(W), want, nbytes
            )
        else:  # N:M: bf16 values, uint8 offsets
            nbytes = out_bytes + W.values.numel() * 2 + W.indices.numel()
            want = old_nm(W)
            old = bench_us(lambda W=W: old_nm(W))
            results = best_config(name, lambda c, W=W: run_nm(W, c), nm_configs(W), want, nbytes)
        best = min(results, key=results.get) if results else None
        e2e_old = dense_backend_us(W, x, True, shared=False)  # the Triton densify
        e2e_new = dense_backend_us(W, x, True)
        rows_out.append(
            (f"{M}x{K}", name, old, best, results.get(best, float("nan")), results.get("default"))
            + (nbytes, memset, gemm, e2e_old, e2e_new)
        )
        print(
            f"  {name}: old {old:.1f}us, best {best} {results.get(best, float('nan')):.1f}us; "
            f"dense backend Triton densify {e2e_old:.1f}us, now {e2e_new:.1f}us vs F.linear "
            f"{gemm:.1f}us "
            f"[{time.time() - START:.0f}s]",
            flush=True,
        )

print(
    f"\nGPU {torch.cuda.get_device_name()}, bf16, {TOKENS} tokens; times in us (CUDA-graph medians)"
)
header = (
    f"{'shape':11} {'pattern':12} {'old':>7} {'new':>7} {'best config':16} {'GB/s':>6} "
    f"{'%memset':>7} {'x old':>6} {'default':>7} | {'F.linear':>8} {'e2e tri':>8} {'e2e now':>8} {'dense/new':>9}"
)
print(header)
print("-" * len(header))
for shape, name, old, best, t, default, nbytes, memset, gemm, e2e_old, e2e_new in rows_out:
    print(
        f"{shape:11} {name:12} {old:7.1f} {t:7.1f} {str(best):16} {nbytes / t / 1e3:6.0f} "
        f"{100 * memset / t:6.0f}% {old / t:6.1f} {default or float('nan'):7.1f} | {gemm:8.1f} {e2e_old:8.1f} {e2e_new:8.1f} "
        f"{gemm / e2e_new:8.2f}x"
    )
print(f"total {time.time() - START:.0f}s")
