"""Fused block-sparse attention (triton_flash) vs the composed path vs dense causal SDPA (flash).

On CUDA, bf16, batch 1, 8 heads, D = 64. Part 1 sweeps the fused kernel's tile shape, warps and
stages at L = 8192 on the Sparse Transformer's local 128 + strided 128 pattern (forward; forward +
backward for each tile shape). Part 2 times, for L in 2048, 8192, 16384 and the local+strided,
block-diagonal (128) and bench-strided (band 128 + every 128th column) patterns, our fused path
(with the configuration dispatch uses), the composed sddmm + softmax + spmm path and causal
SDPA, forward and forward + backward, with the peak memory each adds; part 3 puts a 1% random
pattern through the fused and composed paths (where the dispatch rule's fill threshold comes
from). Forward times are CUDA-graph medians without gradients (eager timing was host-bound);
forward + backward are eager do_bench medians (L2 flushed between runs). Every fused
configuration is checked against the composed path first. From the repository root on the GPU machine:
    PYTHONPATH=src python3 benchmarks/sweeps/attention_sweep.py
"""

import itertools
import time

import torch
import torch.nn.functional as F
from triton.testing import do_bench, do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels.attention_tuning import (
    BLOCK_ATTENTION_SPLIT_FILL,
    block_attention_config,
)
from sparsekernels.ops import _attention_library

HEADS, D, DTYPE = 8, 64, torch.bfloat16
START = time.time()
torch.manual_seed(0)


def bench(fn, grads=()):
    return do_bench(fn, warmup=10, rep=40, grad_to_none=list(grads), return_mode="median")


def bench_forward(fn):
    """Forward only, without gradients, replayed as a CUDA graph: eager timing of these calls
    is host-bound (the fourth session's figures were flat across tiles and lengths). Falls back
    to eager timing (marked *) where a path cannot be captured."""
    with torch.no_grad():
        try:
            return do_bench_cudagraph(fn, rep=40, return_mode="median"), ""
        except Exception:
            torch.cuda.synchronize()
            return bench(fn), "*"


def peak_mib(fn) -> float:
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def pattern(kind: str, L: int) -> sk.CSRMatrix:
    if kind == "local_strided":
        return sk.nn.SparseAttention.local_strided(L, 128, 128, device="cuda").pattern
    if kind == "block":
        return sk.nn.SparseAttention.block(L, 128, device="cuda").pattern
    i = torch.arange(L, device="cuda")
    d = i[:, None] - i[None, :]
    if kind == "bench_strided":
        keep = (d >= 0) & ((d < 128) | (i[None, :] % 128 == 127))
    elif kind == "random1%":
        keep = (torch.rand(L, L, device="cuda") < 0.01) | (d == 0)
    else:
        raise ValueError(kind)
    return sk.CSRMatrix.from_dense(keep.to(DTYPE), mask=keep)


def inputs(L):
    q, k, v, g = (torch.randn(1, HEADS, L, D, device="cuda", dtype=DTYPE) for _ in range(4))
    return [t.requires_grad_() for t in (q, k, v)], g


def fused(P, config):
    layout = P.pattern.block_layout(config[0], config[1], BLOCK_ATTENTION_SPLIT_FILL)
    tensors = layout.tensors()

    def run(q, k, v):
        return _attention_library.block_attention(q, k, v, tensors, D**-0.5, config)[0]

    return run, layout


def composed(P):
    return lambda q, k, v: sk.sparse_attention(q, k, v, P, backend="triton")


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def measure(fn, qkv, g):
    fwd, _ = bench_forward(lambda: fn(*qkv))
    both = bench(lambda: fn(*qkv).backward(g), qkv)
    with torch.no_grad():
        mem_fwd = peak_mib(lambda: fn(*qkv))
    mem_both = peak_mib(lambda: fn(*qkv).backward(g))
    for t in qkv:
        t.grad = None
    return fwd, both, mem_fwd, mem_both


