"""The one-token CSR route through the TMA-ring kernel (kernels/spmm_csr_ring.py) where the tuning
takes it (tuning.spmm_csr_ring_config), on Hopper: each weight's split of rows among the
persistent programs is computed once and kept (a searchsorted a call would be a launch of its
own), keyed by the row offsets' identity and version."""

from __future__ import annotations

import torch

from ..kernels import spmm_csr_ring, tuning
from ..kernels._pdl import decode_pdl, hopper
from ._identity_cache import IdentityCache, version

# row offsets -> {programs: (their version, splits)}
_SPLITS = IdentityCache()


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


def run(row_offsets, column_indices, values, x, bias, out, activation) -> torch.Tensor | None:
    """out (M,) by the ring kernel where the tuning routes it and the kernel supports the
    operands, else None (the caller takes its other walks)."""
    rows, nnz = out.shape[0], values.numel()
    config = tuning.spmm_csr_ring_config(rows, nnz, values.dtype)
    if config is None or not hopper(values.device):
        return None
    if not spmm_csr_ring.supports(row_offsets, column_indices, values, x):
        return None
    options = dict(config)
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
        **options,
    )
