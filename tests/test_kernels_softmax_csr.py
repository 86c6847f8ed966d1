"""The Triton CSR row-softmax kernels (forward and backward): in the interpreter on CPU (small
shapes), compiled on CUDA (gpu).

Each check compares with float64 dense softmax (non-stored entries at -inf) on fresh random
data; outputs are poisoned with NaN first so an entry the kernel never writes shows up.
"""

import pytest
import torch
import triton
import triton.language as tl

import sparsekernels as sk
from _helpers import (
    ALL_DTYPES,
    KERNEL_DEVICES,
    assert_close,
    randn,
    random_csr,
    skip_interpreter_on_gpu_machine,
)
from sparsekernels import reference
from sparsekernels.ops import _dispatch


def _config(S, block):
    from sparsekernels.kernels.sddmm_tuning import softmax_csr_config

    config = softmax_csr_config(S.nnz, S.shape[0])
    return block or config.block, config.num_warps


def _forward_poisoned(
    S, values, scale, block=None, heads=1, tail=0, warps=None, align=0, levels=0, walk_per=1
):
    from sparsekernels.kernels import softmax_csr as kernel

    block, num_warps = _config(S, block)
    out = torch.full(values.shape, float("nan"), dtype=values.dtype, device=values.device)
    kernel.sparse_softmax(
        row_offsets=S.row_offsets,
        values=values,
        out=out.view(-1, S.nnz),
        scale=scale,
        block=block,
        num_warps=warps or num_warps * heads,
        heads=heads,
        tail=tail,
        align=align,
        levels=levels,
        walk_per=walk_per,
    )
    return out


def _backward_poisoned(S, probs, grad, scale, block=None, heads=1, levels=0, warps=None):
    from sparsekernels.kernels import softmax_csr as kernel

    block, num_warps = _config(S, block)
    shape = torch.broadcast_shapes(probs.shape, grad.shape)
    out = torch.full(shape, float("nan"), dtype=probs.dtype, device=probs.device)
    kernel.sparse_softmax_backward(
        row_offsets=S.row_offsets,
        probs=probs,
        grad=grad,
        out=out.view(-1, S.nnz),
        scale=scale,
        block=block,
        num_warps=warps or num_warps * heads,
        heads=heads,
        levels=levels,
    )
    return out


def _dense_softmax(S, values, scale):
    """Float64 dense softmax of scale * values with non-stored entries at -inf, at S's entries."""
    rows, cols = S.pattern.row_indices().cpu(), S.column_indices.long().cpu()
    dense = torch.full((*values.shape[:-1], *S.shape), float("-inf"), dtype=torch.float64)
    dense[..., rows, cols] = values.double().cpu() * scale
    return dense.softmax(-1)[..., rows, cols]


