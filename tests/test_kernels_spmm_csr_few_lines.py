"""The CSR few-token kernel on the line layout (kernels/spmm_csr_few_lines.py): 2-16 columns of
B gathered per slot, a byte a column from each 64-slot line's base.

Float64 references on fresh random data, outputs poisoned with NaN, the rows of B no stored
entry reads NaN (they must not spread). Shapes: rows of many steps and of part of a line,
empty rows, a single row, K = 1, lines cut by the 255-column span, programs of one row and of
several (the last partial); B strided (linear's x^T), row-major and padded; N not a power of
two; the rows stored in row order or as they are; inf in B at a line's base where the line
has padding slots (masked by the head's count, never 0 * inf)."""

import pytest
import torch

import sparsekernels as sk
from _helpers import (
    ALL_DTYPES,
    KERNEL_DEVICES,
    assert_close,
    b_layouts,
    csr_with_neighbours,
    randn,
    random_csr,
    skip_interpreter_on_gpu_machine,
    spmm_bound,
    xs_with_nan_where_unused,
)
from sparsekernels.formats._line_layout import build
from sparsekernels.ops._layout import padded_rows


def _few_lines(A, B, n, bias=None, activation="none", block=64, rows=1, warps=1,
               by_sequence=False, asm=None, line=64, in_place=None, finite=False):  # fmt: skip
    """The kernel on A's line layout of `line` slots a line; on the GPU B's rows are read by
    inline PTX vectors where B is 16-bit and padded (as routed) unless `asm` is False.
    `in_place` True: A's own values on an in-place layout; False: that layout's packed ones."""
    from sparsekernels.kernels.spmm_csr_few_lines import spmm_csr_few_lines

    sequence = A.row_order if by_sequence else None
    layout = build(A.row_offsets, A.column_indices, A.shape[1], 1000.0, row_sequence=sequence,
                   line=line, in_place=in_place is not None)  # fmt: skip
    out = torch.full((A.shape[0], n + 3), float("nan"), dtype=B.dtype, device=B.device)[:, :n]
    spmm_csr_few_lines(
        row_slots=layout.row_slots, offsets=layout.offsets, heads=layout.heads,
        values=A.values if in_place else layout.pack(A.values),
        in_place=layout if in_place else None,
        rest=layout.pack_rest(A.values) if in_place else None, finite_values=finite, b=B, bias=bias,
        row_order=A.row_order, out=out,
        activation=activation, rows_per_program=rows, block=block, num_warps=warps,
        row_sequence=sequence, asm_gather=B.is_cuda if asm is None else asm, line=line,
    )  # fmt: skip
    return out


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("n", [2, 5, 16])
@pytest.mark.parametrize("block, rows, by_sequence, line", [(64, 1, False, 64), (128, 2, True, 64),
                                                          (128, 1, True, 16)])  # fmt: skip
