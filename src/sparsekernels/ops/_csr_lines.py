"""The one- and few-token CSR routes through the line layout (formats/_line_layout.py, kernels/
spmm_csr_token_lines.py, spmm_csr_few_lines.py) where the tuning takes them
(csr_lines_tuning.spmm_csr_token_lines_config, spmm_csr_few_lines_config): each
weight's layout and packed values are built once and kept beside it (a second copy of the
weight, ~3.1 bytes an entry at 70%), keyed by identity and rebuilt after an in-place edit.
With csr_lines_tuning.CSR_LINES_VALUES_IN_PLACE the walks read the CSR's own values through an
in-place layout instead (~1.1 bytes an entry kept: the values of ~a line a row copied, the
rest read in place), and whether every value is finite is checked once per version of them
(the kernels then leave the next rows' values past a line's entries unmasked)."""

from __future__ import annotations

import weakref

import torch

from .._cache_mode import building
from ..formats import _line_layout
from ..kernels import csr_lines_tuning, spmm_csr_few_lines, spmm_csr_token_lines
from . import _dispatch, _weight_copies
from ._identity_cache import IdentityCache, version
from ._weight_pdl import weight_pdl

# column indices -> (versions of them and of the row offsets, line layout or None, the row
# offsets held weakly)
_LAYOUTS = IdentityCache()
# values -> (their version, the layout they were packed for, packed values: of every line, or
# of an in-place layout's lines not read in place)
_PACKED = IdentityCache()
# values -> (their version, whether every one is finite)
_FINITE = IdentityCache()


def line_form_for(row_offsets, column_indices, values, columns: int, row_order=None,
                  in_place=False, lines=None):  # fmt: skip
    """(layout, packed values) of the weight, built once per pattern and values, or None where
    the layout would hold more than csr_lines_tuning.CSR_LINES_MOST_SLOTS slots an entry, or
    its line length is not among `lines` (when given: nothing is packed for a walk that would
    not run). With CSR_LINES_BY_SEQUENCE the rows are stored in `row_order`'s sequence (the
    layout's row_sequence, which a kernel then visits them by). `in_place`: an in-place layout
    and its pack_rest(values)."""
    layout = layout_for(row_offsets, column_indices, columns, row_order, in_place)
    if layout is None or (lines is not None and layout.line not in lines):
        return None
    packed = _PACKED.get(values)
    stale = packed is None or packed[0] != version(values) or packed[1] is not layout
    if stale or packed[0] is None:
        with torch.no_grad(), building(values):
            copy = layout.pack_rest(values) if in_place else layout.pack(values)
            packed = (version(values), layout, copy)
        if packed[0] is not None:
            _PACKED[values] = packed
    return layout, packed[2]


def layout_for(row_offsets, column_indices, columns: int, row_order=None, in_place=False):
    """The pattern's line layout (line_form_for's, without packed values), or None: lines of
    csr_lines_tuning.CSR_LINE_LENGTHS' first length that holds few enough slots. `in_place`:
    the layout for reading the CSR's own values (formats/_line_layout.py)."""
    by_sequence = csr_lines_tuning.CSR_LINES_BY_SEQUENCE and row_order is not None
    seen = (version(row_offsets), version(column_indices), by_sequence, in_place, columns)
    hit = _LAYOUTS.get(column_indices)
    # (the entry holds the row offsets weakly: two patterns may share one column tensor)
    if hit is None or hit[0] != seen or None in seen or hit[2]() is not row_offsets:
        sequence = row_order if by_sequence else None
        layout = None
        for line in csr_lines_tuning.CSR_LINE_LENGTHS:  # the first whose slots are few enough
            with building(column_indices):
                layout = _line_layout.build(row_offsets, column_indices, columns,
                                            csr_lines_tuning.CSR_LINES_MOST_SLOTS, sequence,
                                            line, in_place)  # fmt: skip
            if layout is not None:
                break
        if layout is not None and layout.lines * layout.line >= 2**31:
            layout = None  # (the kernel's slots are int32)
        hit = (seen, layout, weakref.ref(row_offsets))
        if None not in seen:
            _LAYOUTS[column_indices] = hit
    return hit[1]


def finite(values: torch.Tensor) -> bool:
    """Whether every value is finite, checked once per version of them (a sync)."""
    hit = _FINITE.get(values)
    if hit is None or hit[0] != version(values) or hit[0] is None:
        with torch.no_grad():
            hit = (version(values), bool(torch.isfinite(values).all()))
        if hit[0] is not None:
            _FINITE[values] = hit
    return hit[1]