def _check_forward(got, want, dtype):
    # relative to each probability, with a floor for fp16's subnormals
    assert_close(got, want, want.abs().nan_to_num(1.0) + 1e-4, dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_forward_every_entry_written(device, dtype, gen):
    skip_interpreter_on_gpu_machine(device)
    S = random_csr(19, 80, 0.3, gen, dtype, device)  # empty rows; rows span several blocks of 32
    for scale, block in ((0.3, 32), (-2.0, 32), (0.3, 128)):  # 128: every row in one block
        got = _forward_poisoned(S, S.values, scale, block=block)
        _check_forward(got, _dense_softmax(S, S.values, scale), dtype)
    got = sk.sparse_softmax(S, 0.125, backend="triton").values  # the tuned block
    _check_forward(got, _dense_softmax(S, S.values, 0.125), dtype)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy on inf and NaN
@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("block", [32, 64])  # rows across two blocks; each row in one block
def test_forward_special_values(device, dtype, block, gen):
    """-inf rows give NaN, NaN and +inf poison their row, big values stay finite; across
    blocks (the online walk) and within one (the single read)."""
    skip_interpreter_on_gpu_machine(device)
    S = random_csr(7, 40, 1.0, gen, torch.float64, device, empty_rows=False)  # 40 entries a row
    v = S.values.clone().view(7, 40)
    v[0] = float("-inf")  # all masked: NaN, as dense softmax
    v[1, :32] = float("-inf")  # first block masked, the second is not
    v[2, 5] = float("nan")
    v[3, 35] = float("inf")
    v[4] = v[4] * 1e4  # large spread: exp must be shifted
    v[5, :32] = -1e4  # the running max grows in the second block
    v[6, ::3] = float("-inf")
    values = v.reshape(-1).to(dtype)
    got = _forward_poisoned(S, values, 0.5, block=block)
    want = _dense_softmax(S, values, 0.5)
    _check_forward(got, want, dtype)
    torch.testing.assert_close(
        got, reference.sparse_softmax(S.row_offsets, values, 0.5), equal_nan=True
    )


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy on empty rows
@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("scale", [1e300, -1e300, 1e-200])
def test_fp64_scale_outside_fp32s_range(device, scale, gen):
    """An fp64 scale split into two fp32s became inf + -inf = NaN past fp32's range (and lost
    its digits below it); the kernels now leave such a scale to the caller's side."""
    skip_interpreter_on_gpu_machine(device)
    S = random_csr(9, 70, 0.5, gen, torch.float64, device)  # rows across blocks of 32 and not
    values = randn(2, S.nnz, gen=gen, dtype=torch.float64, device=device) / scale
    for block in (32, 128):
        got = _forward_poisoned(S, values, scale, block=block)
        want = _dense_softmax(S, values, scale)
        torch.testing.assert_close(got, want.to(device), rtol=1e-12, atol=0)
        grad = randn(2, S.nnz, gen=gen, dtype=torch.float64, device=device)
        got = _backward_poisoned(S, want.to(device), grad, scale, block=block)
        want_d, bound = _backward_want_and_bound(S, want.to(device), grad, scale)
        assert ((got - want_d).abs() <= bound * 1e-12).all()


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("heads", "warps"), [(1, 1), (2, 1), (4, 2)])
@pytest.mark.parametrize("wide", [False, True], ids=["int32", "int64"])
def test_forward_tail(device, dtype, heads, warps, wide, gen, monkeypatch):
    """Rows read once as a block and a tail (block 16, tail 8): rows within the block, rows
    reaching into the tail, rows of exactly 24 entries, longer rows (the walk), empty rows,
    a row of -inf (NaN) and a NaN entry; 5 heads, the last program partly past the batch."""
    from sparsekernels.kernels import softmax_csr

    skip_interpreter_on_gpu_machine(device)
    monkeypatch.setattr(softmax_csr, "INT32_LIMIT", 0 if wide else 2**31)
    monkeypatch.setattr(softmax_csr, "INT32_ONLY_FOR_WALKS", False)
    lengths = [0, 3, 16, 17, 23, 24, 25, 40, 9, 0, 20]
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    cols = torch.cat([torch.randperm(48, generator=gen)[:k].sort().values for k in lengths])
    S = sk.CSRMatrix(offsets.to(device), cols.to(torch.int32).to(device),
                     torch.zeros(cols.numel(), dtype=dtype, device=device), (11, 48))  # fmt: skip
    values = randn(5, S.nnz, gen=gen, device=device).to(dtype)
    values[1, 19:35] = float("-inf")  # row 3 (17 entries): only its tail entry is finite
    values[2, 59:83] = float("-inf")  # row 5 (24 entries) all -inf: NaN, as dense softmax
    values[3, 55] = float("nan")  # row 4 (23 entries): a NaN in the tail
    got = _forward_poisoned(S, values, 0.7, block=16, heads=heads, tail=8, warps=warps)
    want = _dense_softmax(S, values, 0.7)
    _check_forward(got, want, dtype)

    skip_interpreter_on_gpu_machine(device)
    S = random_csr(9, 12, 0.5, gen, torch.float64, device)
    values = randn(S.nnz, 3, gen=gen, device=device).t()  # (3, nnz) with stride (1, 3)
    _check_forward(_forward_poisoned(S, values, 0.7), _dense_softmax(S, values, 0.7), torch.float64)
    got = sk.sparse_softmax(S.with_values(values), 0.7, backend="triton").values
    _check_forward(got, _dense_softmax(S, values, 0.7), torch.float64)
    one = random_csr(1, 50, 0.5, gen, torch.float32, device)  # a single row
    got = sk.sparse_softmax(one, backend="triton").values
    _check_forward(got, _dense_softmax(one, one.values, 1.0), torch.float32)
    none = random_csr(4, 3, 0.0, gen, torch.float32, device)  # no stored entries
    assert sk.sparse_softmax(none, backend="triton").values.shape == (0,)


