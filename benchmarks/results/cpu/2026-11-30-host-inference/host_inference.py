"""Host time of eager inference calls (no gradient) with the Triton launches stubbed out: what
our Python costs around a kernel, on the CPU box (TRITON_INTERPRET=1 lets the triton backend be
chosen on CPU tensors; the stubs return the output unwritten). Small shapes, so the tensor work
the path does (allocations, views) stays small. The fastest of 9 rounds of 1000 calls, us a call
(the box is shared: noise only adds time).
    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/results/cpu/2026-11-30-host-inference/host_inference.py
"""

import time

import torch

import sparsekernels as sk
from sparsekernels.kernels import sddmm_csr, softmax_csr, spmm_csr, spmm_nm_decode

spmm_nm_decode.spmm_nm_decode = lambda **kw: kw["out"]
spmm_csr.spmm_csr = lambda **kw: kw["out"]
sddmm_csr.sddmm_csr = lambda **kw: kw["out"]
softmax_csr.sparse_softmax = lambda **kw: kw["out"]

torch.manual_seed(0)
w = torch.randn(256, 1024)
W_nm = sk.NMMatrix.from_dense(w, 2, 8, mask=sk.prune.nm_mask(w, 2, 8))
W_csr = sk.CSRMatrix.from_dense(w * (torch.rand_like(w) < 0.3))
x = torch.randn(1, 1024)
P = sk.CSRMatrix.from_dense(torch.randn(256, 256) * (torch.rand(256, 256) < 0.1))
X, Y = torch.randn(256, 64), torch.randn(256, 64)
S = sk.sddmm(X, Y, P)
CALLS = {
    "linear 2:8, 1 token": lambda: sk.linear(x, W_nm, backend="triton"),
    "linear CSR 70%, 1 token": lambda: sk.linear(x, W_csr, backend="triton"),
    "sddmm 10%, K = 64": lambda: sk.sddmm(X, Y, P, backend="triton"),
    "sparse_softmax": lambda: sk.sparse_softmax(S, 0.125, backend="triton"),
    "torch.empty (a floor)": lambda: torch.empty(256),
}
print(f"torch {torch.__version__}")
for name, fn in CALLS.items():
    for _ in range(200):
        fn()
    rounds = []
    for _ in range(9):
        start = time.perf_counter()
        for _ in range(1000):
            fn()
        rounds.append((time.perf_counter() - start) / 1000 * 1e6)
    print(f"{name:<26} {min(rounds):7.1f} us")
