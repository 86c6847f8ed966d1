"""One CSR one-token case for the sweeps that time spmm_csr_token directly: a magnitude-pruned
bf16 LLM weight on the GPU, its int16 columns, a fresh x and the float64 product."""

import torch

import sparsekernels as sk


def csr_case(M: int, K: int, sparsity: float) -> dict:
    """w (dense), A (CSR), cols (int16), x (K,) and want = A x in float64."""
    torch.manual_seed(0)
    w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), sparsity))
    x = torch.randn(K, device="cuda", dtype=torch.bfloat16)
    return {
        "w": w,
        "A": A,
        "cols": A.pattern.column_indices_int16(),
        "x": x,
        "want": A.to_dense().double() @ x.double(),
    }
