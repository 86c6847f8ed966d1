"""The CSR TMA-ring kernel on the line form (formats/_line_layout.py: rows in whole lines of 64
slots, a base column a line and a byte an entry), on the H200 against float64 references with
poisoned outputs and x NaN where no entry reads it. Shapes: rows of many steps and of one line,
empty rows, lines cut by the 255-column span, a single row, K = 1."""

import itertools

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, randn, random_csr, spmm_bound
from sparsekernels.formats._line_layout import build
from sparsekernels.kernels.spmm_csr_ring import row_splits, spmm_csr_ring, supports

pytestmark = pytest.mark.gpu


def _run(A, x, programs, bias=None, activation="none", **options):
    layout = build(A.row_offsets, A.column_indices, A.shape[1], most_slots=1000.0)
    values, slots = layout.pack(A.values), layout.row_slots
    assert supports(slots, layout.offsets, values, x, layout.bases)
    out = torch.full((A.shape[0], 3), float("nan"), dtype=x.dtype, device=x.device)[:, 1]
    spmm_csr_ring(
        row_offsets=slots, column_indices=layout.offsets, values=values, x=x, bias=bias,
        out=out, activation=activation, splits=row_splits(slots, programs),
        bases=layout.bases, **options,
    )  # fmt: skip
    return out


def _x_nan_where_unused(A, gen, dtype):
    x = randn(A.shape[1], gen=gen, dtype=dtype, device="cuda")
    used = torch.zeros(A.shape[1], dtype=torch.bool, device="cuda")
    used[A.column_indices.long()] = True
    x[~used] = float("nan")
    return x


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "lines, warps, vector, stages", [(16, 4, 8, 4), (8, 1, 8, 3), (32, 8, 8, 2), (8, 4, 2, 4)]
)
@pytest.mark.parametrize("programs", [1, 3, 40, 1000])
@pytest.mark.parametrize("prefetch", [False, True])
def test_matches_float64(dtype, lines, warps, vector, stages, programs, prefetch, gen):
    for M, K, density in [
        (37, 300, 0.25),
        (5, 3000, 0.5),
        (300, 64, 0.1),
        (1, 777, 0.4),
        (400, 1, 0.5),
        (20, 5000, 0.02),
    ]:  # fmt: skip  (0.02: span cuts)
        A = random_csr(M, K, density, gen, dtype, "cuda")
        x = _x_nan_where_unused(A, gen, dtype)
        want = A.to_dense().double() @ torch.nan_to_num(x.double())
        bound = spmm_bound(A.to_dense(), torch.nan_to_num(x)[:, None])[:, 0]
        got = _run(A, x, programs, lines=lines, warps=warps, vector=vector, stages=stages,
                   prefetch=prefetch)  # fmt: skip
        assert_close(got, want, bound, dtype)


@pytest.mark.parametrize("activation, pdl", [("none", 0), ("relu", 1), ("gelu", 2)])
def test_bias_activation_wide_k_and_pdl(activation, pdl, gen):
    """K past int16 (the bases are int32), bias and activation fused, PDL's levels."""
    A = random_csr(50, 40000, 0.3, gen, torch.bfloat16, "cuda")
    x = randn(40000, gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(50, gen=gen, dtype=torch.bfloat16, device="cuda")
    want = sk.spmm(A.to(dtype=torch.float64), x.double()[:, None], bias.double(), activation,
                   backend="reference")[:, 0]  # fmt: skip
    bound = spmm_bound(A.to_dense(), x[:, None])[:, 0] + bias.double().abs()
    for prefetch in (False, True):
        got = _run(A, x, 7, bias, activation, pdl=pdl, prefetch=prefetch)
        assert_close(got, want, bound, torch.bfloat16)


def test_llm_shape_with_empty_rows(gen):
    """A 70% magnitude-pruned 4096 x 14336 weight with a run of empty rows."""
    w = randn(4096, 14336, gen=gen, dtype=torch.bfloat16, device="cuda")
    w[100:140] = 0
    A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), 0.7) & (w != 0))
    x = randn(14336, gen=gen, dtype=torch.bfloat16, device="cuda")
    programs = torch.cuda.get_device_properties(0).multi_processor_count * 4
    want = A.to_dense().double() @ x.double()
    bound = spmm_bound(A.to_dense(), x[:, None])[:, 0]
    for (lines, warps), prefetch in itertools.product([(16, 4), (32, 8)], (False, True)):
        got = _run(A, x, programs, lines=lines, warps=warps, vector=8, prefetch=prefetch)
        assert_close(got, want, bound, torch.bfloat16)
