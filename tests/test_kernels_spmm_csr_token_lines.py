"""The CSR one-token kernel on the line layout (kernels/spmm_csr_token_lines.py): rows in whole
lines of 64 slots, a byte a column from each line's base.

Float64 references on fresh random data, outputs poisoned with NaN, x strided and NaN where no
stored entry reads it. Shapes: rows of many steps and of part of a line, empty rows (leading,
trailing, runs), a single row, K = 1, lines cut by the 255-column span, programs of one row and
of several (the last partial); inf in x at a line's base where the line has padding slots
(masked by the head's count, never 0 * inf)."""

import pytest
import torch

import sparsekernels as sk
from _helpers import (
    ALL_DTYPES,
    KERNEL_DEVICES,
    assert_close,
    csr_with_neighbours,
    randn,
    random_csr,
    skip_interpreter_on_gpu_machine,
    spmm_bound,
    x_with_nan_where_unused,
)
from sparsekernels.formats._line_layout import LINE, build


def _lines(A, x, bias=None, activation="none", block=64, rows=1, warps=1, asm=None,
           by_sequence=False, ahead=1, held_in_asm=False, in_place=False, line=LINE):  # fmt: skip
    """The kernel on A's line layout of `line` slots a line (rows stored in A.row_order's
    sequence if `by_sequence`); on the GPU x is gathered by inline PTX (as routed) unless `asm`
    is False; `in_place`: A's own values read through an in-place layout instead of packed
    ones."""
    from sparsekernels.kernels.spmm_csr_token_lines import spmm_csr_token_lines

    sequence = A.row_order if by_sequence else None
    layout = build(A.row_offsets, A.column_indices, A.shape[1], 1000.0, row_sequence=sequence,
                   line=line, in_place=in_place)  # fmt: skip
    out = torch.full((A.shape[0], 3), float("nan"), dtype=x.dtype, device=x.device)[:, 1]
    spmm_csr_token_lines(
        row_slots=layout.row_slots, offsets=layout.offsets, heads=layout.heads,
        values=A.values if in_place else layout.pack(A.values),
        in_place=layout if in_place else None,
        rest=layout.pack_rest(A.values) if in_place else None, x=x, bias=bias,
        row_order=A.row_order, out=out,
        activation=activation, rows_per_program=rows, block=block, num_warps=warps,
        asm_gather=x.is_cuda if asm is None else asm, row_sequence=sequence, ahead=ahead,
        held_in_asm=held_in_asm, line=line,
    )  # fmt: skip
    return out


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("block, rows, line", [(64, 1, 64), (256, 1, 64), (128, 4, 64),
                                               (16, 1, 16), (256, 2, 16)])  # fmt: skip
