"""The one-token CSR route through the TMA-ring kernel (kernels/spmm_csr_ring.py) where the tuning
takes it (tuning.spmm_csr_ring_config), on Hopper: each weight's split of rows among the
persistent programs is computed once and kept (a searchsorted a call would be a launch of its
own), keyed by the row offsets' identity and version. Where the tuning picks the line form
(formats/_line_layout.py: ~3.1 bytes an entry at 70% for 4 here), each weight's layout and
packed values are built once too and kept beside it (a second copy of the weight: the price of
a faster read until a layer stores only the line form)."""

from __future__ import annotations

import torch

from ..formats import _line_layout
from ..kernels import spmm_csr_ring, tuning
from ..kernels._pdl import decode_pdl, hopper
from ._identity_cache import IdentityCache, version

# row offsets -> {programs: (their version, splits)}
_SPLITS = IdentityCache()
# column indices -> (versions of them and the row offsets, line layout or None)
_LAYOUTS = IdentityCache()
# values -> (their version, the layout they were packed for, packed values)
_PACKED = IdentityCache()


def splits_for(row_offsets: torch.Tensor, programs: int) -> torch.Tensor:
    """spmm_csr_ring.row_splits for these offsets, built once per weight and program count."""
    cached = _SPLITS.get(row_offsets)
    if cached is None:
        cached = {}
        _SPLITS[row_offsets] = cached
    seen = version(row_offsets)
    hit = cached.get(programs)
    if hit is None or hit[0] != seen or seen is None:
        hit = (seen, spmm_csr_ring.row_splits(row_offsets, programs))
        if seen is not None:  # (an inference tensor's: built for the call)
            cached[programs] = hit
    return hit[1]


def line_form_for(row_offsets, column_indices, values, columns: int):
    """(row slots, byte offsets, packed values, bases) of the weight's line layout, built once
    per pattern and values (rebuilt after an in-place edit), or None where the layout would
    hold more than tuning.CSR_LINES_MOST_SLOTS slots an entry."""
    seen = (version(row_offsets), version(column_indices))
    hit = _LAYOUTS.get(column_indices)
    if hit is None or hit[0] != seen or None in seen:
        layout = _line_layout.build(row_offsets, column_indices, columns,
                                    tuning.CSR_LINES_MOST_SLOTS)  # fmt: skip
        hit = (seen, layout)
        if None not in seen:
            _LAYOUTS[column_indices] = hit
    layout = hit[1]
    if layout is None:
        return None
    packed = _PACKED.get(values)
    if packed is None or packed[0] != version(values) or packed[1] is not layout or (
        packed[0] is None):  # fmt: skip
        with torch.no_grad():
            packed = (version(values), layout, layout.pack(values))
        if packed[0] is not None:
            _PACKED[values] = packed
    return layout.row_slots, layout.offsets, packed[2], layout.bases


def run(row_offsets, column_indices, values, x, bias, out, activation) -> torch.Tensor | None:
    """out (M,) by the ring kernel where the tuning routes it and the kernel supports the
    operands, else None (the caller takes its other walks)."""
    rows, nnz = out.shape[0], values.numel()
    config = tuning.spmm_csr_ring_config(rows, nnz, values.dtype)
    if config is None or not hopper(values.device):
        return None
    options = dict(config)
    bases = None
    if options.pop("line_form", False):
        lined = line_form_for(row_offsets, column_indices, values, x.numel())
        if lined is not None:
            row_offsets, column_indices, values, bases = lined
    if not spmm_csr_ring.supports(row_offsets, column_indices, values, x, bases):
        return None
    programs = spmm_csr_ring.programs_for(values.device, options.pop("programs_per_sm"))
    return spmm_csr_ring.spmm_csr_ring(
        row_offsets=row_offsets,
        column_indices=column_indices,
        values=values,
        x=x,
        bias=bias.contiguous() if bias is not None else None,
        out=out,
        activation=activation,
        splits=splits_for(row_offsets, programs),
        pdl=decode_pdl(values.device),
        bases=bases,
        **options,
    )
