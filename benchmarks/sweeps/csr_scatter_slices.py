"""A first timing of the warp-private K slices (kernels/spmm_csr_scatter_slices.py, not
routed) against the scatter kernel (spmm_csr_scatter.py) at 16 tokens: 14336 x 4096 and
4096 x 14336 at 70%, 14336 x 4096 at 90%, the route's split (4, 8 on 4096 rows) and twice it,
4-16 entries a thread; do_bench medians (warm L2), each output against float64 first (its
error over the product's bound; NaN count of the poisoned output). Dense cuBLAS beside.
    PYTHONPATH=src:tests python3 benchmarks/sweeps/csr_scatter_slices.py
"""

import torch
from triton.testing import do_bench

from _helpers import random_csr, spmm_bound
from sparsekernels.kernels.spmm_csr_scatter import spmm_csr_scatter, tiled_entries
from sparsekernels.kernels.spmm_csr_scatter_slices import (
    spmm_csr_scatter_slices,
    tiled_entries_slices,
)

gen = torch.Generator().manual_seed(0)
for rows, k, density in ((14336, 4096, 0.3), (4096, 14336, 0.3), (14336, 4096, 0.1)):
    W = random_csr(rows, k, density, gen, torch.bfloat16, "cuda", empty_rows=False)
    x = torch.randn(16, k, device="cuda", dtype=torch.bfloat16)
    b = x.t()
    want = W.to_dense().double() @ b.double()
    bound = spmm_bound(W.to_dense(), b)
    to, te = tiled_entries(W.row_offsets, W.column_indices, W.values, k)
    so, se = tiled_entries_slices(W.row_offsets, W.column_indices, W.values, k)
    out = torch.empty(rows, 16, device="cuda", dtype=torch.bfloat16)
    split = 4 if rows > k else 8
    ept_cur = 16 if density > 0.2 else 4
    cur = lambda: spmm_csr_scatter(
        tile_offsets=to,
        entries=te,
        b=b,
        bias=None,
        out=out,  # noqa
        activation="none",
        split=split,
        entries_per_thread=ept_cur,
    )
    cur()
    err_cur = ((out.double() - want).abs() / bound).max().item()
    t_cur = do_bench(cur, warmup=50, rep=300)
    dense_w = W.to_dense()
    t_dense = do_bench(lambda: dense_w @ b, warmup=50, rep=300)
    print(
        f"{rows}x{k} {1 - density:.0%} 16 tok: entries {te.numel()} vs slices {se.numel()} "
        f"(+{se.numel() / te.numel() - 1:.1%}); current {t_cur * 1e3:.1f} us (err {err_cur:.2e}); "
        f"dense {t_dense * 1e3:.1f} us",
        flush=True,
    )
    for ept in (4, 8, 16):
        for sp in (split, split * 2):
            out2 = torch.full_like(out, float("nan"))
            run = lambda: spmm_csr_scatter_slices(
                slab_offsets=so,
                entries=se,
                b=b,
                bias=None,  # noqa
                out=out2,
                activation="none",
                split=sp,
                entries_per_thread=ept,
            )
            run()
            err = ((out2.double() - want).abs() / bound).max().item()
            t = do_bench(run, warmup=50, rep=300)
            print(
                f"   slices ept {ept} split {sp}: {t * 1e3:.1f} us (err {err:.2e}, "
                f"nan {int(out2.isnan().sum())})",
                flush=True,
            )
