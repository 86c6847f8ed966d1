"""A linear's bias gradient: the column sums of the output's gradient G (tokens, C), bf16.

The Sparse Transformer's training step at L = 8192 (results/nvidia-h200/2026-12-02/at-879df73/
transformer_profile.txt) spent 266 us in 14 reduce kernels, dense and sparse alike: its
linears' bias sums, ~230 MB of G read at ~0.9 TB/s where the H200 copies at ~4. Ways to sum:

  torch    G.sum(0), torch's reduction (as nn.Linear's backward; spmm's g.sum(-1) on the
           transposed view is the same read)
  mv       torch.mv(G.t(), ones): cuBLAS's GEMV (fp32 accumulation, bf16 out)
  mv1      the same with the ones made each call (a fill kernel more)
  gemm     ones(1, tokens) @ G: a one-row GEMM
  fp32     G.sum(0, dtype=float32).to(bf16): torch's reduction accumulating and storing fp32
  clone    G.clone(): a copy of the same bytes (twice the traffic of a sum: the bound to read)

Each checked against the float64 sums (max relative error printed). CUDA-graph medians in us;
GB/s on G's bytes. From the repository root on the GPU machine (under a minute):

    PYTHONPATH=src python3 benchmarks/sweeps/bias_grad.py
"""

import torch
from triton.testing import do_bench_cudagraph

TOKENS = [8192, 16384]
COLUMNS = [256, 512, 1536, 2048]  # the model's head, proj / fc2, qkv, fc1


def us(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def main():
    torch.manual_seed(0)
    rows = []
    for tokens in TOKENS:
        for cols in COLUMNS:
            g = torch.randn(tokens, cols, device="cuda", dtype=torch.bfloat16)
            ones_col = torch.ones(tokens, device="cuda", dtype=torch.bfloat16)
            ones_row = ones_col[None, :]
            want = g.double().sum(0)
            forms = {
                "torch": lambda g=g: g.sum(0),
                "mv": lambda g=g: torch.mv(g.t(), ones_col),
                "mv1": lambda g=g: torch.mv(g.t(), g.new_ones(g.shape[0])),
                "gemm": lambda g=g: (ones_row @ g)[0],
                "fp32": lambda g=g: g.sum(0, dtype=torch.float32).to(torch.bfloat16),
            }
            row = {"tokens": tokens, "cols": cols}
            for name, fn in forms.items():
                err = ((fn().double() - want).abs().max() / want.abs().max()).item()
                row[name] = us(fn)
                row[name + " err"] = err
            row["clone"] = us(lambda g=g: g.clone())
            row["bytes"] = g.nbytes
            rows.append(row)
    names = ["torch", "mv", "mv1", "gemm", "fp32", "clone"]
    print(torch.cuda.get_device_name(), torch.__version__)
    print(f"{'tokens':>6} {'cols':>5} " + " ".join(f"{n:>14}" for n in names) + "   max rel err")
    for r in rows:
        cells = " ".join(f"{r[n]:7.1f} {r['bytes'] / r[n] / 1e3:5.0f}GB" for n in names)
        errs = " ".join(f"{n}={r[n + ' err']:.1e}" for n in names[:-1])
        print(f"{r['tokens']:>6} {r['cols']:>5} {cells}   {errs}")


if __name__ == "__main__":
    main()
