"""The N:M decode kernel writing a row-major (M, N) output against the column-major one linear
asks for (ops/_layout.spmm_out: x^T's order, so (W x^T)^T needs no copy), by token count.

route_kernels.txt (at-b10f6fc) found the route's decode kernel at 8 tokens taking 43.2 us on
4096 x 14336 2:8 where the same configuration into a row-major output took 34.8
(nm_decode_keep_sums.txt). Element-wise 2:8 and 1:8, bf16, the route's configuration and B;
CUDA-graph medians in us, each output checked against float64 first. "unspecialized": the
column-major output with the kernel compiled without Triton's specialization of a unit
stride (do_not_specialize), in case knowing out's rows are contiguous drags the whole
kernel's layout toward M (the gathered B rows then load as scalars).
    PYTHONPATH=src python3 benchmarks/sweeps/nm_decode_out_order.py
"""

import torch
import triton
from _nm_cases import nm_case
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import nm_decode_tuning, tuning
from sparsekernels.kernels import spmm_nm_decode as decode_module
from sparsekernels.kernels.spmm_nm_decode import spmm_nm_decode
from sparsekernels.ops._layout import padded_rows

SPECIALIZED = decode_module._nm_decode_kernel
UNSPECIALIZED = triton.jit(SPECIALIZED.fn, do_not_specialize=["stride_om", "stride_on"])


def main():
    print(f"{'case':<24} {'row-major':>10} {'column-major':>13} {'col-major + copy':>17}"
          f" {'unspecialized':>14}")  # fmt: skip
    for (M, K), (n, m), tokens in [
        (shape, pattern, t)
        for shape in ((4096, 14336), (14336, 4096))
        for pattern in ((2, 8), (1, 8))
        for t in (2, 4, 8, 16)
    ]:
        case = nm_case(M, K, n, m, tokens)
        W, want, B, bits, words = (case[k] for k in ("W", "want", "B", "bits", "words"))
        config = nm_decode_tuning.spmm_nm_decode_config(tokens, 1, M, W.values.shape[1], n, m)
        block_w = max(1, config.block_slots // (32 // bits))
        steps = -(-W.values.shape[1] // (block_w * (32 // bits)))
        split = nm_decode_tuning.spmm_nm_decode_split(
            M, config.block_m, steps, config.split_programs
        )
        timed = []
        for out in (torch.empty(M, tokens, device="cuda", dtype=torch.bfloat16),
                    torch.empty(tokens, M, device="cuda", dtype=torch.bfloat16).t()):  # fmt: skip

            def run(out=out):
                spmm_nm_decode(
                    values=W.values, words=words, bits=bits, b=B, bias=None, out=out, n=n, m=m,
                    vector=1, block=1, activation="none", block_m=config.block_m,
                    block_w=block_w, num_warps=config.num_warps,
                    num_stages=config.num_stages, split=split,
                )  # fmt: skip

            out.fill_(float("nan"))
            run()
            err = ((out.double() - want).norm() / want.norm()).item()
            timed.append(do_bench_cudagraph(run, rep=20) * 1e3 if err < 1e-2 else float("nan"))
        row_major = torch.empty(M, tokens, device="cuda", dtype=torch.bfloat16)
        copied = do_bench_cudagraph(lambda: (run(row_major), row_major.t().contiguous()), rep=20)
        decode_module._nm_decode_kernel = UNSPECIALIZED
        column_major = torch.full((tokens, M), float("nan"), device="cuda", dtype=torch.bfloat16)
        run(column_major.t())
        err = ((column_major.t().double() - want).norm() / want.norm()).item()
        free = do_bench_cudagraph(lambda: run(column_major.t()), rep=20) * 1e3
        decode_module._nm_decode_kernel = SPECIALIZED
        free = free if err < 1e-2 else float("nan")
        case = f"{M}x{K} {n}:{m} x{tokens}"
        print(f"{case:<24} {timed[0]:10.1f} {timed[1]:13.1f} {copied * 1e3:17.1f} {free:14.1f}",
              flush=True)  # fmt: skip


def csr_few():
    """The same three outputs for the CSR few-token kernel (linear now copies its row-major
    output into the column-major order, ~2 us)."""
    from sparsekernels.kernels import spmm_csr_few as few

    specialized = few._spmm_csr_few_kernel
    unspecialized = triton.jit(specialized.fn, do_not_specialize=["stride_om", "stride_on"])
    print(f"\nCSR few-token kernel\n{'case':<24} {'row-major':>10} {'column-major':>13}"
          f" {'unspecialized':>14}")  # fmt: skip
    for (M, K), tokens in [((4096, 14336), 8), ((4096, 14336), 16), ((14336, 4096), 8)]:
        torch.manual_seed(0)
        w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), 0.7))
        x = torch.randn(tokens, K, device="cuda", dtype=torch.bfloat16)
        want = A.to_dense().double() @ x.t().double()
        B, config = padded_rows(x.t()), tuning.spmm_csr_few_config(tokens)
        cols = A.pattern.column_indices_int16()
        timed = []
        for kernel, out in [
            (specialized, torch.empty(M, tokens, device="cuda", dtype=torch.bfloat16)),
            (specialized, torch.empty(tokens, M, device="cuda", dtype=torch.bfloat16).t()),
            (unspecialized, torch.empty(tokens, M, device="cuda", dtype=torch.bfloat16).t()),
        ]:

            def run(out=out):
                few.spmm_csr_few(
                    row_offsets=A.row_offsets, column_indices=cols, values=A.values, b=B,
                    bias=None, row_order=A.row_order, out=out, activation="none",
                    rows_per_program=config.rows_per_program, block=config.block,
                    num_warps=config.num_warps,
                )  # fmt: skip

            few._spmm_csr_few_kernel = kernel
            out.fill_(float("nan"))
            run()
            err = ((out.double() - want).norm() / want.norm()).item()
            timed.append(do_bench_cudagraph(run, rep=20) * 1e3 if err < 1e-2 else float("nan"))
            few._spmm_csr_few_kernel = specialized
        case = f"{M}x{K} 70% x{tokens}"
        print(f"{case:<24} {timed[0]:10.1f} {timed[1]:13.1f} {timed[2]:14.1f}", flush=True)


