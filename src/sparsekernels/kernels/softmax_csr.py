"""CSR row softmax, forward and backward: one program owns one row of BLOCK_H matrices that
share the pattern (attention heads), one warp or more each.

Forward: probs = softmax(scale * values) over the row's stored entries. A row of at most BLOCK
entries (the block is sized to an average row) is read once and its probabilities written from
registers. A longer row is walked BLOCK entries at a time keeping a running max and a running
sum of exponentials per lane (online softmax, fp32; fp64 for fp64), the lanes combined, then
walked again to write exp(z - max) / sum; or, with LEVELS, read once too on 2 or 4 blocks'
lanes, whichever is the fewest that hold it (a causal pattern's rows grow one entry a row, so
neighbouring programs take the same branch). Exponentials are taken in base 2 (log2(e) folded
into the scale) and each row's sum inverted once: the kernel is bound by instructions issued,
and compiled for sm_90 its single-read branch then issues 13% fewer (27-31% fewer in the
walks).
Rows may also be read and written in whole 16-byte groups from the one holding their start
(ALIGN, kernels/softmax_csr_groups.py: vector loads and stores, at any batch stride), long rows
walked in groups; rows whose groups would not fit the lanes, or would pass the array's end, are
read entry by entry (the walks: kernels/softmax_csr_walks.py).
As the reference does, a row whose max is -inf is
shifted by 0 instead, so a row of all -inf gives 0 / 0 = NaN like dense softmax; a NaN or +inf
makes its row NaN; empty rows are not touched.

Backward: d(values) = scale * p * (g - sum_row(p * g)): a row within BLOCK in one read, a
longer one in a pass for the dot and one to write.

`scale` travels as two fp32 numbers (scale_hi + scale_lo, rebuilt in the accumulation dtype),
because Triton passes Python floats as fp32: fp64 inputs see scale to ~48 bits, fp32 inputs see
fp32(scale) exactly as PyTorch's `tensor * scale` does. An fp64 scale past fp32's range (or
below 2^-100) is applied outside: to the values before the forward, to the backward's result.

Limit: with log2(e) folded into the scale, a row whose scaled scores pass fp32's max / log2(e)
(2.4e38; fp32 or bf16 data) overflows to inf and comes out NaN, where dense softmax gives its
ties and zeros. Writing such rows again in base e after the common path cost 26% on causal
bf16 rows and 7% on random:0.1 (H100, Triton 3.6, benchmarks/sweeps/softmax_rare_path.py),
for scores no model makes; the reference backend (and the CPU) computes them.

Head offsets are int64 (batch * nnz may pass 2^31); a row's entry offsets are INDEX: int32 where
rows are long enough to be walked (_index says why) unless one within a matrix could pass 2^31
(INT32_LIMIT). `lanes` carries INDEX into
the loops (the loop variable is a small Python int in the interpreter).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._sizes import next_power_of_2
from .softmax_csr_groups import (
    head_phases,
    read_in_groups,
    read_phased,
    read_whole_groups,
    walk_in_groups,
)
from .softmax_csr_walks import walk_twice

LOG2_E: tl.constexpr = tl.constexpr(1.4426950408889634)


@triton.jit
def _read_once(
    values, out, start, end, lanes, mask_h, scale, stride_ve, stride_oe,
    ACC_DTYPE: tl.constexpr, INDEX: tl.constexpr, BLOCK: tl.constexpr, TAIL: tl.constexpr,
):  # fmt: skip
    """A row of at most BLOCK + TAIL entries in registers: one read, one write."""
    offs = (start + lanes)[None, :]
    live = mask_h[:, None] & (offs < end)
    z = tl.load(values + offs * stride_ve, mask=live, other=float("-inf")).to(ACC_DTYPE)
    z = tl.where(live, z * scale, float("-inf"))
    row_max = tl.max(z, axis=1)
    if TAIL > 0:  # the entries past BLOCK, on TAIL lanes instead of another BLOCK
        tail_lanes = tl.arange(0, TAIL).to(INDEX)
        tail_offs = (start + BLOCK + tail_lanes)[None, :]
        tail_live = mask_h[:, None] & (tail_offs < end)
        zt = tl.load(values + tail_offs * stride_ve, mask=tail_live, other=float("-inf"))
        zt = tl.where(tail_live, zt.to(ACC_DTYPE) * scale, float("-inf"))
        row_max = tl.maximum(row_max, tl.max(zt, axis=1))
    row_shift = tl.where(row_max == float("-inf"), 0.0, row_max)[:, None]
    exps = tl.exp2(z - row_shift)  # a masked lane: 2^-inf = 0
    row_sum = tl.sum(exps, axis=1)
    if TAIL > 0:
        tail_exps = tl.exp2(zt - row_shift)
        row_sum += tl.sum(tail_exps, axis=1)
    inverse = (1.0 / row_sum)[:, None]
    tl.store(out + offs * stride_oe, (exps * inverse).to(out.dtype.element_ty), mask=live)
    if TAIL > 0:
        tail_p = (tail_exps * inverse).to(out.dtype.element_ty)
        tl.store(out + tail_offs * stride_oe, tail_p, mask=tail_live)


@triton.jit
def _softmax_csr_kernel(
    row_offsets,  # (M + 1,) int32/int64
    values,  # (nnz,) or (batch, nnz): strides stride_vb (0 when unbatched), stride_ve
    out,  # (batch, nnz): strides stride_ob, stride_oe
    scale_hi,
    scale_lo,
    batch,  # matrices in out; program_id(1) takes BLOCK_H of them
    nnz,  # entries of one matrix (a group read past it would leave the array)
    stride_vb,
    stride_ve,
    stride_ob,
    stride_oe,
    ACC_DTYPE: tl.constexpr,
    INDEX: tl.constexpr,  # int32 when every entry offset within a matrix fits, else int64
    BLOCK: tl.constexpr,
    BLOCK_H: tl.constexpr,
    TAIL: tl.constexpr,  # > 0: rows up to BLOCK + TAIL entries are read once, as two pieces
    ALIGN: tl.constexpr,  # > 1: rows read once in whole groups of ALIGN entries (16 bytes)
    EDGE: tl.constexpr,  # with ALIGN: lanes for a row's partial edge groups (softmax_csr_groups)
    LEVELS: tl.constexpr,  # rows up to BLOCK * 2^LEVELS (<= 2) read once on 2 or 4 BLOCK lanes
    WALK_PER: tl.constexpr,  # > 1: a walk's max taken per thread over this many entries a step
    PHASED: tl.constexpr = False,  # with ALIGN: the batch strides not multiples of 16 entries
    # (equal modulo ALIGN): groups counted from the arrays' starts, each head's own (read_phased)
    WALK_GROUPS: tl.constexpr = False,  # with ALIGN: long rows walked in groups
):
    row = tl.program_id(0).to(INDEX)
    heads = tl.program_id(1).to(tl.int64) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = heads < batch
    start = tl.load(row_offsets + row).to(INDEX)
    end = tl.load(row_offsets + row + 1).to(INDEX)
    values_0, out_0 = values, out  # (PHASED takes its own head offsets)
    values += heads[:, None] * stride_vb
    out += heads[:, None] * stride_ob
    # z in base 2 (log2(e) folded into the scale) and one reciprocal a row: the kernel is bound
    # by instructions issued (Nsight Compute), and exp's multiply and a division an entry cost
    # more instructions than the loads and stores.
    scale = (tl.cast(scale_hi, ACC_DTYPE) + tl.cast(scale_lo, ACC_DTYPE)) * LOG2_E
    lanes = tl.arange(0, BLOCK).to(INDEX)  # e + lanes is INDEX whatever e's type (interpreter)

    if PHASED:  # rows read once in whole 16-byte groups, each head's row at its own phase
        if read_phased(
            values_0, out_0, start, end, lanes, heads, mask_h, scale, batch, nnz, stride_vb,
            stride_ob, stride_ve, stride_oe, ACC_DTYPE, INDEX, BLOCK, TAIL, ALIGN, EDGE,
        ):  # fmt: skip
            return
    elif ALIGN > 1:  # rows read once in whole 16-byte groups: vector loads and stores
        if (start % ALIGN == 0) & (end % ALIGN == 0) & (end - start <= BLOCK):
            read_whole_groups(
                values, out, start, end, lanes, mask_h, scale, stride_ve, stride_oe, ACC_DTYPE,
                ALIGN,
            )  # fmt: skip
            return
        first = start // ALIGN * ALIGN
        if (end - first <= BLOCK + TAIL) & ((end + ALIGN - 1) // ALIGN * ALIGN <= nnz):
            read_in_groups(
                values, out, start, end, lanes, mask_h, scale, stride_ve, stride_oe, ACC_DTYPE,
                INDEX, BLOCK, TAIL, ALIGN, EDGE,
            )  # fmt: skip
            return
    if end - start <= BLOCK + TAIL:  # the whole row in registers: one read (empty: no store)
        _read_once(
            values, out, start, end, lanes, mask_h, scale, stride_ve, stride_oe, ACC_DTYPE,
            INDEX, BLOCK, TAIL,
        )  # fmt: skip
    elif (LEVELS >= 1) & (end - start <= 2 * BLOCK):  # a longer row still read once, on twice
        lanes_2 = tl.arange(0, 2 * BLOCK).to(INDEX)  # the lanes: no second read, no rescaling
        _read_once(
            values, out, start, end, lanes_2, mask_h, scale, stride_ve, stride_oe, ACC_DTYPE,
            INDEX, 2 * BLOCK, 0,
        )  # fmt: skip
    elif (LEVELS >= 2) & (end - start <= 4 * BLOCK):
        lanes_4 = tl.arange(0, 4 * BLOCK).to(INDEX)
        _read_once(
            values, out, start, end, lanes_4, mask_h, scale, stride_ve, stride_oe, ACC_DTYPE,
            INDEX, 4 * BLOCK, 0,
        )  # fmt: skip
    elif WALK_GROUPS:  # long rows walked in whole groups where their groups end in the array
        if PHASED:
            phase, base_v, base_o, inside = head_phases(
                heads, batch, nnz, stride_vb, stride_ob, end, INDEX, ALIGN
            )
            if inside:
                walk_in_groups(
                    values_0 + base_v[:, None], out_0 + base_o[:, None], (start + phase)[:, None],
                    (end + phase)[:, None], mask_h, scale, stride_ve, stride_oe, ACC_DTYPE, INDEX,
                    BLOCK, BLOCK_H, ALIGN, EDGE, True,
                )  # fmt: skip
            else:
                walk_twice(
                    values, out, start, end, lanes, mask_h, scale, stride_ve, stride_oe,
                    ACC_DTYPE, INDEX, BLOCK, BLOCK_H, WALK_PER,
                )  # fmt: skip
        elif (end + ALIGN - 1) // ALIGN * ALIGN <= nnz:
            walk_in_groups(
                values, out, start, end, mask_h, scale, stride_ve, stride_oe, ACC_DTYPE, INDEX,
                BLOCK, BLOCK_H, ALIGN, EDGE,
            )  # fmt: skip
        else:
            walk_twice(
                values, out, start, end, lanes, mask_h, scale, stride_ve, stride_oe, ACC_DTYPE,
                INDEX, BLOCK, BLOCK_H, WALK_PER,
            )  # fmt: skip
    else:
        walk_twice(
            values, out, start, end, lanes, mask_h, scale, stride_ve, stride_oe, ACC_DTYPE, INDEX,
            BLOCK, BLOCK_H, WALK_PER,
        )  # fmt: skip


@triton.jit
def _backward_once(
    probs, grad, out, start, end, lanes, mask_h, scale, stride_pe, stride_ge, stride_oe,
    ACC_DTYPE: tl.constexpr,
):  # fmt: skip
    """A row within the lanes in registers: one read of p and g, one write."""
    offs = (start + lanes)[None, :]
    mask = mask_h[:, None] & (offs < end)
    p = tl.load(probs + offs * stride_pe, mask=mask, other=0.0).to(ACC_DTYPE)
    g = tl.load(grad + offs * stride_ge, mask=mask, other=0.0).to(ACC_DTYPE)
    d = scale * p * (g - tl.sum(p * g, axis=1)[:, None])
    tl.store(out + offs * stride_oe, d.to(out.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_csr_backward_kernel(
    row_offsets,  # (M + 1,) int32/int64
    probs,  # (nnz,) or (batch, nnz): strides stride_pb (0 when unbatched), stride_pe
    grad,  # (nnz,) or (batch, nnz): strides stride_gb (0 when unbatched), stride_ge
    out,  # (batch, nnz): strides stride_ob, stride_oe
    scale_hi,
    scale_lo,
    batch,  # matrices in out; program_id(1) takes BLOCK_H of them
    stride_pb,
    stride_pe,
    stride_gb,
    stride_ge,
    stride_ob,
    stride_oe,
    ACC_DTYPE: tl.constexpr,
    INDEX: tl.constexpr,  # int32 when every entry offset within a matrix fits, else int64
    BLOCK: tl.constexpr,
    BLOCK_H: tl.constexpr,
    LEVELS: tl.constexpr,  # rows up to BLOCK * 2^LEVELS (<= 2) read once on 2 or 4 BLOCK lanes
):
    row = tl.program_id(0).to(INDEX)
    heads = tl.program_id(1).to(tl.int64) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = heads < batch
    start = tl.load(row_offsets + row).to(INDEX)
    end = tl.load(row_offsets + row + 1).to(INDEX)
    probs += heads[:, None] * stride_pb
    grad += heads[:, None] * stride_gb
    out += heads[:, None] * stride_ob
    scale = tl.cast(scale_hi, ACC_DTYPE) + tl.cast(scale_lo, ACC_DTYPE)
    lanes = tl.arange(0, BLOCK).to(INDEX)

    if end - start <= BLOCK:  # the whole row in registers: one read of p and g
        _backward_once(
            probs, grad, out, start, end, lanes, mask_h, scale, stride_pe, stride_ge, stride_oe,
            ACC_DTYPE,
        )  # fmt: skip
    elif (LEVELS >= 1) & (end - start <= 2 * BLOCK):  # still one read, on twice the lanes
        lanes_2 = tl.arange(0, 2 * BLOCK).to(INDEX)
        _backward_once(
            probs, grad, out, start, end, lanes_2, mask_h, scale, stride_pe, stride_ge,
            stride_oe, ACC_DTYPE,
        )  # fmt: skip
    elif (LEVELS >= 2) & (end - start <= 4 * BLOCK):
        lanes_4 = tl.arange(0, 4 * BLOCK).to(INDEX)
        _backward_once(
            probs, grad, out, start, end, lanes_4, mask_h, scale, stride_pe, stride_ge,
            stride_oe, ACC_DTYPE,
        )  # fmt: skip
    else:
        acc = tl.zeros((BLOCK_H, BLOCK), dtype=ACC_DTYPE)
        for e in range(start, end, BLOCK):
            offs = (e + lanes)[None, :]
            mask = mask_h[:, None] & (offs < end)
            p = tl.load(probs + offs * stride_pe, mask=mask, other=0.0).to(ACC_DTYPE)
            g = tl.load(grad + offs * stride_ge, mask=mask, other=0.0).to(ACC_DTYPE)
            acc += p * g
        dot = tl.sum(acc, axis=1)[:, None]

        for e in range(start, end, BLOCK):
            offs = (e + lanes)[None, :]
            mask = mask_h[:, None] & (offs < end)
            p = tl.load(probs + offs * stride_pe, mask=mask, other=0.0).to(ACC_DTYPE)
            g = tl.load(grad + offs * stride_ge, mask=mask, other=0.0).to(ACC_DTYPE)
            d = scale * p * (g - dot)
            tl.store(out + offs * stride_oe, d.to(out.dtype.element_ty), mask=mask)


INT32_LIMIT = 2**31  # entry offsets within a matrix below it may be computed in int32
# int32 only where the average row is longer than a block. H200 (2026-11-30, index_width.txt,
# 16 heads at L = 4096, bf16): int32 ran causal rows (walked twice) 13% faster (338 against
# 387 us) but rows read once 9-14% slower (local:256 27.4 against 25.1 us, random:0.1 52.3
# against 46.0).
INT32_ONLY_FOR_WALKS = True


def _index(
    nnz: int, rows: int, block: int, *strides: int, int32: bool = False, widest: int = 0
) -> tl.dtype:
    """int32 when every entry offset the kernels form within one matrix fits (lanes reach
    max(block, widest) past a row's start) and (with INT32_ONLY_FOR_WALKS, unless `int32` asks
    for it) the average row passes one block; else int64."""
    lanes = max(block, widest)
    reach = max(rows + 1, *((nnz + lanes) * max(abs(s), 1) for s in strides))
    if reach >= INT32_LIMIT:
        return tl.int64
    if INT32_ONLY_FOR_WALKS and not int32 and nnz <= rows * block:
        return tl.int64
    return tl.int32


# an fp64 scale outside these magnitudes loses its low half (or all of it) split into fp32s
FP64_SPLIT_RANGE = (2.0**-100, float(torch.finfo(torch.float32).max))


def _split_scale(scale: float) -> tuple[float, float]:
    hi = torch.tensor(scale, dtype=torch.float32).item()
    return hi, scale - hi


def _splits(scale: float, dtype: torch.dtype) -> bool:
    """Whether the kernels can take `scale` (else the caller applies an fp64 one itself)."""
    low, high = FP64_SPLIT_RANGE
    return dtype != torch.float64 or scale == 0 or low <= abs(scale) <= high


def _batch_stride(t: torch.Tensor) -> int:
    """0 for one matrix (unbatched, or a batch of one: its stride never counts, and 0 keeps
    Triton's divisibility hint)."""
    return t.stride(0) if t.dim() == 2 and t.shape[0] > 1 else 0


def group_form(values: torch.Tensor, out: torch.Tensor, group: int) -> str | None:
    """How whole groups of `group` entries are 16-byte vectors in both arrays (unit entry
    strides, 16-byte aligned starts): "aligned" where the batch strides are multiples of 16
    entries (Triton's divisibility hint; a matrix of nnz entries padded to 16 has them),
    "phased" where they are not but agree modulo `group` (a contiguous (heads, nnz) array and
    its like: groups counted from the arrays' starts); else None (entry by entry)."""
    if group * out.element_size() != 16 or values.element_size() != out.element_size():
        return None
    if any(t.stride(-1) != 1 or t.data_ptr() % 16 for t in (values, out)):
        return None
    stride_v, stride_o = _batch_stride(values), _batch_stride(out)
    if stride_v % 16 == 0 and stride_o % 16 == 0:
        return "aligned"
    if (stride_v - stride_o) % group == 0:  # (a batch of one has stride 0: aligned above)
        return "phased"
    return None


def sparse_softmax(
    *,
    row_offsets: torch.Tensor,
    values: torch.Tensor,
    out: torch.Tensor,
    scale: float,
    block: int,
    num_warps: int,
    heads: int = 1,
    tail: int = 0,
    int32: bool = False,
    align: int = 0,
    levels: int = 0,
    walk_per: int = 1,
    max_registers: int | None = None,
) -> torch.Tensor:
    """Launch over out (batch, nnz), `heads` matrices of a row per program; values may be
    unbatched (nnz,) (its batch stride is 0). `tail` (0 or a power of two): rows of up to
    block + tail entries are read once, the last ones on `tail` lanes. `int32`: int32 offsets
    wherever they fit, rows read once included (_index). `align` (0, or the entries in 16
    bytes, dividing block and tail): rows read once in whole 16-byte groups from the one holding
    their start (softmax_csr_groups), where the groups fit block + tail, and longer rows walked
    in groups; taken only where it gives vector loads and stores (group_form: any batch strides
    equal modulo the group), else as 0.
    `levels` (0-2): rows of up to block * 2^levels entries are read once too, on the fewest of
    2 or 4 blocks' lanes that hold them; longer rows are walked twice, block by block.
    `walk_per` (a power of two dividing block): the walk's first pass takes each step's max
    over this many entries a thread before rescaling (_walk_per_thread; 1: per lane).
    `max_registers`: Triton's maxnreg (more programs an SM)."""
    if align > 1 and (block % align or tail % align):
        raise ValueError(f"align {align} must divide block {block} and tail {tail}")
    if levels not in (0, 1, 2):
        raise ValueError(f"levels must be 0, 1 or 2, got {levels!r}")
    if walk_per < 1 or walk_per & (walk_per - 1) or block % walk_per:
        raise ValueError(f"walk_per must be a power of two dividing block {block}, got {walk_per}")
    batch, nnz = out.shape
    rows = row_offsets.numel() - 1
    if rows == 0 or nnz == 0 or batch == 0:
        return out
    if not _splits(scale, out.dtype):
        values, scale = values * scale, 1.0
    hi, lo = _split_scale(scale)
    form = group_form(values, out, align) if align > 1 else None
    align = align if form else 0
    launch = {"maxnreg": max_registers} if max_registers else {}
    _softmax_csr_kernel[(rows, -(-batch // heads))](
        row_offsets,
        values,
        out,
        hi,
        lo,
        batch,
        nnz,
        _batch_stride(values),
        values.stride(-1),
        out.stride(0),
        out.stride(1),
        ACC_DTYPE=tl.float64 if out.dtype == torch.float64 else tl.float32,
        INDEX=_index(
            nnz,
            rows,
            block + tail,
            values.stride(-1),
            out.stride(1),
            int32=int32,
            widest=max(block << levels, block + tail + align),  # (phased: up to align - 1 more)
        ),
        BLOCK=block,
        BLOCK_H=heads,
        TAIL=tail,
        ALIGN=align,
        EDGE=next_power_of_2(max(2 * align, 32 * num_warps // heads)),
        LEVELS=levels,
        WALK_PER=walk_per,
        PHASED=form == "phased",
        WALK_GROUPS=form is not None,
        num_warps=num_warps,
        **launch,
    )
    return out


def sparse_softmax_backward(
    *,
    row_offsets: torch.Tensor,
    probs: torch.Tensor,
    grad: torch.Tensor,
    out: torch.Tensor,
    scale: float,
    block: int,
    num_warps: int,
    heads: int = 1,
    levels: int = 0,
) -> torch.Tensor:
    """Launch over out (batch, nnz), `heads` matrices of a row per program; probs and grad may
    be unbatched (nnz,) (batch stride 0). `levels` (0-2) as the forward's: rows up to
    block * 2^levels read once (p and g once instead of twice)."""
    if levels not in (0, 1, 2):
        raise ValueError(f"levels must be 0, 1 or 2, got {levels!r}")
    batch, nnz = out.shape
    rows = row_offsets.numel() - 1
    if rows == 0 or nnz == 0 or batch == 0:
        return out
    applied_after = not _splits(scale, out.dtype)
    hi, lo = _split_scale(1.0 if applied_after else scale)
    _softmax_csr_backward_kernel[(rows, -(-batch // heads))](
        row_offsets,
        probs,
        grad,
        out,
        hi,
        lo,
        batch,
        _batch_stride(probs),
        probs.stride(-1),
        _batch_stride(grad),
        grad.stride(-1),
        out.stride(0),
        out.stride(1),
        ACC_DTYPE=tl.float64 if out.dtype == torch.float64 else tl.float32,
        INDEX=_index(
            nnz,
            rows,
            block,
            probs.stride(-1),
            grad.stride(-1),
            out.stride(1),
            widest=block << levels,
        ),
        BLOCK=block,
        BLOCK_H=heads,
        LEVELS=levels,
        num_warps=num_warps,
    )
    return out.mul_(scale) if applied_after else out
