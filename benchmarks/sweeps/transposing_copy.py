"""fp16 2:4 through linear: the transposing copy of cuSPARSELt's row-major product.

cuSPARSELt's search faults on an fp16 product written transposed, so fp16 comes back (rows,
tokens) row-major and linear copies it into (tokens, rows); on 4096 x 4096 at 2048 tokens that
cost ~54 us of cslt's 120 (2026-12-05/at-ba67939/semistructured_fp16.txt), where moving its
32 MB at copy bandwidth takes ~8. Two tables:

  copy    y (rows, tokens) row-major into (tokens, rows):
          torch    y.t().contiguous(), linear's copy
          tiledRxC kernels/transpose.py's row_major_copy(src=y.t()) in R x C tiles
          clone    y.clone(), a straight copy of the same bytes (the bandwidth it could reach)
  linear  sk.linear(x, W, backend="cusparselt") in fp16 with tuning.CUSPARSELT_TILED_TRANSPOSE
          off (torch's copy) and on (the tiled copy inside the op), and dense cuBLAS; then
          bf16 with the search off (as while capturing: no searched algorithm, so the
          product is made row-major and copied, by torch or by the tiled copy)

Every result is checked against torch's copy (exact) or a float32 product. CUDA-graph medians
in microseconds. From the repository root on the GPU machine (under a minute):

    PYTHONPATH=src python3 benchmarks/sweeps/transposing_copy.py
"""

import time

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import tuning
from sparsekernels.kernels.transpose import row_major_copy

COPY_SHAPES = [(4096, 2048), (14336, 2048), (4096, 8192), (28672, 2048), (4096, 1024)]
TILES = [(64, 64), (32, 128), (128, 32), (64, 128), (128, 64)]
LINEAR_SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192)]
TOKENS = [1024, 2048, 8192]


def us(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def copy_rows(dtype) -> list[str]:
    lines = []
    for rows, tokens in COPY_SHAPES:
        y = torch.randn(rows, tokens, device="cuda", dtype=dtype)
        want = y.t().contiguous()
        fns = {"torch": lambda: y.t().contiguous(), "clone": lambda: y.clone()}
        for r, c in TILES:
            fns[f"tiled{r}x{c}"] = lambda r=r, c=c: row_major_copy(src=y.t(), block_r=r, block_c=c)
        cells = []
        for name, fn in fns.items():
            if name != "clone" and not torch.equal(fn(), want):
                cells.append(f"{name} BAD")
                continue
            t = us(fn)
            cells.append(f"{name} {t:.1f} ({2 * y.numel() * y.element_size() / t / 1e6:.2f} TB/s)")
        line = f"{rows}x{tokens} {dtype}: " + ", ".join(cells)
        print(line, flush=True)
        lines.append(line)
    return lines


def linear_rows(dtype, search: bool) -> list[str]:
    lines = []
    tuning.CUSPARSELT_SEARCH = search
    for M, K in LINEAR_SHAPES:
        w = torch.randn(M, K, device="cuda", dtype=dtype)
        W = sk.NMMatrix.from_dense(w, 2, 4, mask=sk.prune.nm_mask(w.float(), 2, 4))
        Wd = W.to_dense()
        for N in TOKENS:
            x = torch.randn(N, K, device="cuda", dtype=dtype)
            want = x.float() @ Wd.float().t()
            cells = {"dense": us(lambda: torch.matmul(x, Wd.t()))}
            for tiled in (False, True):
                tuning.CUSPARSELT_TILED_TRANSPOSE = tiled
                try:
                    fn = lambda: sk.linear(x, W, backend="cusparselt")
                    out = fn()  # (the search, outside the capture)
                    err = ((out.float() - want).norm() / want.norm()).item()
                    name = "tiled" if tiled else "torch_copy"
                    cells[name] = us(fn) if err < 1e-2 and out.is_contiguous() else float("nan")
                finally:
                    tuning.CUSPARSELT_TILED_TRANSPOSE = False
            line = (
                f"{M}x{K} N={N} {dtype} search {search}: dense {cells['dense']:.1f}, cslt+torch copy "
                f"{cells['torch_copy']:.1f}, cslt+tiled copy {cells['tiled']:.1f}; dense/tiled "
                f"{cells['dense'] / cells['tiled']:.2f}x, dense/torch-copy "
                f"{cells['dense'] / cells['torch_copy']:.2f}x"
            )
            print(line, flush=True)
            lines.append(line)
    tuning.CUSPARSELT_SEARCH = True
    return lines


def main() -> None:
    start = time.perf_counter()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    table = copy_rows(torch.float16) + copy_rows(torch.bfloat16)
    table += linear_rows(torch.float16, True) + linear_rows(torch.bfloat16, False)
    print("\n" + "\n".join(table))
    print(f"# {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
