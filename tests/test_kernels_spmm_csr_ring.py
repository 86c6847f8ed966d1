"""The CSR one-token kernel fed by a TMA ring (Gluon, Hopper only): compiled on the H200 against
float64 references with poisoned outputs. On the CPU `supports` and `row_splits` run (Gluon has
no interpreter; test_compile_hopper.py compiles the kernel for sm_90 here).

The GPU shapes put rows of many steps, rows of a fraction of a step and empty rows (leading,
trailing, runs of them) in one program's stream; programs of no row, of one long row and of
hundreds of rows; the arrays' last partial line (entries past nnz // 64 * 64, read directly)
owned by several rows; x's elements no stored entry uses hold NaN, which must not spread."""

import itertools

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, randn, random_csr, spmm_bound
from sparsekernels.kernels.spmm_csr_ring import LINE, row_splits, spmm_csr_ring, supports


def _run(A, x, programs, bias=None, activation="none", **options):
    """The kernel with int16 columns where K allows them (as the sweep and a route give them)."""
    out = torch.full((A.shape[0], 3), float("nan"), dtype=x.dtype, device=x.device)[:, 1]
    columns = A.pattern.column_indices_int16()
    spmm_csr_ring(
        row_offsets=A.row_offsets,
        column_indices=A.column_indices if columns is None else columns,
        values=A.values,
        x=x,
        bias=bias, out=out, activation=activation, splits=row_splits(A.row_offsets, programs),
        **options,
    )  # fmt: skip
    return out


def _x_nan_where_unused(A, gen, dtype):
    x = randn(A.shape[1], gen=gen, dtype=dtype, device="cuda")
    used = torch.zeros(A.shape[1], dtype=torch.bool, device="cuda")
    used[A.column_indices.long()] = True
    x[~used] = float("nan")
    return x


def _with_rows(lengths, K, gen, dtype, device="cuda"):
    """A CSR matrix whose rows hold `lengths` entries at random columns."""
    mask = torch.zeros(len(lengths), K, dtype=torch.bool)
    for row, length in enumerate(lengths):
        mask[row, torch.randperm(K, generator=gen)[:length]] = True
    dense = randn(len(lengths), K, gen=gen, dtype=dtype) * mask
    return sk.CSRMatrix.from_dense(dense, mask=mask).to(device=device)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "lines, warps, vector, stages",
    [(16, 4, 8, 4), (16, 4, 4, 2), (4, 1, 8, 3), (32, 8, 8, 2), (8, 4, 2, 4), (32, 4, 8, 3)],
)
@pytest.mark.parametrize("programs", [1, 3, 40, 1000])
@pytest.mark.parametrize("prefetch", [False, True])
def test_matches_float64(dtype, lines, warps, vector, stages, programs, prefetch, gen):
    """Random sparsity with empty rows, at sizes of a few steps to many; int16 columns; each
    step read in its own or (prefetch) in the step before."""
    for M, K, density in [
        (37, 300, 0.25),
        (5, 3000, 0.5),
        (300, 64, 0.1),
        (1, 777, 0.4),
        (400, 1, 0.5),
    ]:  # (K = 1: a column; a single row)
        A = random_csr(M, K, density, gen, dtype, "cuda")
        if A.nnz < LINE:
            continue
        x = _x_nan_where_unused(A, gen, dtype)
        want = A.to_dense().double() @ torch.nan_to_num(x.double())
        bound = spmm_bound(A.to_dense(), torch.nan_to_num(x)[:, None])[:, 0]
        got = _run(A, x, programs, lines=lines, warps=warps, vector=vector, stages=stages,
                   prefetch=prefetch)  # fmt: skip
        assert_close(got, want, bound, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("programs", [1, 2, 5, 12, 64])
def test_rows_of_mixed_lengths_and_empty_rows(programs, gen):
    """Leading, trailing and runs of empty rows; rows longer than a step and under a line; a
    last partial line shared by rows; float32 sums of bf16 products as the kernel adds them."""
    lengths = [0, 0, 700, 3, 0, 64, 65, 1, 0, 0, 0, 130, 2000, 17, 63, 0, 5, 0]
    A = _with_rows(lengths, 2048, gen, torch.bfloat16)
    assert A.nnz % LINE and A.nnz > LINE
    x = randn(2048, gen=gen, dtype=torch.bfloat16, device="cuda")
    want = A.to_dense().double() @ x.double()
    bound = spmm_bound(A.to_dense(), x[:, None])[:, 0]
    for (lines, warps), prefetch in itertools.product([(1, 1), (4, 1), (16, 4)], [False, True]):
        vector = 8 if lines > 1 else 2
        got = _run(A, x, programs, lines=lines, warps=warps, vector=vector, prefetch=prefetch)
        assert_close(got, want, bound, torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
@pytest.mark.parametrize("pdl", [0, 1, 2])
def test_bias_activation_and_int32_columns(activation, pdl, gen):
    """Bias and activation fused; int32 columns (K past int16); PDL's levels."""
    A = random_csr(50, 40000, 0.01, gen, torch.float16, "cuda")
    assert A.pattern.column_indices_int16() is None  # int32 columns
    x = randn(40000, gen=gen, dtype=torch.float16, device="cuda")
    bias = randn(50, gen=gen, dtype=torch.float16, device="cuda")
    want = sk.spmm(A.to(dtype=torch.float64), x.double()[:, None], bias.double(), activation,
                   backend="reference")[:, 0]  # fmt: skip
    bound = spmm_bound(A.to_dense(), x[:, None])[:, 0] + bias.double().abs()
    got = _run(A, x, 7, bias, activation, pdl=pdl, prefetch=pdl == 2)
    assert_close(got, want, bound, torch.float16)


@pytest.mark.gpu
def test_llm_shape_matches_float64(gen):
    """A 70% magnitude-pruned 4096 x 14336 weight (17.6M entries) at the sweep's form."""
    w = randn(4096, 14336, gen=gen, dtype=torch.bfloat16, device="cuda")
    A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), 0.7))
    x = randn(14336, gen=gen, dtype=torch.bfloat16, device="cuda")
    programs = torch.cuda.get_device_properties(0).multi_processor_count * 4
    want = A.to_dense().double() @ x.double()
    bound = spmm_bound(A.to_dense(), x[:, None])[:, 0]
    for prefetch in (False, True):
        got = _run(A, x, programs, lines=16, warps=4, vector=8, stages=4, prefetch=prefetch)
        assert_close(got, want, bound, torch.bfloat16)


