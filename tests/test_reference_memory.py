"""The reference's temporaries stay under its budget (reference._CHUNK_ELEMENTS) whatever the
batch: its chunks were sized by entries and width alone, so a batch of 16 (attention's batch x
heads) made temporaries 16 times the budget (CPU sparse_attention at L = 4096: 1 GiB each).
Results are checked against float64 with the budget small, so the chunks are many."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import sparsekernels as sk
from _helpers import random_csr
from sparsekernels import reference

BUDGET = 4096


class LargestTensor(TorchDispatchMode):
    """Records the most elements of any tensor an op makes."""

    def __init__(self) -> None:
        super().__init__()
        self.most = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.most = max(self.most, t.numel())
        return out


@pytest.fixture
def small_budget(monkeypatch):
    monkeypatch.setattr(reference, "_CHUNK_ELEMENTS", BUDGET)


@pytest.mark.parametrize("batch", [1, 16])
def test_sddmm_temporaries_stay_under_the_budget(batch, small_budget, gen):
    P = random_csr(50, 40, 0.4, gen)
    X = torch.randn(batch, 50, 8, generator=gen, dtype=torch.float64)
    Y = torch.randn(batch, 40, 8, generator=gen, dtype=torch.float64)
    with LargestTensor() as seen:
        got = sk.sddmm(X, Y, P, backend="reference").values
    rows, cols = P.pattern.row_indices(), P.column_indices.long()
    torch.testing.assert_close(got, (X @ Y.transpose(1, 2))[:, rows, cols])
    outputs = max(got.numel(), X.numel(), Y.numel())  # (the inputs' fp32 copies, the output)
    assert seen.most <= max(BUDGET, outputs)


@pytest.mark.parametrize("batch", [1, 16])
@pytest.mark.parametrize("transpose", [False, True])
def test_spmm_temporaries_stay_under_the_budget(batch, transpose, small_budget, gen):
    A = random_csr(60, 50, 0.4, gen)
    A = A.with_values(torch.randn(batch, A.nnz, generator=gen, dtype=torch.float64))
    B = torch.randn(batch, 60 if transpose else 50, 12, generator=gen, dtype=torch.float64)
    with LargestTensor() as seen:
        got = reference.spmm_csr(A.row_offsets, A.column_indices, A.values, B,
                                 transpose=transpose, out_rows=50)  # fmt: skip
    dense = A.to_dense()
    want = (dense.transpose(1, 2) if transpose else dense) @ B
    torch.testing.assert_close(got, want)
    assert seen.most <= max(BUDGET, got.numel(), B.numel(), A.values.numel())
