"""The CPU densify (ops/_densify_cpu.py): in whole-row steps on large weights, or from the
positions the sddmm route keeps; exact against the pattern's own to_dense."""

import pytest
import torch

import sparsekernels as sk
from _helpers import randn, random_csr
from sparsekernels.ops import _dense, _densify_cpu


@pytest.mark.parametrize("chunk", [1, 5, 23, 10**9])
def test_steps_of_whole_rows_match_the_pattern(chunk, gen, monkeypatch):
    """Steps smaller than a row (1, 5), spanning rows (23) and one step; empty rows, a last
    row holding entries, and batched values."""
    monkeypatch.setattr(_densify_cpu, "CHUNK", chunk)
    A = random_csr(37, 29, 0.3, gen)  # (random_csr leaves some rows empty)
    assert (A.row_offsets.diff() == 0).any()
    got = _densify_cpu.densify_csr(A.row_offsets, A.column_indices, A.values, 37, 29)
    assert torch.equal(got, A.to_dense())
    batched = randn(3, A.nnz, gen=gen)
    got = _densify_cpu.densify_csr(A.row_offsets, A.column_indices, batched, 37, 29)
    want = torch.stack([A.with_values(v).to_dense() for v in batched])
    assert torch.equal(got, want)


def test_single_row_and_no_entries(gen):
    A = random_csr(1, 300, 0.5, gen)
    assert torch.equal(
        _dense.densify_csr(A.row_offsets, A.column_indices, A.values, 300), A.to_dense()
    )
    empty = sk.CSRMatrix.from_dense(torch.zeros(4, 6, dtype=torch.float64))
    got = _dense.densify_csr(empty.row_offsets, empty.column_indices, empty.values, 6)
    assert torch.equal(got, torch.zeros(4, 6, dtype=torch.float64))


def test_positions_kept_by_the_sddmm_route_are_used_while_valid(gen, monkeypatch):
    A = random_csr(12, 10, 0.4, gen)
    ro, ci = A.row_offsets, A.column_indices
    kept = _dense.flat_positions(ro, ci, 10)  # (what the sddmm dense route caches)
    seen = []
    real = _densify_cpu.densify_csr
    monkeypatch.setattr(_densify_cpu, "densify_csr", lambda *a: seen.append(a[-1]) or real(*a))
    assert torch.equal(_dense.densify_csr(ro, ci, A.values, 10), A.to_dense())
    assert seen[-1] is kept
    # another column count (a different product) does not take them
    assert torch.equal(_dense.densify_csr(ro, ci, A.values, 11)[:, :10], A.to_dense())
    assert seen[-1] is None
