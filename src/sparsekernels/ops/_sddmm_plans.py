"""What the SDDMM kernels derive from a pattern, once per pattern: the row order of the
per-entry kernel, the block plans of the blocked walk and the tile plans of the tensor-core one.

The op receives raw CSR tensors, not a Pattern, so its plans are cached here by the identity of
the column indices (the entry holds the row offsets, so their identity stays valid) with both
tensors' versions: an in-place edit of either recomputes. A weight's gradient or an attention
mask asks every step; the first call pays the argsort or the tile sort (1-2 ms on the H200 at
4096 x 4096), later calls a dictionary lookup.
"""

from __future__ import annotations

import torch

from .._cache_mode import building, traced
from ..formats._pattern import Pattern
from ..kernels import sddmm_blocked, sddmm_tiles
from ._identity_cache import IdentityCache, version

# column indices -> (row offsets, (versions, columns), {plan name: plan})
_PLANS = IdentityCache()


def _plans(row_offsets: torch.Tensor, column_indices: torch.Tensor, cols: int) -> dict:
    key = (version(row_offsets), version(column_indices), cols)
    hit = _PLANS.get(column_indices)
    if hit is None or hit[0] is not row_offsets or hit[1] != key or None in key:
        hit = (row_offsets, key, {})
        if None not in key:  # (inference tensors': plans made for the call)
            _PLANS[column_indices] = hit
    return hit[2]


def row_order(row_offsets: torch.Tensor, column_indices: torch.Tensor, cols: int) -> torch.Tensor:
    """Rows longest first (Sputnik's row swizzle), int32."""
    plans = _plans(row_offsets, column_indices, cols)
    if "row_order" not in plans:
        rows = row_offsets.numel() - 1
        plans["row_order"] = Pattern(row_offsets, column_indices, (rows, cols)).row_order()
    return plans["row_order"]


def tile_plan(
    row_offsets: torch.Tensor, column_indices: torch.Tensor, cols: int, block_m: int, block_n: int
) -> sddmm_tiles.TilePlan:
    plans = _plans(row_offsets, column_indices, cols)
    name = f"tiles:{block_m}x{block_n}"
    if name not in plans:
        with building(column_indices):
            plans[name] = sddmm_tiles.build_plan(
                row_offsets, column_indices, cols, block_m, block_n
            )
    return plans[name]


def blocked_plan(
    row_offsets: torch.Tensor,
    column_indices: torch.Tensor,
    cols: int,
    block_rows: int,
    block_cols: int,
    chunk: int,
) -> sddmm_blocked.BlockedPlan:
    plans = _plans(row_offsets, column_indices, cols)
    name = f"blocked:{block_rows}x{block_cols}/{chunk}"
    if name not in plans:
        with building(column_indices):
            plans[name] = sddmm_blocked.build_plan(
                row_offsets, column_indices, cols, block_rows, block_cols, chunk
            )
    return plans[name]


# row blocks the fill estimate reads: a uniform sample keeps it cheap on a weight gradient's
# pattern (28672 x 8192 at 50% stored: 117M entries, of which 32 blocks of 64 rows hold 8.4M)
FILL_SAMPLE_BLOCKS = 32


def tile_fill(row_offsets: torch.Tensor, column_indices: torch.Tensor, cols: int) -> float:
    """Entries per cell of the tiles the tensor-core kernel would visit, at its probe tile,
    estimated on up to FILL_SAMPLE_BLOCKS evenly spaced row blocks (exact when the pattern
    has no more); 0 while torch.compile traces (the estimate reads the pattern's values)."""
    if traced(column_indices) or column_indices.numel() == 0:
        return 0.0
    plans = _plans(row_offsets, column_indices, cols)
    if "fill" not in plans:
        plans["fill"] = _sampled_fill(row_offsets, column_indices, cols)
    return plans["fill"]


def _sampled_fill(row_offsets: torch.Tensor, column_indices: torch.Tensor, cols: int) -> float:
    from ..kernels.sddmm_tuning import SDDMM_TILES_PROBE

    block_m, block_n = SDDMM_TILES_PROBE
    rows = row_offsets.numel() - 1
    blocks = -(-rows // block_m)
    picked = torch.linspace(0, blocks - 1, min(blocks, FILL_SAMPLE_BLOCKS)).round().long()
    picked = torch.unique(picked).tolist()
    bounds = torch.tensor([[b * block_m, min(rows, (b + 1) * block_m)] for b in picked])
    starts, ends = row_offsets[bounds.to(row_offsets.device)].long().cpu().unbind(1)
    tiles_n = -(-cols // block_n)
    keys = [
        column_indices[s:e].long() // block_n + i * tiles_n
        for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True))
    ]
    entries = int((ends - starts).sum())
    if entries == 0:
        return 0.0
    visited = torch.unique(torch.cat(keys)).numel()
    return entries / (visited * block_m * block_n)
