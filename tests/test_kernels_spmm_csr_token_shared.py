"""The CSR one-token walk with x gathered from shared memory (kernels/spmm_csr_token_shared.py,
Gluon: the H200 only; bad arguments are refused on any machine before a launch).

Float64 references on fresh random data, outputs poisoned with NaN. The shapes put rows'
starts inside groups, rows shorter than a group and across many steps, groups of rows cut
short by the matrix's end (rows not a multiple of the warps), empty rows, one row, K = 1 and
K = 32768 (the widest int16 columns allow), rows owning the arrays' last partial group, and
programs walking many groups (one program a multiprocessor); x's elements no stored entry
uses hold NaN, which must not spread (column 0's among them: masked entries read it).
"""

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, randn, random_csr, spmm_bound


def _shared(A, x, bias=None, activation="none", rows=4, block=256, programs_per_sm=4):
    from sparsekernels.kernels.spmm_csr_token_shared import spmm_csr_token_shared

    out = torch.full((A.shape[0], 3), float("nan"), dtype=x.dtype, device=x.device)[:, 1]
    spmm_csr_token_shared(
        row_offsets=A.row_offsets,
        column_indices=A.pattern.column_indices_int16(),
        values=A.values,
        x=x,
        bias=bias,
        row_order=A.row_order,
        out=out,
        activation=activation,
        rows=rows,
        block=block,
        programs_per_sm=programs_per_sm,
    )
    return out


def _x_with_nan_where_unused(A, gen, dtype, device):
    x = randn(A.shape[1], gen=gen, dtype=dtype, device=device)
    used = torch.zeros(A.shape[1], dtype=torch.bool, device=device)
    used[A.column_indices.long()] = True
    x[~used] = float("nan")
    return x


CASES = [(37, 300, 0.25), (5, 700, 0.5), (9, 40, 0.1), (1, 77, 0.4), (20, 1, 0.5),
         (301, 4096, 0.3), (13, 32768, 0.05)]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows, block, programs_per_sm", [(4, 256, 4), (1, 256, 1), (2, 512, 2),
                                                          (8, 256, 1)])  # fmt: skip
def test_matches_float64(dtype, rows, block, programs_per_sm, gen):
    for M, K, density in CASES:
        A = random_csr(M, K, density, gen, dtype, "cuda")
        x = _x_with_nan_where_unused(A, gen, dtype, "cuda")
        want = A.to_dense().double() @ torch.nan_to_num(x.double())
        bound = spmm_bound(A.to_dense(), torch.nan_to_num(x)[:, None])[:, 0]
        got = _shared(A, x, rows=rows, block=block, programs_per_sm=programs_per_sm)
        assert_close(got, want, bound, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_bias_and_activation(activation, gen):
    A = random_csr(333, 1000, 0.2, gen, torch.bfloat16, "cuda")
    x = randn(1000, gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(333, gen=gen, dtype=torch.bfloat16, device="cuda")
    pre = A.to_dense().double() @ x.double() + bias.double()
    want = torch.relu(pre) if activation == "relu" else torch.nn.functional.gelu(pre)
    bound = spmm_bound(A.to_dense(), x[:, None])[:, 0] + bias.double().abs()
    assert_close(_shared(A, x, bias, activation), want, bound, torch.bfloat16)


@pytest.mark.gpu
def test_rows_of_mixed_lengths_and_empty_rows(gen):
    """Long rows (several steps), short and empty ones in one group of warps, the group's
    steps set by its first (longest) row."""
    dense = randn(12, 2000, gen=gen)
    mask = torch.zeros(12, 2000, dtype=torch.bool)
    for row, length in enumerate([1500, 0, 3, 700, 0, 0, 33, 1, 2000, 17, 0, 640]):
        mask[row, torch.randperm(2000, generator=gen)[:length]] = True
    A = sk.CSRMatrix.from_dense((dense * mask).to(torch.bfloat16), mask=mask).to(device="cuda")
    x = randn(2000, gen=gen, dtype=torch.bfloat16, device="cuda")
    want = A.to_dense().double() @ x.double()
    bound = spmm_bound(A.to_dense(), x[:, None])[:, 0]
    for rows in (1, 2, 4, 8):
        assert_close(_shared(A, x, rows=rows, programs_per_sm=1), want, bound, torch.bfloat16)


def test_bad_arguments_are_refused(gen):
    from sparsekernels.kernels.spmm_csr_token_shared import spmm_csr_token_shared

    A = random_csr(8, 64, 0.3, gen, torch.bfloat16)
    x = randn(64, gen=gen, dtype=torch.bfloat16)
    out = torch.empty(8, dtype=torch.bfloat16)
    good = dict(row_offsets=A.row_offsets, column_indices=A.pattern.column_indices_int16(),
                values=A.values, x=x, bias=None, row_order=A.row_order, out=out,
                activation="none")  # fmt: skip
    bad = [
        ({"column_indices": A.column_indices}, TypeError, "column_indices must be int16"),
        ({"x": x.float()}, TypeError, "values and x must share"),
        ({"x": randn(64, 2, gen=gen, dtype=torch.bfloat16)[:, 0]}, ValueError, "x must be"),
        ({"rows": 3}, ValueError, "rows must be 1, 2, 4 or 8"),
        ({"block": 128}, ValueError, "block 256 or 512"),
    ]
    for change, error, message in bad:
        with pytest.raises(error, match=message):
            spmm_csr_token_shared(**{**good, **change})