def test_row_splits_balance_entries_on_whole_rows(gen):
    A = _with_rows([0, 5, 300, 0, 7, 7, 900, 1, 0], 1000, gen, torch.float32, "cpu")
    offsets = A.row_offsets
    for programs in (1, 2, 3, 4, 9, 30):
        splits, firsts = row_splits(offsets, programs).unbind(1)
        assert splits.dtype == torch.int32 and splits.numel() == programs + 1
        assert torch.equal(firsts, offsets[splits.long()])  # each split row's first entry
        assert splits[0] == 0 and splits[-1] == A.shape[0]
        assert (splits[1:] >= splits[:-1]).all()
        owned = offsets.long()[splits[1:].long()] - offsets.long()[splits[:-1].long()]
        assert owned.sum() == A.nnz
        # each program's first row starts at or past its share: no program starts early
        share = [(p * A.nnz + programs - 1) // programs for p in range(programs)]
        starts = offsets.long()[splits[:-1].long()]
        assert all(s >= t for s, t in zip(starts.tolist(), share, strict=True))


def test_bad_step_shapes_raise():
    A = random_csr(8, 256, 0.5, torch.Generator().manual_seed(0), torch.bfloat16, "cpu")
    x, out = torch.zeros(256, dtype=torch.bfloat16), torch.empty(8, dtype=torch.bfloat16)
    common = dict(
        row_offsets=A.row_offsets,
        column_indices=A.column_indices,
        values=A.values,
        x=x,
        bias=None,
        out=out,
        activation="none",
        splits=row_splits(A.row_offsets, 2),
    )
    with pytest.raises(ValueError, match="vector"):
        spmm_csr_ring(**common, vector=1)
    with pytest.raises(ValueError, match="lines must be a power of two from 16"):
        spmm_csr_ring(**common, lines=8, warps=4, vector=8)  # 4 warps read 16 lines a pass
    with pytest.raises(ValueError, match="power of two"):
        spmm_csr_ring(**common, lines=48, warps=4, vector=8)  # TMA's boxes


def test_supports():
    values = torch.zeros(128, dtype=torch.bfloat16)
    columns = torch.zeros(128, dtype=torch.int16)
    offsets = torch.tensor([0, 128], dtype=torch.int32)
    x = torch.zeros(8, dtype=torch.bfloat16)
    assert supports(offsets, columns, values, x)
    assert supports(offsets, columns.int(), values.half(), x.half())
    assert not supports(offsets, columns, values.float(), x.float())  # fp32
    assert not supports(offsets, columns, values, x.half())  # x's dtype differs
    assert not supports(offsets.long(), columns, values, x)  # int64 offsets
    assert not supports(offsets, columns.long(), values, x)
    assert not supports(offsets, columns[:40], values[:40], x)  # under a line of entries
    assert not supports(offsets, columns[1:], values[1:], x)  # bases off 16 bytes


@pytest.mark.gpu
def test_linear_takes_it_where_routed(gen, monkeypatch):
    """With tuning.CSR_RING set, a one-token linear runs the ring (int16 columns, bias fused,
    the splits built once per weight); unset, it does not."""
    from sparsekernels.kernels import spmm_csr_ring as kernel
    from sparsekernels.kernels import tuning
    from sparsekernels.ops import _launch_plans

    monkeypatch.setattr(_launch_plans, "ENABLED", False)  # each call through the route
    calls = []
    launch = kernel.spmm_csr_ring
    monkeypatch.setattr(kernel, "spmm_csr_ring", lambda **kw: calls.append(kw) or launch(**kw))
    A = random_csr(300, 2000, 0.3, gen, torch.bfloat16, "cuda")
    x = randn(1, 2000, gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(300, gen=gen, dtype=torch.bfloat16, device="cuda")
    want = x.double() @ A.to_dense().double().t() + bias.double()
    bound = spmm_bound(x, A.to_dense().t()) + bias.double().abs()
    sk.linear(x, A, bias)
    assert not calls  # off by default
    monkeypatch.setattr(tuning, "CSR_RING", dict(lines=16, warps=4, vector=8, stages=3,
                                                 programs_per_sm=2))  # fmt: skip
    monkeypatch.setattr(tuning, "CSR_RING_MIN_NNZ", 0)
    for _ in range(2):
        got = sk.linear(x, A, bias)
        assert_close(got, want, bound, torch.bfloat16)
    assert len(calls) == 2 and calls[0]["column_indices"].dtype == torch.int16
    assert calls[0]["splits"] is calls[1]["splits"]


def test_splits_kept_per_weight_and_rebuilt_after_an_edit(gen):
    from sparsekernels.ops._csr_ring import splits_for

    A = _with_rows([3, 0, 90, 7, 200, 1], 300, gen, torch.float32, "cpu")
    offsets = A.row_offsets.clone()
    first = splits_for(offsets, 4)
    assert splits_for(offsets, 4) is first
    assert torch.equal(first, row_splits(offsets, 4))
    assert splits_for(offsets, 3) is not first  # another program count
    offsets[3:] += 100  # an in-place edit (longer rows from the third) bumps the version
    assert splits_for(offsets, 4) is not first
    assert torch.equal(splits_for(offsets, 4), row_splits(offsets, 4))


def test_route_config(monkeypatch):
    from sparsekernels.kernels import tuning

    assert tuning.spmm_csr_ring_config(4096, 1 << 24, torch.bfloat16) is None  # not measured
    ring = dict(lines=16, warps=4, vector=8, stages=4, programs_per_sm=4)
    monkeypatch.setattr(tuning, "CSR_RING", ring)
    assert tuning.spmm_csr_ring_config(4096, 1 << 24, torch.float16) == ring
    assert tuning.spmm_csr_ring_config(4096, 1 << 24, torch.float32) is None
    assert tuning.spmm_csr_ring_config(64, 1000, torch.bfloat16) is None  # few entries


def test_line_form_kept_per_weight_and_rebuilt_after_an_edit(gen, monkeypatch):
    from sparsekernels.formats._line_layout import LINE
    from sparsekernels.kernels import tuning
    from sparsekernels.ops._csr_ring import line_form_for

    A = random_csr(40, 500, 0.4, gen, torch.float32, "cpu")
    values = A.values.clone()
    first = line_form_for(A.row_offsets, A.column_indices, values, 500)
    slots, offsets, packed, bases = first
    assert slots[-1] == packed.numel() == bases.shape[0] * LINE and offsets.dtype == torch.uint8
    again = line_form_for(A.row_offsets, A.column_indices, values, 500)
    assert all(a is b for a, b in zip(first, again, strict=True))
    values.mul_(2)  # an optimizer's step: the values are packed again, the layout kept
    edited = line_form_for(A.row_offsets, A.column_indices, values, 500)
    assert edited[0] is slots and torch.equal(edited[2], 2 * packed)
    sparse = random_csr(40, 5000, 0.02, gen, torch.float32, "cpu")  # lines cut by the span
    monkeypatch.setattr(tuning, "CSR_LINES_MOST_SLOTS", 1.25)
    assert line_form_for(sparse.row_offsets, sparse.column_indices, sparse.values, 5000) is None


@pytest.mark.gpu
def test_linear_takes_the_line_form_where_routed(gen, monkeypatch):
    from sparsekernels.kernels import spmm_csr_ring as kernel
    from sparsekernels.kernels import tuning
    from sparsekernels.ops import _launch_plans

    monkeypatch.setattr(_launch_plans, "ENABLED", False)
    calls = []
    launch = kernel.spmm_csr_ring
    monkeypatch.setattr(kernel, "spmm_csr_ring", lambda **kw: calls.append(kw) or launch(**kw))
    monkeypatch.setattr(tuning, "CSR_RING", dict(lines=16, warps=4, vector=8, stages=3,
                                                 programs_per_sm=2, line_form=True))  # fmt: skip
    monkeypatch.setattr(tuning, "CSR_RING_MIN_NNZ", 0)
    A = random_csr(300, 2000, 0.3, gen, torch.bfloat16, "cuda")
    x = randn(1, 2000, gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(300, gen=gen, dtype=torch.bfloat16, device="cuda")
    want = x.double() @ A.to_dense().double().t() + bias.double()
    bound = spmm_bound(x, A.to_dense().t()) + bias.double().abs()
    for _ in range(2):
        assert_close(sk.linear(x, A, bias), want, bound, torch.bfloat16)
    assert len(calls) == 2 and calls[0]["column_indices"].dtype == torch.uint8
    assert calls[0]["values"] is calls[1]["values"]  # packed once