def configs_into_column_major():
    """Other tiles for the decode kernel into linear's column-major output at 5-12 tokens
    (rows a program, slots a step, warps): does a program owning more rows, so each of its
    output columns is one longer run, lose the store's cost?"""
    print("\nN:M decode, column-major output, configurations (rows x slots / warps)")
    configs = [(2, 256, 1), (1, 256, 1), (4, 256, 1), (4, 256, 2), (8, 128, 2), (16, 64, 4)]
    print(f"{'case':<24} " + " ".join(f"{f'{r}x{s}/{w}w':>10}" for r, s, w in configs))
    for (M, K), (n, m), tokens in [((4096, 14336), (2, 8), 8), ((4096, 14336), (1, 8), 8),
                                   ((14336, 4096), (2, 8), 8), ((4096, 14336), (2, 8), 12)]:  # fmt: skip
        case = nm_case(M, K, n, m, tokens)
        W, want, B, bits, words = (case[k] for k in ("W", "want", "B", "bits", "words"))
        out = torch.empty(tokens, M, device="cuda", dtype=torch.bfloat16).t()
        cells = []
        for block_m, slots, warps in configs:
            block_w = max(1, slots // (32 // bits))
            steps = -(-W.values.shape[1] // (block_w * (32 // bits)))

            def run(block_m=block_m, block_w=block_w, warps=warps, steps=steps):
                spmm_nm_decode(
                    values=W.values, words=words, bits=bits, b=B, bias=None, out=out, n=n, m=m,
                    vector=1, block=1, activation="none", block_m=block_m, block_w=block_w,
                    num_warps=warps, num_stages=2,
                    split=nm_decode_tuning.spmm_nm_decode_split(M, block_m, steps),
                )  # fmt: skip

            out.fill_(float("nan"))
            run()
            err = ((out.double() - want).norm() / want.norm()).item()
            cells.append(do_bench_cudagraph(run, rep=20) * 1e3 if err < 1e-2 else float("nan"))
        case = f"{M}x{K} {n}:{m} x{tokens}"
        print(f"{case:<24} " + " ".join(f"{c:10.1f}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
    csr_few()
    configs_into_column_major()