def weight_for(row_offsets, column_indices, values, columns: int, row_order=None, lines=None):
    """The line walks' arguments for the weight as csr_lines_tuning.CSR_LINES_VALUES_IN_PLACE
    says: (layout, values, in_place, rest, finite_values), or None where no layout holds the
    weight in few enough slots (or in lines of a length among `lines`, when given), or where
    the layer keeps no copies (ops/_weight_copies.py: "none"; "in_place" reads the values in
    place or not at all)."""
    choice = _weight_copies.chosen(column_indices)
    if choice == "none":
        return None
    in_place = ((csr_lines_tuning.CSR_LINES_VALUES_IN_PLACE or choice == "in_place")
                and values.is_contiguous()
                and values.data_ptr() % 16 == 0)  # (aligned: the walks' vectors)  # fmt: skip
    if choice == "in_place" and not in_place:
        return None
    lined = line_form_for(row_offsets, column_indices, values, columns, row_order, in_place,
                          lines)  # fmt: skip
    if lined is None:
        return None
    layout, packed = lined
    if in_place:  # (the CSR's own values, the few lines not read in place copied)
        return layout, values, layout, packed, finite(values)
    return layout, packed, None, None, False


def run(row_offsets, column_indices, values, x, bias, out, row_order, activation) -> bool:
    """out (M,) by the line layout's kernel where the tuning routes it (True), else False."""
    rows = out.shape[0]
    config = csr_lines_tuning.spmm_csr_token_lines_config(values.numel(), rows, values.dtype)
    if config is None or x.shape[0] * x.stride(0) >= 2**31:  # (its x offsets are int32)
        return False
    lined = weight_for(row_offsets, column_indices, values, x.shape[0], row_order)
    if lined is None:
        return False
    layout, read, in_place, rest, all_finite = lined
    spmm_csr_token_lines.spmm_csr_token_lines(
        row_slots=layout.row_slots,
        offsets=layout.offsets,
        heads=layout.heads,
        values=read,
        x=x,
        bias=bias.contiguous() if bias is not None else None,
        row_order=row_order if layout.row_sequence is None else layout.row_sequence,
        row_sequence=layout.row_sequence,
        out=out,
        activation=activation,
        rows_per_program=config.rows_per_program,
        block=config.block,
        num_warps=config.num_warps,
        pdl=weight_pdl(values, row_offsets, column_indices),
        asm_gather=not _dispatch.triton_interpreter_enabled(),  # (no PTX in the interpreter)
        ahead=csr_lines_tuning.CSR_LINES_AHEAD,
        held_in_asm=csr_lines_tuning.CSR_LINES_HELD_IN_ASM,
        line=layout.line,
        in_place=in_place,
        rest=rest,
        finite_values=all_finite,
    )
    return True


def run_few(row_offsets, column_indices, values, b, bias, out, row_order, activation) -> bool:
    """out (M, N) for N = 2-16 by the few-token line walk where the tuning routes it (True),
    else False; b (K, N) as the few-token walk takes it (ops/_layout.padded_rows)."""
    rows, n = out.shape
    config = csr_lines_tuning.spmm_csr_few_lines_config(values.numel(), rows, n, values.dtype)
    if config is None or not spmm_csr_few_lines.offsets_fit(b, out):
        return False
    lined = weight_for(row_offsets, column_indices, values, b.shape[0], row_order,
                       csr_lines_tuning.CSR_FEW_LINE_LENGTHS)  # fmt: skip
    if lined is None:  # (nothing packed for lines this walk does not take: 90%'s 16 slots)
        return False
    layout, read, in_place, rest, all_finite = lined
    spmm_csr_few_lines.spmm_csr_few_lines(
        row_slots=layout.row_slots,
        offsets=layout.offsets,
        heads=layout.heads,
        values=read,
        b=b,
        bias=bias.contiguous() if bias is not None else None,
        row_order=row_order if layout.row_sequence is None else layout.row_sequence,
        out=out,
        activation=activation,
        rows_per_program=config.rows_per_program,
        block=config.block,
        num_warps=config.num_warps,
        row_sequence=layout.row_sequence,
        asm_gather=not _dispatch.triton_interpreter_enabled(),  # (no PTX in the interpreter)
        line=layout.line,
        in_place=in_place,
        rest=rest,
        finite_values=all_finite,
    )
    return True