def _padded(batch, nnz, dtype, device, fill):
    """A (batch, nnz) view of a (batch, nnz rounded up to 16) array filled with `fill`: each
    matrix 16-byte aligned, as grouped reads need."""
    return torch.full((batch, -(-nnz // 16) * 16), fill, dtype=dtype, device=device)[:, :nnz]


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("tail", [0, 8])
@pytest.mark.parametrize(("heads", "warps"), [(1, 1), (4, 2)])
@pytest.mark.parametrize("whole", [False, True], ids=["ragged-end", "whole-groups"])
@pytest.mark.parametrize("wide", [False, True], ids=["int32", "int64"])
def test_forward_aligned(device, dtype, tail, heads, warps, whole, wide, gen, monkeypatch):
    """Rows read once in whole 16-byte groups (align: 8 entries in 16 bits, 4 in fp32), block
    16, values and out padded to 16 entries a matrix: rows of whole groups, rows starting at
    every offset within a group, rows whose groups overflow the lanes (read entry by entry),
    rows reaching the tail, longer rows (the walk), empty rows and a single entry; the last
    row ending mid-group at the array's end (entry by entry: its group would pass the array)
    or on a group's end; 5 heads, a NaN entry and a row of -inf. Rows past the lanes are
    walked in groups (in the interpreter the plain walk is replaced by one writing NaN, so a
    row it took shows). The padding is never written; an unpadded input beside a padded
    output takes the entry-by-entry read (group_form: their batch strides differ modulo the
    group)."""
    from sparsekernels.kernels import softmax_csr

    skip_interpreter_on_gpu_machine(device)
    monkeypatch.setattr(softmax_csr, "INT32_LIMIT", 0 if wide else 2**31)
    align = 16 // dtype.itemsize
    lengths = [0, 3, 5, 16, 17, 9, 13, 24, 40, 1, 8, 16, 23, 11, 15, 2, 7, 5]
    if whole:  # the matrix ends on a group: its last row is read as groups too
        lengths.append(-sum(lengths) % 16 or 16)
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    cols = torch.cat([torch.randperm(48, generator=gen)[:k].sort().values for k in lengths])
    S = sk.CSRMatrix(offsets.to(device), cols.to(torch.int32).to(device),
                     torch.zeros(cols.numel(), dtype=dtype, device=device),
                     (len(lengths), 48))  # fmt: skip
    assert (S.nnz % 16 == 0) == whole
    values = _padded(5, S.nnz, dtype, device, float("nan"))  # padding read: NaN rows
    values.copy_(randn(5, S.nnz, gen=gen, device=device))
    values[1, 8:24] = float("-inf")  # row 3 (16 entries) all -inf: NaN, as dense softmax
    values[3, 45] = float("nan")  # a NaN in row 5
    values[4, 128:152] *= 40  # rows 10 and 11 (8 and 16 entries): whole groups, wide spread
    out = _padded(5, S.nnz, dtype, device, float("nan"))
    padding = out.as_strided((5, out.stride(0) - S.nnz), out.stride(), S.nnz)
    assert softmax_csr.group_form(values, out, align) == "aligned"
    with monkeypatch.context() as patch:
        if device == "cpu":  # rows past the lanes must be walked in groups (walk_in_groups)
            patch.setattr(softmax_csr, "walk_twice", _nan_walk_twice)
        softmax_csr.sparse_softmax(
            row_offsets=S.row_offsets, values=values, out=out, scale=0.7, block=16,
            num_warps=warps, heads=heads, tail=tail, align=align,
        )  # fmt: skip
    want = _dense_softmax(S, values, 0.7)
    _check_forward(out, want, dtype)
    assert padding.isnan().all()  # never written
    unpadded = values.contiguous()
    assert softmax_csr.group_form(unpadded, out, align) == ("aligned" if whole else None)
    got = _forward_poisoned(S, unpadded, 0.7, block=16, heads=heads, tail=tail, warps=warps,
                            align=align)  # fmt: skip
    _check_forward(got, want, dtype)
    with pytest.raises(ValueError, match="align"):
        _forward_poisoned(S, unpadded, 0.7, block=16, tail=4, align=8)


@triton.jit
def _nan_walk_twice(
    values, out, start, end, lanes, mask_h, scale, stride_ve, stride_oe,
    ACC_DTYPE: tl.constexpr, INDEX: tl.constexpr, BLOCK: tl.constexpr, BLOCK_H: tl.constexpr,
    WALK_PER: tl.constexpr,
):  # fmt: skip
    """softmax_csr.walk_twice's stand-in: the row's entries NaN (a row not walked in groups)."""
    for e in range(start, end, BLOCK):
        offs = (e + lanes)[None, :]
        nan = tl.full(offs.shape, float("nan"), ACC_DTYPE).to(out.dtype.element_ty)
        tl.store(out + offs * stride_oe, nan, mask=mask_h[:, None] & (offs < end))


@triton.jit
def _nan_read_once(
    values, out, start, end, lanes, mask_h, scale, stride_ve, stride_oe,
    ACC_DTYPE: tl.constexpr, INDEX: tl.constexpr, BLOCK: tl.constexpr, TAIL: tl.constexpr,
):  # fmt: skip
    """softmax_csr._read_once's stand-in: the row's entries NaN (a row not read in groups)."""
    offs = (start + lanes)[None, :]
    nan = tl.full(offs.shape, float("nan"), ACC_DTYPE).to(out.dtype.element_ty)
    tl.store(out + offs * stride_oe, nan, mask=mask_h[:, None] & (offs < end))
    if TAIL > 0:
        tail_offs = (start + BLOCK + tl.arange(0, TAIL).to(INDEX))[None, :]
        nan = tl.full(tail_offs.shape, float("nan"), ACC_DTYPE).to(out.dtype.element_ty)
        tl.store(out + tail_offs * stride_oe, nan, mask=mask_h[:, None] & (tail_offs < end))


def _phased_rows(offsets, nnz, stride, batch, heads, group, lanes) -> torch.Tensor:
    """(batch, rows) True where a row is read in groups in the phased form: the last head's
    groups end within the array, and a row within the lanes has its groups fit them for every
    head of its program (heads past the batch too); longer rows are walked in groups."""
    starts, ends = offsets[:-1].long(), offsets[1:].long()
    phase = torch.arange(-(-batch // heads) * heads) * stride % group
    worst = ((starts[None, :] + phase[:, None]) % group).view(-1, heads, starts.numel())
    fits = ((ends - starts) + worst.amax(1) <= lanes) | (ends - starts > lanes)  # (programs, rows)
    last = (batch - 1) * stride % group
    inside = (ends + last + group - 1) // group * group <= nnz + last
    return (fits & inside).repeat_interleave(heads, 0)[:batch]


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("tail", [0, 8])
@pytest.mark.parametrize(("heads", "warps"), [(1, 1), (4, 2)])
@pytest.mark.parametrize("extra", [0, 1], ids=["nnz%8=7", "nnz%16=8"])
@pytest.mark.parametrize("layout", ["contiguous", "strided-input", "mismatched"])
def test_forward_phased(device, dtype, tail, heads, warps, extra, layout, gen, monkeypatch):
    """Rows read once in whole 16-byte groups where the matrices do not start on a group:
    contiguous (5, nnz) arrays at nnz % 16 != 0 ("phased": each head's row at its own place in
    its groups), an input of batch stride nnz + group beside a contiguous output (phased: the
    strides agree modulo the group), and one of stride nnz + 1 (entry by entry). Rows of every
    length and start, empty rows, rows past the lanes (walked), a NaN entry and a row of -inf.
    In the interpreter the entry-by-entry read and the plain walk are replaced by ones that
    write NaN, so the rows the phased form must take (_phased_rows, rows past the lanes walked
    in groups) show that it took them."""
    from sparsekernels.kernels import softmax_csr

    skip_interpreter_on_gpu_machine(device)
    align = 16 // dtype.itemsize
    lengths = [0, 3, 5, 16, 17, 9, 13, 24, 40, 1, 8, 16, 23, 11, 15, 2, 7, 5] + [1] * extra
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    cols = torch.cat([torch.randperm(48, generator=gen)[:k].sort().values for k in lengths])
    S = sk.CSRMatrix(offsets.to(device), cols.to(torch.int32).to(device),
                     torch.zeros(cols.numel(), dtype=dtype, device=device),
                     (len(lengths), 48))  # fmt: skip
    assert S.nnz % 16 and (S.nnz % 8 == 0) == bool(extra)
    stride = {"contiguous": S.nnz, "strided-input": S.nnz + align, "mismatched": S.nnz + 1}
    stride = stride[layout]
    values = torch.full((5, stride), float("nan"), dtype=dtype, device=device)[:, : S.nnz]
    values.copy_(randn(5, S.nnz, gen=gen, device=device))
    values[1, 8:24] = float("-inf")  # row 3 all -inf: NaN, as dense softmax
    values[3, 45] = float("nan")  # a NaN in row 5
    out = torch.full((5, S.nnz), float("nan"), dtype=dtype, device=device)
    form = softmax_csr.group_form(values, out, align)
    assert form == (None if layout == "mismatched" else "phased")
    want = _dense_softmax(S, values, 0.7)
    grouped = torch.zeros(5, len(lengths), dtype=torch.bool)
    if device == "cpu" and form:  # the interpreter looks kernels' helpers up when called
        monkeypatch.setattr(softmax_csr, "_read_once", _nan_read_once)
        monkeypatch.setattr(softmax_csr, "walk_twice", _nan_walk_twice)
        grouped = _phased_rows(offsets, S.nnz, stride, 5, heads, align, 16 + tail)
        walked = torch.tensor(lengths) > 16 + tail
        assert grouped[:, walked].all()  # (the last row is short: no walk needs it)
        assert grouped.any() and not grouped.all()  # both reads
    softmax_csr.sparse_softmax(
        row_offsets=S.row_offsets, values=values, out=out, scale=0.7, block=16,
        num_warps=warps, heads=heads, tail=tail, align=align,
    )  # fmt: skip
    nan_rows = (torch.tensor(lengths) > 0) & ~grouped & (device == "cpu" and form is not None)
    entry_rows = S.pattern.row_indices().cpu()
    poisoned = nan_rows[:, entry_rows]  # (5, nnz): entries of rows read entry by entry
    assert out.cpu()[poisoned].isnan().all()
    want = torch.where(poisoned, float("nan"), want)
    _check_forward(out, want, dtype)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy on -inf rows
@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("levels", [1, 2])
@pytest.mark.parametrize(("heads", "warps", "tail"), [(1, 1, 0), (2, 2, 0), (1, 2, 8)])
@pytest.mark.parametrize("wide", [False, True], ids=["int32", "int64"])
def test_forward_levels(device, dtype, levels, heads, warps, tail, wide, gen, monkeypatch):
    """Rows past the block read once on 2 or 4 blocks' lanes (block 16): rows on each side of
    every width's edge (16, 17, 32, 33, 64, 65), rows past the widest (the walk), empty rows
    and one entry; a row of -inf (NaN) and a NaN entry in a wide row; 3 heads, the last
    program partly past the batch; with and without the tail below the block's edge. The
    backward's rows alike (p and g read once), in float64."""
    from sparsekernels.kernels import softmax_csr

    skip_interpreter_on_gpu_machine(device)
    monkeypatch.setattr(softmax_csr, "INT32_LIMIT", 0 if wide else 2**31)
    monkeypatch.setattr(softmax_csr, "INT32_ONLY_FOR_WALKS", False)
    lengths = [0, 1, 16, 17, 24, 25, 32, 33, 50, 64, 65, 90, 0, 7, 31]
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    cols = torch.cat([torch.randperm(96, generator=gen)[:k].sort().values for k in lengths])
    S = sk.CSRMatrix(offsets.to(device), cols.to(torch.int32).to(device),
                     torch.zeros(cols.numel(), dtype=dtype, device=device),
                     (len(lengths), 96))  # fmt: skip
    values = (randn(3, S.nnz, gen=gen, device=device) * 3).to(dtype)
    values[0, 58:83] = float("-inf")  # row 5 (25 entries) all -inf: NaN, as dense softmax
    values[1, 200] = float("nan")  # row 9 (64 entries, from 198): its row NaN
    values[2, 115:148] = -1e4  # row 7 (33 entries): the max among tiny values
    got = _forward_poisoned(
        S, values, 0.7, block=16, heads=heads, tail=tail, warps=warps, levels=levels
    )
    _check_forward(got, _dense_softmax(S, values, 0.7), dtype)
    with pytest.raises(ValueError, match="levels"):
        _forward_poisoned(S, values, 0.7, block=16, levels=3)
    if tail:
        return
    probs = _dense_softmax(S, values, 0.7).nan_to_num(0.5).to(device)  # finite p: each row's d
    grad = randn(3, S.nnz, gen=gen, device=device)
    got = _backward_poisoned(S, probs, grad, 0.7, block=16, heads=heads, levels=levels, warps=warps)
    want, bound = _backward_want_and_bound(S, probs, grad, 0.7)
    assert_close(got, want, bound, torch.float64)
    with pytest.raises(ValueError, match="levels"):
        _backward_poisoned(S, probs, grad, 0.7, block=16, levels=3)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy on -inf rows
@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("walk_per", "heads", "warps"), [(2, 1, 1), (4, 2, 1), (16, 1, 1)])
@pytest.mark.parametrize("wide", [False, True], ids=["int32", "int64"])
def test_forward_walk_per_thread(device, dtype, walk_per, heads, warps, wide, gen, monkeypatch):
    """The walk's max taken per thread (block 16, 2-16 entries a thread): rows walked over 2-6
    blocks ending anywhere in a step, a row whose max is its last entry alone, a row of -inf
    (NaN), a NaN and a +inf entry; rows within a block (read once), empty rows; 3 heads, the
    last program partly past the batch."""
    from sparsekernels.kernels import softmax_csr

    skip_interpreter_on_gpu_machine(device)
    monkeypatch.setattr(softmax_csr, "INT32_LIMIT", 0 if wide else 2**31)
    monkeypatch.setattr(softmax_csr, "INT32_ONLY_FOR_WALKS", False)
    lengths = [0, 17, 33, 40, 64, 90, 5, 0, 47, 31, 16, 81]
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    cols = torch.cat([torch.randperm(96, generator=gen)[:k].sort().values for k in lengths])
    S = sk.CSRMatrix(offsets.to(device), cols.to(torch.int32).to(device),
                     torch.zeros(cols.numel(), dtype=dtype, device=device),
                     (len(lengths), 96))  # fmt: skip
    values = (randn(3, S.nnz, gen=gen, device=device) * 3).to(dtype)
    values[0, 0:17] = float("-inf")  # row 1 (17 entries) all -inf: NaN
    values[1, 17:49] = -1e4  # row 2 (33 entries): its max the last entry alone
    values[2, 60] = float("nan")  # row 3 (40, from 50): NaN
    values[2, 120] = float("inf")  # row 4 (64, from 90): +inf makes it NaN too
    values[0, 250] = 50.0  # row 8 (47, from 249): one entry far above the rest
    got = _forward_poisoned(S, values, 0.7, block=16, heads=heads, warps=warps, walk_per=walk_per)
    _check_forward(got, _dense_softmax(S, values, 0.7), dtype)
    with pytest.raises(ValueError, match="walk_per"):
        _forward_poisoned(S, values, 0.7, block=16, walk_per=3)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("block", [16, 64])  # rows across blocks; every row in one block
@pytest.mark.parametrize("wide", [False, True], ids=["int32", "int64"])
def test_heads_share_a_program(device, block, wide, gen, monkeypatch):
    """Several matrices of one row per program: 5 heads in programs of 2 and 4 (the last one
    partly past the batch), strided values, forward and backward, each against float64; entry
    offsets in int32 and (forced, as past 2^31) int64."""
    from sparsekernels.kernels import softmax_csr

    skip_interpreter_on_gpu_machine(device)
    if wide:
        monkeypatch.setattr(softmax_csr, "INT32_LIMIT", 0)
    else:  # int32 whatever the rows' lengths
        monkeypatch.setattr(softmax_csr, "INT32_ONLY_FOR_WALKS", False)
    S = random_csr(11, 40, 0.5, gen, torch.float64, device)  # empty rows; rows up to 40
    values = randn(S.nnz, 5, gen=gen, device=device).t()  # (5, nnz) with stride (1, 5)
    grad = randn(5, S.nnz, gen=gen, device=device)
    for heads in (2, 4):
        got = _forward_poisoned(S, values, 0.7, block=block, heads=heads)
        _check_forward(got, _dense_softmax(S, values, 0.7), torch.float64)
        got = _backward_poisoned(S, got, grad, 0.7, block=block, heads=heads)
        want, bound = _backward_want_and_bound(S, _dense_softmax(S, values, 0.7), grad, 0.7)
        assert_close(got, want, bound, torch.float64)
        one = _forward_poisoned(S, values[0], 0.7, block=block, heads=heads)  # unbatched
        _check_forward(one, _dense_softmax(S, values[0], 0.7), torch.float64)


def test_index_width_rule(monkeypatch):
    """int32 offsets where the average row is walked past a block and every offset fits; int64
    for rows read once (faster there on the H200) and past 2^31."""
    import triton.language as tl

    from sparsekernels.kernels import softmax_csr

    assert softmax_csr._index(4096 * 2048, 4096, 1024, 1, 1) == tl.int32  # causal-like
    assert softmax_csr._index(4096 * 256, 4096, 256, 1, 1) == tl.int64  # one read a row
    assert softmax_csr._index(2**30, 4, 1024, 2, 1) == tl.int64  # offsets past 2^31
    monkeypatch.setattr(softmax_csr, "INT32_ONLY_FOR_WALKS", False)
    assert softmax_csr._index(4096 * 256, 4096, 256, 1, 1) == tl.int32


def test_heads_per_program_rule():
    from sparsekernels.kernels.sddmm_tuning import softmax_csr_config

    assert softmax_csr_config(4096 * 256, 4096, 16).heads == 2  # rows of 256: one warp each
    assert softmax_csr_config(4096 * 256, 4096, 16).num_warps == 2
    assert softmax_csr_config(4096 * 512, 4096, 16).heads == 2  # two warps a row
    assert softmax_csr_config(4096 * 512, 4096, 16).num_warps == 4
    assert softmax_csr_config(4096 * 2048, 4096, 16).heads == 1  # four warps a row
    assert softmax_csr_config(4096 * 256, 4096, 3).heads == 2  # the last program half full
    assert softmax_csr_config(4096 * 256, 4096, 1).heads == 1


def test_tail_rule(monkeypatch, request):
    """On by default; an average row whose entries past half its block, and an eighth more, fit
    fewer lanes than the other half gets a tail (strided:128:128's 141: 128 + 32); off, none.
    The backward's configuration never has one."""
    from sparsekernels.kernels import sddmm_tuning

    forward = sddmm_tuning.softmax_forward_config
    request.addfinalizer(forward.cache_clear)
    config = forward(4096 * 141, 4096, 16)
    assert (config.block, config.tail) == (256, 32)  # 141 + 17 - 128 = 30
    assert sddmm_tuning.softmax_csr_config(4096 * 141, 4096, 16).tail == 0
    assert forward(4096 * 129, 4096, 16).tail == 32  # 129 + 16 - 128
    assert forward(4096 * 200, 4096, 16).tail == 0  # 97 past: no saving
    assert forward(4096 * 256, 4096, 16).tail == 0
    assert forward(4096 * 410, 4096, 16).tail == 0  # 205 past 256
    assert forward(4096 * 300, 4096, 16).tail == 128  # 256 + 128 of 512
    assert forward(4096 * 20, 4096, 16).tail == 0  # a block of 32
    monkeypatch.setattr(sddmm_tuning, "SOFTMAX_TAIL", False)
    forward.cache_clear()
    assert forward(4096 * 141, 4096, 16).tail == 0


def test_forward_tiles_rule():
    """The forward's heads and warps (the H200 sweep in sddmm_tuning): a tail's rows of up to
    256 lanes four heads on two warps in int32; blocks of 512 one warp a head; else the
    backward's, with blocks of 1024 walking long rows a step's max per thread."""
    from sparsekernels.kernels.sddmm_tuning import softmax_csr_config, softmax_forward_config

    tail = softmax_forward_config(4096 * 141, 4096, 16)  # 128 + 32 lanes
    assert (tail.heads, tail.num_warps, tail.int32) == (4, 2, True)
    assert softmax_forward_config(4096 * 141, 4096, 1).heads == 1  # one matrix: one head
    assert softmax_forward_config(4096 * 141, 4096, 1).num_warps == 1
    wide_tail = softmax_forward_config(4096 * 300, 4096, 16)  # 256 + 128 lanes
    assert (wide_tail.heads, wide_tail.num_warps, wide_tail.int32) == (2, 2, True)
    rows_512 = softmax_forward_config(4096 * 410, 4096, 16)  # two heads of 512
    assert (rows_512.heads, rows_512.num_warps, rows_512.int32) == (2, 2, True)
    assert softmax_csr_config(4096 * 410, 4096, 16).num_warps == 4
    local = 4096 * 256  # no tail, not 512: the backward's
    assert softmax_forward_config(local, 4096, 16) == softmax_csr_config(local, 4096, 16)
    causal = softmax_forward_config(4096 * 2048, 4096, 16)  # walked: the max per thread
    assert (causal.block, causal.num_warps, causal.heads, causal.walk_per) == (1024, 4, 1, 8)
    assert softmax_csr_config(4096 * 2048, 4096, 16).walk_per == 1  # the backward's: no walk_per


def test_forward_align_rule(monkeypatch, request):
    """By default only walked rows (causal's 2048 a row) read 16-bit values in groups of 8
    entries (16 bytes); with SOFTMAX_ALIGN rows read once too; fp32 and fp64 entry by entry;
    SOFTMAX_ALIGN_WALKS off, none."""
    from sparsekernels.kernels import sddmm_tuning

    forward = sddmm_tuning.softmax_forward_config
    request.addfinalizer(forward.cache_clear)
    for average in (141, 256, 410):  # the tail's rows, one block, 512
        assert forward(4096 * average, 4096, 16, 2).align == 0
    walked = forward(4096 * 2048, 4096, 16, 2)
    assert (walked.align, walked.walk_per) == (8, 8)
    assert forward(4096 * 2048, 4096, 16, 4).align == 0
    monkeypatch.setattr(sddmm_tuning, "SOFTMAX_ALIGN_WALKS", False)
    forward.cache_clear()
    assert forward(4096 * 2048, 4096, 16, 2).align == 0
    monkeypatch.setattr(sddmm_tuning, "SOFTMAX_ALIGN", True)
    forward.cache_clear()
    for average in (141, 256, 410, 2048):  # the tail's rows, one block, 512, the walk
        assert forward(4096 * average, 4096, 16, 2).align == 8
        assert forward(4096 * average, 4096, 16, 4).align == 0
        assert forward(4096 * average, 4096, 16, 8).align == 0
    assert forward(4096 * 141, 4096, 16, 2).tail == 32  # the tail stays


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_op_aligned(device, dtype, gen, monkeypatch, request):
    """The op with SOFTMAX_ALIGN on, 16-bit values padded to 16 entries a matrix: 3 heads over
    rows of every length and start, empty rows; its output padded alike; unpadded (the phased
    groups), its output unpadded alike; one matrix too; forward against float64 dense
    softmax."""
    from sparsekernels.kernels import sddmm_tuning

    skip_interpreter_on_gpu_machine(device)
    monkeypatch.setattr(sddmm_tuning, "SOFTMAX_ALIGN", True)
    sddmm_tuning.softmax_forward_config.cache_clear()
    request.addfinalizer(sddmm_tuning.softmax_forward_config.cache_clear)
    S = random_csr(37, 70, 0.4, gen, dtype, device)  # ~28 a row: block 32, rows past it walk
    assert S.nnz % 16
    assert sddmm_tuning.softmax_forward_config(S.nnz, 37, 3, dtype.itemsize).align == 8
    values = _padded(3, S.nnz, dtype, device, float("nan"))
    values.copy_(randn(3, S.nnz, gen=gen, device=device))
    probs = sk.sparse_softmax(S.with_values(values), 0.6, backend="triton").values
    assert probs.stride() == values.stride()  # padded as values: the same groups
    _check_forward(probs, _dense_softmax(S, values, 0.6), dtype)
    unpadded = values.contiguous()
    probs = sk.sparse_softmax(S.with_values(unpadded), 0.6, backend="triton").values
    assert probs.stride() == unpadded.stride()  # contiguous as values: the same groups
    _check_forward(probs, _dense_softmax(S, values, 0.6), dtype)
    one = sk.sparse_softmax(S.with_values(values[0]), 0.6, backend="triton").values  # unbatched
    _check_forward(one, _dense_softmax(S, values[0], 0.6), dtype)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy on -inf rows
@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_op_walks_with_the_max_per_thread(device, dtype, gen, monkeypatch, request):
    """The op with the per-thread walk lowered to a small block (128 on one warp: 4 entries a
    thread): one matrix of rows around 150 entries (walked past the block), a row of -inf,
    empty rows; against float64 dense softmax."""
    from sparsekernels.kernels import sddmm_tuning

    skip_interpreter_on_gpu_machine(device)
    monkeypatch.setattr(sddmm_tuning, "SOFTMAX_WALK_PER_THREAD_BLOCK", 64)
    sddmm_tuning.softmax_forward_config.cache_clear()
    request.addfinalizer(sddmm_tuning.softmax_forward_config.cache_clear)
    S = random_csr(20, 300, 0.5, gen, dtype, device)
    config = sddmm_tuning.softmax_forward_config(S.nnz, 20, 1, dtype.itemsize)
    assert (config.walk_per, config.heads) == (config.block // 32, 1) and config.walk_per > 1
    assert S.row_offsets.diff().max() > config.block + config.tail  # some rows walk
    values = randn(S.nnz, gen=gen, device=device).to(dtype)
    row = S.row_offsets[3:5].tolist()
    values[row[0] : row[1]] = float("-inf")  # row 3 all -inf: NaN
    probs = sk.sparse_softmax(S.with_values(values), 0.6, backend="triton").values
    _check_forward(probs, _dense_softmax(S, values, 0.6), dtype)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy on -inf rows
@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_op_walks_in_groups_by_default(device, dtype, gen, monkeypatch, request):
    """Walked rows read in 16-byte groups without SOFTMAX_ALIGN (SOFTMAX_ALIGN_WALKS; the walk
    lowered to a block of 64, a head a program as causal's 1024): 3 heads on contiguous arrays
    whose nnz % 16 != 0 (the phased groups, each head's counted from the array's start), a row
    of -inf, empty rows; then a view of padded arrays; forward against float64 dense
    softmax."""
    from sparsekernels.kernels import sddmm_tuning

    skip_interpreter_on_gpu_machine(device)
    monkeypatch.setattr(sddmm_tuning, "SOFTMAX_WALK_PER_THREAD_BLOCK", 64)
    monkeypatch.setattr(sddmm_tuning, "SOFTMAX_MAX_HEADS", 1)
    sddmm_tuning.softmax_forward_config.cache_clear()
    request.addfinalizer(sddmm_tuning.softmax_forward_config.cache_clear)
    S = random_csr(20, 300, 0.25, gen, dtype, device)
    if S.nnz % 16 == 0:  # (phased groups need a ragged batch stride)
        S = random_csr(20, 299, 0.25, gen, dtype, device)
    assert S.nnz % 16 and not sddmm_tuning.SOFTMAX_ALIGN
    config = sddmm_tuning.softmax_forward_config(S.nnz, 20, 3, dtype.itemsize)
    assert (config.align, config.heads) == (8, 1) and config.walk_per > 1
    assert S.row_offsets.diff().max() > config.block  # some rows walk
    values = randn(3, S.nnz, gen=gen, device=device).to(dtype)
    row = S.row_offsets[3:5].tolist()
    values[1, row[0] : row[1]] = float("-inf")  # head 1's row 3 all -inf: NaN
    probs = sk.sparse_softmax(S.with_values(values), 0.6, backend="triton").values
    _check_forward(probs, _dense_softmax(S, values, 0.6), dtype)
    padded = _padded(3, S.nnz, dtype, device, float("nan"))
    padded.copy_(values)
    probs = sk.sparse_softmax(S.with_values(padded), 0.6, backend="triton").values
    _check_forward(probs, _dense_softmax(S, values, 0.6), dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_op_with_tail(device, gen, monkeypatch, request):
    """The op with the forward's tail on: rows around the average (read once as a half block
    and a tail), longer ones (walked), empty ones; 3 heads; forward and backward against
    float64."""
    from sparsekernels.kernels import sddmm_tuning

    skip_interpreter_on_gpu_machine(device)
    monkeypatch.setattr(sddmm_tuning, "SOFTMAX_TAIL", True)
    sddmm_tuning.softmax_forward_config.cache_clear()
    request.addfinalizer(sddmm_tuning.softmax_forward_config.cache_clear)
    lengths = [37, 40, 0, 35, 33, 64, 39, 90, 36, 38, 1, 49]  # average 39: block 64, tail 16
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    cols = torch.cat([torch.randperm(96, generator=gen)[:k].sort().values for k in lengths])
    nnz = cols.numel()
    config = sddmm_tuning.softmax_forward_config(nnz, len(lengths), 3)
    assert (config.tail, config.heads, config.int32) == (16, 4, True)  # rows up to 48
    S = sk.CSRMatrix(offsets.to(device), cols.to(torch.int32).to(device),
                     torch.zeros(nnz, dtype=torch.float64, device=device), (12, 96))  # fmt: skip
    values = randn(3, nnz, gen=gen, device=device).requires_grad_()
    probs = sk.sparse_softmax(S.with_values(values), 0.6, backend="triton").values
    _check_forward(probs.detach(), _dense_softmax(S, values.detach(), 0.6), torch.float64)
    grad = randn(3, nnz, gen=gen, device=device)
    probs.backward(grad)
    want, bound = _backward_want_and_bound(S, probs.detach(), grad, 0.6)
    assert_close(values.grad, want, bound, torch.float64)


def _backward_want_and_bound(S, probs, grad, scale):
    """scale * p * (g - sum_row(p g)) in float64, and its bound scale p (|g| + sum_row(p |g|))."""
    rows = S.pattern.row_indices()
    p, g = probs.double().to(rows.device), grad.double()
    shape = (*torch.broadcast_shapes(p.shape[:-1], g.shape[:-1]), S.shape[0])
    dots = torch.zeros(shape, dtype=torch.float64, device=p.device).index_add_(-1, rows, p * g)
    abs_dots = torch.zeros_like(dots).index_add_(-1, rows, (p * g).abs())
    want = scale * p * (g - dots[..., rows])
    # with a floor for fp16's subnormals
    return want, abs(scale) * p * (g.abs() + abs_dots[..., rows]) + 1e-4


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_backward_every_entry_written(device, dtype, gen):
    skip_interpreter_on_gpu_machine(device)
    S = random_csr(19, 80, 0.3, gen, dtype, device)
    probs = sk.sparse_softmax(S, 0.3).values
    grad = randn(2, S.nnz, gen=gen, dtype=dtype, device=device)  # batched grad, unbatched probs
    for block in (32, 128):  # rows across blocks (two passes); every row in one block
        got = _backward_poisoned(S, probs, grad, 0.3, block=block)
        assert_close(got, *_backward_want_and_bound(S, probs, grad, 0.3), dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_backward_through_kernel(device, gen):
    skip_interpreter_on_gpu_machine(device)
    S = random_csr(10, 12, 0.5, gen, torch.float64, device)
    values = randn(2, S.nnz, gen=gen, device=device).requires_grad_()
    grad = randn(2, S.nnz, gen=gen, device=device)
    sk.sparse_softmax(S.with_values(values), 0.6, backend="triton").values.backward(grad)
    dense_in = values.detach().clone().requires_grad_()
    rows, cols = S.pattern.row_indices(), S.column_indices.long()
    dense = torch.full((2, *S.shape), float("-inf"), dtype=torch.float64, device=device)
    dense[:, rows, cols] = dense_in * 0.6
    probs = dense.softmax(-1)[:, rows, cols]
    probs.backward(grad)
    torch.testing.assert_close(values.grad, dense_in.grad)
    # a stride-0 gradient (from .sum()) reaches the kernel as it is
    values.grad = None
    sk.sparse_softmax(S.with_values(values), 0.6, backend="triton").values.sum().backward()
    torch.testing.assert_close(values.grad, torch.zeros_like(values), atol=1e-12, rtol=0)


def test_dispatch_rules():
    for op in ("sparse_softmax", "sparse_softmax_backward"):
        assert _dispatch.backends(op)[0] == "triton"
        cpu = _dispatch.Problem(torch.device("cpu"), torch.float32, {"batch": 1})
        assert _dispatch.choose(op, cpu) == "reference"
        huge = _dispatch.Problem(torch.device("cuda"), torch.float32, {"batch": 70000})
        assert any("grid limit" in r for r in _dispatch.explain(op, huge)["triton"])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape,density", [((1024, 4096, 4), 0.5), ((3000, 300, 2), 0.05)])
def test_large_on_cuda(dtype, shape, density, gen):
    M, N, batch = shape
    S = random_csr(M, N, density, gen, dtype, "cuda")
    values = randn(batch, S.nnz, gen=gen, dtype=dtype, device="cuda").requires_grad_()
    got = sk.sparse_softmax(S.with_values(values), 0.125)  # automatic choice: triton on CUDA
    _check_forward(got.values, _dense_softmax(S, values.detach(), 0.125), dtype)
    grad = randn(batch, S.nnz, gen=gen, dtype=dtype, device="cuda")
    (d_values,) = torch.autograd.grad(got.values, values, grad)
    want, bound = _backward_want_and_bound(S, got.values.detach(), grad, 0.125)
    assert_close(d_values, want, bound, dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_opcheck_triton(device, gen):
    skip_interpreter_on_gpu_machine(device)
    S = random_csr(6, 5, 0.5, gen, torch.float64, device)
    values = randn(2, S.nnz, gen=gen, device=device).requires_grad_()
    torch.library.opcheck(
        torch.ops.sparsekernels.sparse_softmax.default, (S.row_offsets, values, 0.7, "triton")
    )
    probs = sk.sparse_softmax(S.with_values(values.detach()), 0.7).values
    grad = randn(2, S.nnz, gen=gen, device=device)
    torch.library.opcheck(
        torch.ops.sparsekernels.sparse_softmax_backward.default,
        (S.row_offsets, probs, grad, 0.7, "triton"),
    )
