"""Scale (marker gpu + slow, run on the H200): int64 offsets end to end at nnz >= 2^31.

A matrix of 2^16 + 64 rows x 2^16 columns keeping every other column has 2^31 + 2^21 stored
entries, so its row offsets must be int64 and the last rows' entries lie past entry 2^31.
Values are constant within a row, so the float64 answer is cheap: row value x sum(x[even]).
About 13 GB of GPU memory.
"""

import pytest
import torch

import sparsekernels as sk

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_spmm_with_more_than_2_31_entries():
    rows, cols = 2**16 + 64, 2**16
    per_row = cols // 2
    device = "cuda"
    offsets = torch.arange(rows + 1, device=device, dtype=torch.int64) * per_row
    columns = torch.arange(0, cols, 2, device=device, dtype=torch.int32).repeat(rows)
    row_values = torch.randn(rows, device=device, dtype=torch.float64) + 3.0  # never zero
    values = row_values.to(torch.bfloat16).repeat_interleave(per_row)
    A = sk.CSRMatrix(offsets, columns, values, (rows, cols), check=False)
    assert A.nnz == 2**31 + 2**21 and A.row_offsets.dtype == torch.int64
    x = torch.randn(cols, 1, device=device, dtype=torch.float64).to(torch.bfloat16)
    got = sk.spmm(A, x, backend="triton")
    want = row_values.to(torch.bfloat16).double() * x.double()[0::2].sum()
    err = (got.double()[:, 0] - want).abs()
    bound = row_values.abs() * x.double()[0::2].abs().sum()
    assert bool((err <= 1e-2 * bound).all()), f"max error {err.max():.3g}"
    assert bool((got[-8:, 0].double() - want[-8:]).abs().le(1e-2 * bound[-8:]).all())  # past 2^31
