"""Host time of our own stack for one eager linear call without a gradient, with the kernel
launch stubbed out (it returns its output): checks, dispatch, configuration, layouts, caches.
What Triton's launcher and the GPU add is not here. Interpreter mode only picks the Triton
backend on the CPU; nothing runs in it. Min over 9 batches of 2000 calls, in us a call.
    TRITON_INTERPRET=1 PYTHONPATH=src python host_stack.py
"""

import timeit

import torch

import sparsekernels as sk
from sparsekernels.kernels import spmm_csr, spmm_nm_decode
from sparsekernels.prune.masks import nm_mask

spmm_nm_decode.spmm_nm_decode = lambda **kw: kw["out"]
spmm_csr.spmm_csr = lambda **kw: kw["out"]
torch.manual_seed(0)
w = torch.randn(256, 512, dtype=torch.float16)
nm = sk.NMMatrix.from_dense(w, 2, 8, mask=nm_mask(w.float(), 2, 8))
csr = sk.CSRMatrix.from_dense(w * (torch.rand_like(w) > 0.7))
x = torch.randn(1, 1, 512, dtype=torch.float16)
calls = {
    "linear, 2:8 N:M (decode route)": lambda: sk.linear(x, nm, backend="triton"),
    "linear, 70% CSR": lambda: sk.linear(x, csr, backend="triton"),
    "torch F.linear (computes, for scale)": lambda: torch.nn.functional.linear(x, w),
}
with torch.no_grad():
    for name, fn in calls.items():
        best = min(timeit.repeat(fn, number=2000, repeat=9)) / 2000 * 1e6
        print(f"{name:<40} {best:6.1f} us")