def rel_err(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


# --------------------------------------------------------------------------- part 1: configs
print(f"# {torch.cuda.get_device_name()}  heads={HEADS} D={D} {DTYPE}", flush=True)
L = 8192
P = pattern("local_strided", L)
qkv, g = inputs(L)
with torch.no_grad():
    want = composed(P)(*qkv)
print(f"\n## part 1: L={L} local_strided 128/128, nnz/row={P.nnz / L:.0f}")
results = []
for (bm, bn), warps, stages in itertools.product([(64, 64), (128, 64), (128, 128)], [4, 8], [2, 3]):
    config = [bm, bn, warps, stages, warps, stages]
    t0 = time.time()
    try:
        run, layout = fused(P, config)
        with torch.no_grad():
            err = rel_err(run(*qkv), want)
        t, _ = bench_forward(lambda run=run: run(*qkv))
    except Exception as error:  # e.g. out of shared memory: report and go on
        print(f"  {bm}x{bn} w{warps} s{stages}: FAILED {type(error).__name__}: {error}"[:200])
        continue
    if err > 2e-2:
        print(f"  {bm}x{bn} w{warps} s{stages}: WRONG rel err {err:.2e}", flush=True)
        continue
    results.append((t, bm, bn, warps, stages))
    print(
        f"  {bm:3d}x{bn:<3d} w{warps} s{stages}: fwd {t * 1e3:7.1f} us  tiles {layout.tiles} "
        f"passes {len(layout.components)} fill {layout.fill:.2f} err {err:.1e} "
        f"(layout+compile {time.time() - t0:.1f}s)",
        flush=True,
    )
results.sort()
print("  best forward:", [(round(t * 1e3, 1), *c) for t, *c in results[:3]])
for bm, bn, warps in [(64, 64, 4), (128, 64, 8), (128, 128, 8)]:
    config = [bm, bn, 4, 3, warps, 2]
    try:
        run, _ = fused(P, config)
        t = bench(lambda run=run: run(*qkv).backward(g), qkv)
    except Exception as error:
        print(f"  {bm}x{bn} bwd w{warps}: FAILED {type(error).__name__}: {error}"[:200])
        continue
    print(f"  {bm:3d}x{bn:<3d} bwd w{warps} s2: fwd+bwd {t * 1e3:7.1f} us", flush=True)

# --------------------------------------------------------------------------- part 2: vs peers
print("\n## part 2: dispatch's config vs composed vs dense causal SDPA (us, MiB added)")
table = []
default = block_attention_config(D, on_cpu=False).as_list()
for L, kind in itertools.product([2048, 8192, 16384], ["local_strided", "block", "bench_strided"]):
    P = pattern(kind, L)
    qkv, g = inputs(L)
    run, layout = fused(P, default)
    with torch.no_grad():
        err = rel_err(run(*qkv), composed(P)(*qkv))
    row = {"L": L, "kind": kind, "err": err, "tiles": layout.tiles, "fill": layout.fill}
    for name, fn in [("fused", run), ("composed", composed(P)), ("sdpa", sdpa)]:
        row[name] = measure(fn, qkv, g)
    table.append(row)
    f, c, s = row["fused"], row["composed"], row["sdpa"]
    print(
        f"  L={L:5d} {kind:13s} fused fwd {f[0] * 1e3:7.1f} fwd+bwd {f[1] * 1e3:7.1f} | composed "
        f"{c[0] * 1e3:7.1f} {c[1] * 1e3:7.1f} | sdpa {s[0] * 1e3:7.1f} {s[1] * 1e3:7.1f} | MiB "
        f"fused {f[3]:.0f} composed {c[3]:.0f} sdpa {s[3]:.0f} | err {err:.1e}",
        flush=True,
    )

# --------------------------------------------------------------------------- part 3: fill rule
print("\n## part 3: random 1% (every tile visited): fused vs composed, forward (us)")
for L in [2048, 8192]:
    P = pattern("random1%", L)
    qkv, g = inputs(L)
    run, layout = fused(P, default)
    t_f, t_c = bench_forward(lambda: run(*qkv))[0], bench_forward(lambda: composed(P)(*qkv))[0]
    print(f"  L={L}: fill {layout.fill:.3f} fused {t_f * 1e3:.1f} composed {t_c * 1e3:.1f}")

print("\n## summary: speedup of fused over dense causal SDPA (fwd, fwd+bwd) and memory ratio")
print(f"{'L':>6} {'pattern':13} {'fwd x':>6} {'f+b x':>6} {'vs comp':>8} {'mem x':>6}")
for row in table:
    f, c, s = row["fused"], row["composed"], row["sdpa"]
    print(
        f"{row['L']:6d} {row['kind']:13} {s[0] / f[0]:6.2f} {s[1] / f[1]:6.2f} "
        f"{c[1] / f[1]:8.2f} {c[3] / max(f[3], 1e-9):6.1f}"
    )
print(f"# total {time.time() - START:.0f}s")