def test_matches_float64(device, dtype, block, rows, line, gen):
    skip_interpreter_on_gpu_machine(device)
    # ~15-150 entries a row with empty rows; a wide sparse one (span cuts); K = 1; one row
    for M, K, density in [(37, 300, 0.25), (5, 700, 0.5), (9, 3000, 0.02), (30, 1, 0.5),
                          (1, 500, 0.6)]:  # fmt: skip
        A = random_csr(M, K, density, gen, dtype, device)
        x = x_with_nan_where_unused(A, gen, dtype, device)
        want = A.to_dense().double() @ torch.nan_to_num(x.double())
        bound = spmm_bound(A.to_dense(), torch.nan_to_num(x)[:, None])[:, 0]
        got = _lines(A, x, block=block, rows=rows, warps=min(rows, 2), line=line)
        assert_close(got, want, bound, dtype)
        if device == "cuda" and dtype.itemsize == 2:  # tl.load's gather too, and the held
            # count compared in the PTX (as routed)
            got = _lines(A, x, block=block, rows=rows, asm=False, line=line)
            assert_close(got, want, bound, dtype)
            got = _lines(A, x, block=block, rows=rows, held_in_asm=True, line=line)
            assert_close(got, want, bound, dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("by_sequence, ahead", [(True, 1), (False, 2), (True, 2)])
def test_rows_by_sequence_and_two_steps_ahead(device, by_sequence, ahead, gen):
    """The layout listed in row order, the weight loaded two steps ahead: rows of one to many
    steps (fewer than two steps: the second step ahead is all masked), empty rows, programs of
    one and of several rows."""
    skip_interpreter_on_gpu_machine(device)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    for M, K, density in [(37, 900, 0.3), (1, 500, 0.6), (9, 3000, 0.02)]:
        A = random_csr(M, K, density, gen, dtype, device)
        x = x_with_nan_where_unused(A, gen, dtype, device)
        want = A.to_dense().double() @ torch.nan_to_num(x.double())
        bound = spmm_bound(A.to_dense(), torch.nan_to_num(x)[:, None])[:, 0]
        for block, rows in [(64, 1), (128, 4)]:
            got = _lines(A, x, block=block, rows=rows, warps=min(rows, 2),
                         by_sequence=by_sequence, ahead=ahead)  # fmt: skip
            assert_close(got, want, bound, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_held_count_compared_in_the_ptx(dtype, gen):
    """held_in_asm (the PTX gather compares each slot with its line's held count): the float64
    product on rows of one to many steps, empty rows, lines cut by the span; x inf at a padded
    line's base and NaN where no entry reads it stays out of the sums."""
    for M, K, density in [(37, 900, 0.3), (1, 500, 0.6), (9, 3000, 0.02), (30, 1, 0.5)]:
        A = random_csr(M, K, density, gen, dtype, "cuda")
        x = x_with_nan_where_unused(A, gen, dtype, "cuda")
        want = A.to_dense().double() @ torch.nan_to_num(x.double())
        bound = spmm_bound(A.to_dense(), torch.nan_to_num(x)[:, None])[:, 0]
        for block, rows in [(64, 1), (256, 2)]:
            got = _lines(A, x, block=block, rows=rows, warps=rows, by_sequence=True,
                         held_in_asm=True)  # fmt: skip
            assert_close(got, want, bound, dtype)
    mask = torch.zeros(1, 400, dtype=torch.bool)
    mask[0, :70] = True  # a full line and one of 6 slots, padded by 58
    A = sk.CSRMatrix.from_dense((torch.rand(1, 400, generator=gen) + 0.5) * mask, mask=mask)
    A = A.to(device="cuda", dtype=dtype)
    x = torch.rand(400, generator=gen).to(device="cuda", dtype=dtype)
    x[64] = float("inf")
    assert _lines(A, x, held_in_asm=True)[0].item() == float("inf")  # never NaN


def _in_place_and_packed(A, x, **kw):
    """The kernel on A's in-place layout reading A's own values, and on the same layout's
    packed values."""
    from sparsekernels.kernels.spmm_csr_token_lines import spmm_csr_token_lines

    sequence = A.row_order if kw.pop("by_sequence") else None
    layout = build(A.row_offsets, A.column_indices, A.shape[1], 1000.0, row_sequence=sequence,
                   in_place=True, line=kw.pop("line", LINE))  # fmt: skip
    outs = []
    for values, in_place in ((A.values, layout), (layout.pack(A.values), None)):
        out = torch.full((A.shape[0], 3), float("nan"), dtype=x.dtype, device=x.device)[:, 1]
        spmm_csr_token_lines(
            row_slots=layout.row_slots, offsets=layout.offsets, heads=layout.heads,
            values=values, in_place=in_place,
            rest=layout.pack_rest(A.values) if in_place else None, x=x, bias=None,
            row_order=A.row_order, out=out, activation="none", row_sequence=sequence,
            asm_gather=x.is_cuda, line=layout.line, **kw,
        )  # fmt: skip
        outs.append(out)
    return outs


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_values_read_in_place(device, dtype, gen):
    """The CSR's own values read through an in-place layout (aligned lines in place, the rest
    from its small packed copy) give the same layout's packed sums (the same order), rows
    stored by sequence or not, 64- and 16-slot lines, the held count compared in the PTX on
    the GPU or not, the next rows' values past a line's entries masked or (finite_values) not;
    K = 1 and nnz not a multiple of 8 (the last lines never read in place)."""
    skip_interpreter_on_gpu_machine(device)
    for M, K, density in [(37, 300, 0.25), (9, 3000, 0.02), (1, 500, 0.6), (30, 1, 0.5)]:
        A = random_csr(M, K, density, gen, dtype, device)
        x = x_with_nan_where_unused(A, gen, dtype, device)
        want = A.to_dense().double() @ torch.nan_to_num(x.double())
        bound = spmm_bound(A.to_dense(), torch.nan_to_num(x)[:, None])[:, 0]
        held = device == "cuda" and dtype.itemsize == 2
        for block, rows, by_sequence, line, finite, ahead in [
            (64, 1, False, 64, False, 1),
            (256, 2, True, 64, True, 1),
            (128, 2, True, 16, False, 2),
        ]:  # fmt: skip
            kw = dict(rows_per_program=rows, block=block, num_warps=rows, ahead=ahead,
                      by_sequence=by_sequence, line=line, finite_values=finite,
                      held_in_asm=held)  # fmt: skip
            got, packed = _in_place_and_packed(A, x, **kw)
            assert torch.equal(got, packed)
            assert_close(got, want, bound, dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_values_in_place_mask_their_neighbours(device, gen):
    """An in-place line reads `line` values from its start: past row 0's 3 entries (its whole
    line read in place) lie row 1's and row 2's, a NaN and an inf among them, kept out of row
    0's sum; an inf in x at row 0's base, under its padding slots' offsets, gives inf."""
    skip_interpreter_on_gpu_machine(device)
    A = csr_with_neighbours(device)
    layout = build(A.row_offsets, A.column_indices, 200, 1000.0, in_place=True)
    assert layout.windows[0].item() == 0 and layout.windows[1].item() < 0  # row 1: entry 3 on
    x = torch.ones(200, dtype=torch.bfloat16, device=device)
    x[10] = float("inf")
    for finite in (False, True):
        got, _ = _in_place_and_packed(A, x, rows_per_program=1, block=64, num_warps=1,
                                      by_sequence=False, finite_values=finite)  # fmt: skip
        assert got[0].item() == float("inf") and got[1].item() == 20.0
    x[10] = 1.0
    A.values[5] = float("nan")  # row 1's
    A.values[13] = float("inf")  # row 2's first entry
    got, _ = _in_place_and_packed(A, x, rows_per_program=2, block=64, num_warps=1,
                                  by_sequence=False)  # fmt: skip
    assert got[0].item() == 3.0 and got[1].isnan() and got[2].item() == float("inf")
    assert got[3].item() == got[4].item() == 75.0


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_rest_on_either_side_of_the_values(device, gen):
    """The walk reaches `rest` from the values' base by its distance in elements: `rest` lying
    before the values in memory (a negative distance) or after them gives the packed sums."""
    from sparsekernels.kernels.spmm_csr_token_lines import spmm_csr_token_lines

    skip_interpreter_on_gpu_machine(device)
    A = random_csr(37, 300, 0.25, gen, torch.bfloat16, device)
    x = x_with_nan_where_unused(A, gen, torch.bfloat16, device)
    layout = build(A.row_offsets, A.column_indices, 300, 1000.0, in_place=True)
    rest = layout.pack_rest(A.values)
    assert rest.numel() and (layout.windows >= 0).any()  # both sources read
    nnz, kept = A.values.numel(), rest.numel()
    room_for = lambda n: (n // 8 + 2) * 8  # noqa: E731  (whole 16-byte blocks, one spare)
    kw = dict(row_slots=layout.row_slots, offsets=layout.offsets, heads=layout.heads, x=x,
              bias=None, row_order=A.row_order, activation="none", rows_per_program=2,
              block=128, num_warps=2, asm_gather=x.is_cuda)  # fmt: skip
    outs = []
    for values, rest_at in ((layout.pack(A.values), None), (0, room_for(nnz)), (room_for(kept), 0)):
        out = torch.full((37, 3), float("nan"), dtype=x.dtype, device=device)[:, 1]
        if rest_at is None:  # the packed walk
            spmm_csr_token_lines(values=values, out=out, **kw)
        else:  # values and rest in one buffer, in either order, each 16-byte aligned
            room = torch.full((room_for(nnz) + room_for(kept),), float("nan"),
                              dtype=torch.bfloat16, device=device)  # fmt: skip
            room[values : values + nnz] = A.values
            room[rest_at : rest_at + kept] = rest
            spmm_csr_token_lines(values=room[values : values + nnz], in_place=layout,
                                 rest=room[rest_at : rest_at + kept], out=out, **kw)  # fmt: skip
        outs.append(out)
    assert torch.equal(outs[1], outs[0]) and torch.equal(outs[2], outs[0])


def shifted(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of `t` that starts one element past a 16-byte boundary."""
    room = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    room[1:] = t
    return room[1:]


def test_in_place_layout_is_checked(gen):
    """The kernel takes only an in-place layout of these heads with its CSR's own values and
    their pack_rest."""
    from sparsekernels.kernels.spmm_csr_token_lines import spmm_csr_token_lines

    A = random_csr(20, 300, 0.3, gen, torch.float32, "cpu")
    packed = build(A.row_offsets, A.column_indices, 300, 1000.0)
    layout = build(A.row_offsets, A.column_indices, 300, 1000.0, in_place=True)
    rest = layout.pack_rest(A.values)
    kw = dict(row_slots=layout.row_slots, offsets=layout.offsets, heads=layout.heads,
              x=torch.ones(300), bias=None, row_order=A.row_order, out=torch.empty(20),
              activation="none", rows_per_program=1, block=64, num_warps=1)  # fmt: skip
    for in_place, values, rest_given, message in [
        (packed, A.values, rest, "in_place must be the in-place layout"),
        (layout, A.values[:-1], rest, r"values must be the layout's CSR values, contiguous \("),
        (layout, torch.stack([A.values, A.values], 1)[:, 0], rest, "values must be the layout's"),
        (layout, A.values, None, r"rest must be the layout's pack_rest\(values\)"),
        (layout, A.values, rest[:-1], "rest must be"),
        (layout, A.values, rest.double(), "rest must be"),
        (layout, shifted(A.values), rest, "values must start 16-byte aligned"),
        (layout, A.values, shifted(rest), "rest must start 16-byte aligned"),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            spmm_csr_token_lines(values=values, in_place=in_place, rest=rest_given, **kw)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
def test_bias_activation_and_long_rows(device, activation, gen):
    """Rows of several steps beside empty ones, bias and activation fused."""
    skip_interpreter_on_gpu_machine(device)
    mask = torch.rand(8, 2000, generator=gen) < 0.6
    mask[[0, 3, 7]] = False
    dense = randn(8, 2000, gen=gen) * mask
    A = sk.CSRMatrix.from_dense(dense.to(torch.float32), mask=mask).to(device=device)
    x = randn(2000, gen=gen, dtype=torch.float32, device=device)
    bias = randn(8, gen=gen, dtype=torch.float32, device=device)
    want = sk.spmm(A.to(dtype=torch.float64), x.double()[:, None], bias.double(), activation,
                   backend="reference")[:, 0]  # fmt: skip
    bound = spmm_bound(A.to_dense(), x[:, None])[:, 0] + bias.double().abs()
    for block, rows in [(64, 1), (256, 2)]:
        got = _lines(A, x, bias, activation, block=block, rows=rows)
        assert_close(got, want, bound, torch.float32)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_padding_never_meets_inf(device, gen):
    """Row 0 holds 70 entries (a full line and one of 6, padded by 58); x is inf at the second
    line's base: the row's sum is inf (its entry there is positive), never NaN; row 1's line
    is cut by the span, x inf at a column only row 0 reads."""
    mask = torch.zeros(2, 400, dtype=torch.bool)
    mask[0, :70] = True
    mask[1, [5, 300]] = True
    dense = torch.rand(2, 400, generator=gen, dtype=torch.float64) + 0.5
    A = sk.CSRMatrix.from_dense(dense * mask, mask=mask).to(device=device)
    layout = build(A.row_offsets, A.column_indices, 400, most_slots=100.0)
    assert layout.bases().tolist() == [0, 64, 5, 300] and layout.held().tolist()[1] == 6
    x = torch.rand(400, generator=gen, dtype=torch.float64).to(device)
    x[64] = float("inf")
    skip_interpreter_on_gpu_machine(device)
    got = _lines(A, x)
    assert got[0].item() == float("inf")
    want = dense[1, 5] * x[5].cpu() + dense[1, 300] * x[300].cpu()  # (the dense product: 0 * inf)
    torch.testing.assert_close(got[1].cpu(), want, rtol=1e-12, atol=0)


def test_bad_block_raises():
    from sparsekernels.kernels.spmm_csr_token_lines import spmm_csr_token_lines

    A = random_csr(4, 100, 0.5, torch.Generator().manual_seed(0), torch.float32, "cpu")
    layout = build(A.row_offsets, A.column_indices, 100, most_slots=100.0)
    for block in (32, 96):
        with pytest.raises(ValueError, match="block must be a power of two and a multiple"):
            spmm_csr_token_lines(
                row_slots=layout.row_slots, offsets=layout.offsets, heads=layout.heads,
                values=layout.pack(A.values), x=torch.zeros(100), bias=None,
                row_order=A.row_order, out=torch.empty(4), activation="none",
                rows_per_program=1, block=block, num_warps=1,
            )  # fmt: skip
    assert LINE == 64
    listed = build(A.row_offsets, A.column_indices, 100, 100.0, row_sequence=A.row_order)
    bad = [(dict(ahead=3), "ahead must be 1 or 2"),
           (dict(row_sequence=listed.row_sequence, row_order=A.row_order.clone()),
            "row_order must be the layout's row_sequence")]  # fmt: skip
    for change, message in bad:
        kwargs = dict(row_slots=listed.row_slots, offsets=listed.offsets, heads=listed.heads,
                      values=listed.pack(A.values), x=torch.zeros(100), bias=None,
                      row_order=A.row_order, out=torch.empty(4), activation="none",
                      rows_per_program=1, block=64, num_warps=1)  # fmt: skip
        with pytest.raises(ValueError, match=message):
            spmm_csr_token_lines(**{**kwargs, **change})


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_linear_takes_it_where_routed(device, gen, monkeypatch):
    """A one-token linear on a large weight runs the line layout's kernel (bias fused), the
    layout and packed values built once per weight; a small weight keeps the plain walk; with
    CSR_LINES_VALUES_IN_PLACE the kernel reads the weight's own values (only the lines not
    read in place packed), told
    whether they are all finite (checked again after an in-place edit), unless they do not
    start 16-byte aligned."""
    from sparsekernels.kernels import csr_lines_tuning
    from sparsekernels.kernels import spmm_csr_token_lines as kernel
    from sparsekernels.ops import _csr_lines, _launch_plans

    skip_interpreter_on_gpu_machine(device)
    monkeypatch.setattr(_launch_plans, "ENABLED", False)  # each call through the route
    calls = []
    launch = kernel.spmm_csr_token_lines
    monkeypatch.setattr(
        kernel, "spmm_csr_token_lines", lambda **kw: calls.append(kw) or launch(**kw)
    )
    A = random_csr(40, 600, 0.4, gen, torch.bfloat16, device)
    x = randn(1, 600, gen=gen, dtype=torch.bfloat16, device=device)
    bias = randn(40, gen=gen, dtype=torch.bfloat16, device=device)
    want = x.double() @ A.to_dense().double().t() + bias.double()
    bound = spmm_bound(x, A.to_dense().t()) + bias.double().abs()
    backend = "triton"  # (on the CPU too: the interpreter)
    assert_close(sk.linear(x, A, bias, backend=backend), want, bound, torch.bfloat16)
    assert not calls  # too small by default
    monkeypatch.setattr(csr_lines_tuning, "CSR_LINES_MIN_NNZ", 0)
    monkeypatch.setattr(csr_lines_tuning, "CSR_LINES_MIN_ROWS", 0)
    for _ in range(2):
        assert_close(sk.linear(x, A, bias, backend=backend), want, bound, torch.bfloat16)
    assert len(calls) == 2 and calls[0]["offsets"].dtype == torch.uint8
    assert calls[0]["values"] is calls[1]["values"]  # packed once
    assert (
        calls[0]["row_sequence"] is calls[0]["row_order"]
    )  # csr_lines_tuning.CSR_LINES_BY_SEQUENCE
    monkeypatch.setattr(csr_lines_tuning, "CSR_LINES_BY_SEQUENCE", True)
    monkeypatch.setattr(csr_lines_tuning, "CSR_LINES_AHEAD", 2)
    assert_close(sk.linear(x, A, bias, backend=backend), want, bound, torch.bfloat16)
    assert calls[2]["row_sequence"] is calls[2]["row_order"] and calls[2]["ahead"] == 2
    assert calls[0]["held_in_asm"] is True  # csr_lines_tuning.CSR_LINES_HELD_IN_ASM
    del calls[2]
    sparse = random_csr(40, 5000, 0.02, gen, torch.bfloat16, device)  # lines cut by the span
    sk.linear(randn(1, 5000, gen=gen, dtype=torch.bfloat16, device=device), sparse, backend=backend)
    assert len(calls) == 2  # refused: the plain walk
    monkeypatch.setattr(csr_lines_tuning, "CSR_LINES_VALUES_IN_PLACE", True)
    B = random_csr(40, 600, 0.4, gen, torch.bfloat16, device)  # (a weight never packed)
    want = x.double() @ B.to_dense().double().t() + bias.double()
    bound = spmm_bound(x, B.to_dense().t()) + bias.double().abs()
    assert_close(sk.linear(x, B, bias, backend=backend), want, bound, torch.bfloat16)
    assert calls[2]["values"] is B.values and calls[2]["in_place"].in_place
    assert calls[2]["finite_values"] is True
    kept = _csr_lines._PACKED.get(B.values)[2]  # only the lines not read in place copied
    assert kept is calls[2]["rest"] and kept.numel() == calls[2]["in_place"].rest_lines * 64
    with torch.no_grad():
        B.values[5] = float("nan")  # (a new version: checked again)
    sk.linear(x, B, bias, backend=backend)
    assert calls[3]["finite_values"] is False
    del calls[3]
    odd = A.with_values(shifted(A.values))  # (not 16-byte aligned: the packed copy instead)
    want = x.double() @ A.to_dense().double().t() + bias.double()
    bound = spmm_bound(x, A.to_dense().t()) + bias.double().abs()
    assert_close(sk.linear(x, odd, bias, backend=backend), want, bound, torch.bfloat16)
    assert calls[3]["in_place"] is None and calls[3]["values"] is not odd.values
    del calls[3]
    monkeypatch.setattr(csr_lines_tuning, "CSR_LINES_VALUES_IN_PLACE", False)
    monkeypatch.setattr(csr_lines_tuning, "CSR_LINE_LENGTHS", (64, 16))
    C = random_csr(40, 600, 0.1, gen, torch.bfloat16, device, empty_rows=False)  # 90%
    want = x.double() @ C.to_dense().double().t() + bias.double()
    bound = spmm_bound(x, C.to_dense().t()) + bias.double().abs()
    assert_close(sk.linear(x, C, bias, backend=backend), want, bound, torch.bfloat16)
    assert calls[3]["line"] == 16  # 64-slot lines refused, 16-slot ones taken


def test_line_form_kept_per_weight_and_rebuilt_after_an_edit(gen):
    from sparsekernels.ops._csr_lines import line_form_for

    A = random_csr(40, 500, 0.4, gen, torch.float32, "cpu")
    values = A.values.clone()
    layout, packed = line_form_for(A.row_offsets, A.column_indices, values, 500)
    assert layout.row_slots[-1] == packed.numel() == layout.lines * LINE
    again = line_form_for(A.row_offsets, A.column_indices, values, 500)
    assert again[0] is layout and again[1] is packed
    values.mul_(2)  # an optimizer's step: the values are packed again, the layout kept
    edited = line_form_for(A.row_offsets, A.column_indices, values, 500)
    assert edited[0] is layout and torch.equal(edited[1], 2 * packed)
    columns = A.column_indices.clone()
    line_form_for(A.row_offsets, columns, values, 500)
    columns.zero_()  # an edited pattern (not a valid one: only the rebuild is checked here)
    assert line_form_for(A.row_offsets, columns, values, 500)[0] is not layout


def test_route_config(monkeypatch):
    from sparsekernels.kernels import csr_lines_tuning

    want = csr_lines_tuning.spmm_csr_token_lines_config(1 << 24, 4096, torch.bfloat16)
    assert want is not None and want.block % LINE == 0  # whole lines a step
    assert csr_lines_tuning.spmm_csr_token_lines_config(1 << 24, 4096, torch.float16) == want
    assert csr_lines_tuning.spmm_csr_token_lines_config(1 << 24, 4096, torch.float32) is None
    assert (
        csr_lines_tuning.spmm_csr_token_lines_config(1000, 64, torch.bfloat16) is None
    )  # small weight
    assert (
        csr_lines_tuning.spmm_csr_token_lines_config(1 << 24, 2048, torch.bfloat16) is None
    )  # few rows
    monkeypatch.setattr(csr_lines_tuning, "CSR_TOKEN_LINES", False)
    assert csr_lines_tuning.spmm_csr_token_lines_config(1 << 24, 4096, torch.bfloat16) is None


@pytest.mark.parametrize("setting, routed", [("0", False), ("1", True), (None, True)])
def test_lines_off_by_the_environment(setting, routed):
    """SPARSEKERNELS_CSR_LINES=0, read at import, turns both line walks off (nothing kept
    beside a CSR weight at 1-4 tokens); 1 or unset keeps them."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "SPARSEKERNELS_CSR_LINES"}
    if setting is not None:
        env["SPARSEKERNELS_CSR_LINES"] = setting
    probe = (
        "import torch; from sparsekernels.kernels import csr_lines_tuning as t; "
        "print(t.spmm_csr_token_lines_config(1 << 24, 4096, torch.bfloat16) is not None, "
        "t.spmm_csr_few_lines_config(1 << 24, 4096, 2, torch.bfloat16) is not None)"
    )
    run = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [str(routed), str(routed)]
