"""Shared test helpers: random sparse operands and error bounds that catch one bad row."""

from __future__ import annotations

import torch

import sparsekernels as sk

ALL_DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]

# Relative error allowed against a float64 reference, measured against the bound
# sum_k |a_ik| |b_kj| of each element: a few units of the output dtype's rounding.
_REL = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def rel_tol(dtype: torch.dtype) -> float:
    return _REL[dtype]


def randn(*shape, gen, dtype=torch.float64, device="cpu") -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)


def random_mask(rows, cols, density, gen, empty_rows=True) -> torch.Tensor:
    """A random pattern with the given density; with empty_rows, some rows are left empty."""
    mask = torch.rand(rows, cols, generator=gen) < density
    if empty_rows and rows > 2:
        mask[:: max(2, rows // 3)] = False
    return mask


def random_csr(rows, cols, density, gen, dtype=torch.float64, device="cpu", empty_rows=True):
    mask = random_mask(rows, cols, density, gen, empty_rows)
    dense = randn(rows, cols, gen=gen) * mask
    dense[mask & (dense == 0)] = 1.0  # stored values are never zero
    return sk.CSRMatrix.from_dense(dense.to(dtype), mask=mask).to(device=device)


def random_nm(rows, cols, n, m, gen, vector=1, block=1, dtype=torch.float64, device="cpu"):
    w = randn(rows, cols, gen=gen)
    mask = sk.prune.nm_mask(w, n, m, vector=vector, block=block)
    return sk.NMMatrix.from_dense(w.to(dtype), n, m, vector, block, mask=mask).to(device=device)


def assert_close(got: torch.Tensor, want: torch.Tensor, bound: torch.Tensor, dtype: torch.dtype):
    """|got - want| <= tol * bound elementwise (plus a hair for exact zeros); NaN must match."""
    assert got.shape == want.shape, (got.shape, want.shape)
    got, want, bound = got.double().cpu(), want.double().cpu(), bound.double().cpu()
    assert torch.equal(torch.isnan(got), torch.isnan(want)), "NaN positions differ"
    finite = ~torch.isnan(want)
    err = (got - want).abs()[finite]
    allowed = (rel_tol(dtype) * bound + 1e-300)[finite]
    bad = err > allowed
    if bad.any():
        idx = bad.nonzero()[0].item()
        raise AssertionError(
            f"{int(bad.sum())} of {bad.numel()} elements off; first: got {got[finite][idx]}, "
            f"want {want[finite][idx]}, allowed {allowed[idx]:.3g}"
        )


def spmm_bound(A_dense: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """sum_k |a_ik| |b_kj| (with a floor of the largest |output| scale for tiny sums)."""
    bound = A_dense.double().abs() @ B.double().abs()
    return bound + 1e-6 * bound.max().clamp_min(1e-30)