def test_matches_float64(device, dtype, n, block, rows, by_sequence, line, gen):
    skip_interpreter_on_gpu_machine(device)
    # ~15-150 entries a row with empty rows; a wide sparse one (span cuts); K = 1; one row
    for M, K, density in [(37, 300, 0.25), (9, 3000, 0.02), (30, 1, 0.5), (1, 500, 0.6)]:
        A = random_csr(M, K, density, gen, dtype, device)
        x = xs_with_nan_where_unused(A, n, gen, dtype, device)
        clean = torch.nan_to_num(x)
        want = A.to_dense().double() @ clean.t().double()
        bound = spmm_bound(A.to_dense(), clean.t())
        for B in b_layouts(x).values():
            got = _few_lines(A, B, n, block=block, rows=rows, warps=rows,
                             by_sequence=by_sequence, line=line)  # fmt: skip
            assert_close(got, want, bound, dtype)
            if device == "cuda" and dtype.itemsize == 2:  # tl.load's gather too
                got = _few_lines(A, B, n, block=block, rows=rows, warps=rows,
                                 by_sequence=by_sequence, asm=False, line=line)  # fmt: skip
                assert_close(got, want, bound, dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_values_read_in_place(device, dtype, gen):
    """The CSR's own values read through an in-place layout (aligned lines in place, the rest
    from its small packed copy) give the same layout's packed sums, B padded (PTX vectors on
    the GPU) or strided, 64- and 16-slot lines (the next rows' values past a line's entries
    unmasked: finite_values, and masked), K = 1 (few lines read in place)."""
    skip_interpreter_on_gpu_machine(device)
    for M, K, density in [(37, 300, 0.25), (9, 3000, 0.02), (30, 1, 0.5)]:
        A = random_csr(M, K, density, gen, dtype, device)
        x = xs_with_nan_where_unused(A, 4, gen, dtype, device)
        clean = torch.nan_to_num(x)
        want = A.to_dense().double() @ clean.t().double()
        bound = spmm_bound(A.to_dense(), clean.t())
        cases = ((padded_rows(x.t()), 128, 2, 64), (x.t(), 64, 1, 16))
        for B, block, rows, line in cases:
            kw = dict(block=block, rows=rows, warps=rows, by_sequence=True, line=line)
            got = _few_lines(A, B, 4, in_place=True, finite=line == 64, **kw)
            assert torch.equal(got, _few_lines(A, B, 4, in_place=False, **kw))
            assert_close(got, want, bound, dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_values_in_place_mask_their_neighbours(device):
    """Row 0's line, read in place, reads row 1's and row 2's values past its 3 entries: a NaN
    and an inf among them stay out of its sums."""
    skip_interpreter_on_gpu_machine(device)
    A = csr_with_neighbours(device)
    A.values[5] = float("nan")  # row 1's
    A.values[13] = float("inf")  # row 2's first entry
    x = torch.ones(2, 200, dtype=torch.bfloat16, device=device)
    got = _few_lines(A, padded_rows(x.t()), 2, in_place=True)
    assert got[0].tolist() == [3.0, 3.0] and got[1].isnan().all()
    assert got[2].tolist() == [float("inf")] * 2 and got[3:].eq(75.0).all()


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
def test_bias_activation_and_long_rows(device, activation, gen):
    """Rows of several steps beside empty ones, bias and activation fused, 4 rows a program
    over 6 rows (the last program partial)."""
    skip_interpreter_on_gpu_machine(device)
    mask = torch.rand(6, 1500, generator=gen) < 0.6
    mask[[0, 3]] = False
    dense = randn(6, 1500, gen=gen) * mask
    A = sk.CSRMatrix.from_dense(dense.to(torch.float32), mask=mask).to(device=device)
    x = randn(3, 1500, gen=gen, dtype=torch.float32, device=device)
    bias = randn(6, gen=gen, dtype=torch.float32, device=device)
    want = sk.spmm(A.to(dtype=torch.float64), x.double().t(), bias.double(), activation,
                   backend="reference")  # fmt: skip
    bound = spmm_bound(A.to_dense(), x.t()) + bias.double().abs()[:, None]
    for block, rows in [(64, 1), (256, 4)]:
        got = _few_lines(A, padded_rows(x.t()), 3, bias, activation, block=block, rows=rows,
                         warps=2, by_sequence=True)  # fmt: skip
        assert_close(got, want, bound, torch.float32)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_padding_never_meets_inf(device, dtype, gen):
    """Row 0 holds 70 entries (a full line and one of 6, padded by 58); B is inf at the second
    line's base in one column: that column's sum is inf, never NaN, the other finite (bf16:
    the PTX gather's masked slots on the GPU)."""
    skip_interpreter_on_gpu_machine(device)
    mask = torch.zeros(2, 400, dtype=torch.bool)
    mask[0, :70] = True
    mask[1, [5, 300]] = True
    dense = torch.rand(2, 400, generator=gen, dtype=torch.float64) + 0.5
    A = sk.CSRMatrix.from_dense((dense * mask).to(dtype), mask=mask).to(device=device)
    x = torch.rand(2, 400, generator=gen, dtype=torch.float64).to(dtype).to(device)
    x[0, 64] = float("inf")
    got = _few_lines(A, padded_rows(x.t()), 2)
    assert got[0, 0].item() == float("inf") and torch.isfinite(got[0, 1])
    clean = x.double()
    clean[0, 64] = 0
    want = A.to_dense().double() @ clean.t()
    bound = spmm_bound(A.to_dense(), clean.t())
    assert_close(got[:, 1], want[:, 1], bound[:, 1], dtype)
    assert_close(got[1], want[1], bound[1], dtype)


def test_bad_arguments_raise():
    from sparsekernels.kernels.spmm_csr_few_lines import spmm_csr_few_lines

    A = random_csr(4, 100, 0.5, torch.Generator().manual_seed(0), torch.float32, "cpu")
    layout = build(A.row_offsets, A.column_indices, 100, 100.0, row_sequence=A.row_order)
    kwargs = dict(row_slots=layout.row_slots, offsets=layout.offsets, heads=layout.heads,
                  values=layout.pack(A.values), b=torch.zeros(100, 2), bias=None,
                  row_order=A.row_order, out=torch.empty(4, 2), activation="none",
                  rows_per_program=1, block=64, num_warps=1,
                  row_sequence=layout.row_sequence)  # fmt: skip
    for change, message in [
        (dict(block=96), "block must be a power of two and a multiple of 64"),
        (dict(block=32), "block must be a power of two and a multiple of 64"),
        (dict(row_order=A.row_order.clone()), "row_order must be the layout's row_sequence"),
        (dict(b=torch.zeros(1, 2).expand(2**30, 2)), "under 2\\*\\*31 elements"),
    ]:
        with pytest.raises(ValueError, match=message):
            spmm_csr_few_lines(**{**kwargs, **change})


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_linear_takes_it_where_routed(device, gen, monkeypatch):
    """With csr_lines_tuning.CSR_FEW_LINES (the default), a linear of 3 tokens on a weight the
    line walks take runs this kernel (bias fused, out in linear's order), the layout shared
    with the one-token walk's; off, on a weight too small for the line walks, or on 16-slot
    lines (a 90% weight's) unless CSR_FEW_LINE_LENGTHS takes them, the few-token walk runs.
    With CSR_LINES_VALUES_IN_PLACE it reads the weight's own values."""
    from sparsekernels.kernels import csr_lines_tuning
    from sparsekernels.kernels import spmm_csr_few_lines as kernel
    from sparsekernels.ops import _csr_lines, _launch_plans

    skip_interpreter_on_gpu_machine(device)
    monkeypatch.setattr(_launch_plans, "ENABLED", False)  # each call through the route
    calls = []
    launch = kernel.spmm_csr_few_lines
    monkeypatch.setattr(kernel, "spmm_csr_few_lines", lambda **kw: calls.append(kw) or launch(**kw))
    A = random_csr(40, 600, 0.4, gen, torch.bfloat16, device)
    x = randn(3, 600, gen=gen, dtype=torch.bfloat16, device=device)
    bias = randn(40, gen=gen, dtype=torch.bfloat16, device=device)
    want = x.double() @ A.to_dense().double().t() + bias.double()
    bound = spmm_bound(x, A.to_dense().t()) + bias.double().abs()
    assert_close(sk.linear(x, A, bias, backend="triton"), want, bound, torch.bfloat16)
    assert not calls  # too small for the line walks
    monkeypatch.setattr(csr_lines_tuning, "CSR_LINES_MIN_NNZ", 0)
    monkeypatch.setattr(csr_lines_tuning, "CSR_LINES_MIN_ROWS", 0)
    for _ in range(2):
        assert_close(sk.linear(x, A, bias, backend="triton"), want, bound, torch.bfloat16)
    assert len(calls) == 2 and calls[0]["values"] is calls[1]["values"]  # packed once
    assert calls[0]["block"] == 128 and calls[0]["row_sequence"] is calls[0]["row_order"]
    # a 90% weight's layout has 16-slot lines: taken only where CSR_FEW_LINE_LENGTHS says
    C = random_csr(40, 600, 0.1, gen, torch.bfloat16, device, empty_rows=False)
    want_c = x.double() @ C.to_dense().double().t() + bias.double()
    bound_c = spmm_bound(x, C.to_dense().t()) + bias.double().abs()
    assert_close(sk.linear(x, C, bias, backend="triton"), want_c, bound_c, torch.bfloat16)
    assert len(calls) == 2  # (64,): refused, the few-token walk ran
    assert _csr_lines._PACKED.get(C.values) is None  # (and no values packed for the lines)
    monkeypatch.setattr(csr_lines_tuning, "CSR_FEW_LINE_LENGTHS", (64, 16))
    assert_close(sk.linear(x, C, bias, backend="triton"), want_c, bound_c, torch.bfloat16)
    assert len(calls) == 3 and calls[2]["line"] == 16
    monkeypatch.setattr(csr_lines_tuning, "CSR_LINES_VALUES_IN_PLACE", True)
    assert_close(sk.linear(x, A, bias, backend="triton"), want, bound, torch.bfloat16)
    assert calls[3]["values"] is A.values and calls[3]["in_place"].in_place
    assert calls[3]["finite_values"] is True
    monkeypatch.setattr(csr_lines_tuning, "CSR_FEW_LINES", False)
    assert_close(sk.linear(x, A, bias, backend="triton"), want, bound, torch.bfloat16)
    assert len(calls) == 4


def test_route_config(monkeypatch):
    from sparsekernels.kernels import csr_lines_tuning

    configs = [csr_lines_tuning.spmm_csr_few_lines_config(1 << 24, 4096, n, torch.bfloat16)
               for n in (2, 3, 4, 5, 16)]  # fmt: skip
    shapes = [(c.rows_per_program, c.block, c.num_warps) for c in configs[:3]]
    assert shapes == [(2, 256, 2), (1, 128, 1), (1, 128, 1)] and configs[3:] == [None, None]
    monkeypatch.setattr(csr_lines_tuning, "CSR_FEW_LINES_MOST_TOKENS", 16)  # (sweeps reach 16)
    assert csr_lines_tuning.spmm_csr_few_lines_config(1 << 24, 4096, 16, torch.bfloat16)
    assert csr_lines_tuning.spmm_csr_few_lines_config(1 << 24, 4096, 4, torch.float32) is None
    assert (
        csr_lines_tuning.spmm_csr_few_lines_config(1 << 24, 2048, 4, torch.bfloat16) is None
    )  # few rows
    monkeypatch.setattr(csr_lines_tuning, "CSR_TOKEN_LINES", False)  # the line walks off together
    assert csr_lines_tuning.spmm_csr_few_lines_config(1 << 24, 4096, 4, torch.bfloat16) is None
    monkeypatch.setattr(csr_lines_tuning, "CSR_TOKEN_LINES", True)
    monkeypatch.setattr(csr_lines_tuning, "CSR_FEW_LINES", False)
    assert csr_lines_tuning.spmm_csr_few_lines_config(1 << 24, 4096, 4, torch.bfloat16) is None


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_a_misaligned_padded_b_is_read_safely(device, gen):
    """A padded B whose start is not aligned to its rows (a view 2 bytes into its storage)
    takes tl.load's gather, not the PTX vectors: the right product, no fault."""
    from sparsekernels.kernels.spmm_csr_few_lines import vector_rows

    skip_interpreter_on_gpu_machine(device)
    A = random_csr(20, 300, 0.3, gen, torch.bfloat16, device)
    storage = randn(300 * 4 + 1, gen=gen, dtype=torch.bfloat16, device=device)
    B = storage[1:].view(300, 4)  # padded (K, 4), 2 bytes past an 8-byte boundary
    assert not vector_rows(B, 4) and vector_rows(storage[4:-1].view(299, 4), 4)
    want = A.to_dense().double() @ B.double()
    got = _few_lines(A, B, 4, block=64, rows=2, warps=2)
    assert_close(got, want, spmm_bound(A.to_dense(), B), torch.bfloat16)
