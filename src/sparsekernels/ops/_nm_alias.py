"""1:m read as 2:2m: two neighbouring 1:m groups keep one element each, which is a 2:2m group
whose second choice lies in its upper half. The values are already in that order, so only the
offsets change (the second of each pair moves up by m). 1:4 so runs as 2:8 and 1:2 as 2:4 on
the sparse tensor cores, which have no 1:4 or 1:2 form (nm_mma_sp_tuning.MMA_SP_ALIASES), and
past their tokens takes 2:8's and 2:4's whole route where 1:m would densify a call
(nm_alias_tuning.nm_routes_as_alias)."""

from __future__ import annotations

import torch

from .._cache_mode import building
from ..kernels import nm_alias_tuning, nm_mma_sp_tuning
from ._identity_cache import IdentityCache, version

# indices tensor -> (its version, the 2:2m offsets), built once per weight like the packed words
_ALIASED = IdentityCache()


def sparse_core_pattern(n: int, m: int, block: int, k: int) -> tuple[int, int]:
    """The pattern the sparse-tensor-core route reads an n:m weight of row length k as."""
    alias = nm_mma_sp_tuning.MMA_SP_ALIASES.get((n, m))
    if alias is None or block != 1 or k % (2 * m):
        return n, m
    return alias


def routed_pattern(
    n: int, m: int, vector: int, block: int, k: int, n_cols: int, dtype: torch.dtype
) -> tuple[int, int]:
    """The pattern linear's route (the dense preference and the Triton backend alike) reads an
    n:m weight of row length k as at n_cols tokens: 2:2m where the alias measured faster."""
    alias = sparse_core_pattern(n, m, block, k)
    if alias != (n, m) and nm_alias_tuning.nm_routes_as_alias(n_cols, n, m, vector, dtype):
        return alias
    return n, m


def aliased_indices(indices: torch.Tensor, m: int) -> torch.Tensor:
    """1:m offsets (rows, groups) as 2:2m offsets (rows, groups): every odd group's offset + m."""
    seen = version(indices)
    hit = _ALIASED.get(indices)
    if hit is None or hit[0] != seen or seen is None:
        with building(indices):
            pairs = indices.reshape(indices.shape[0], -1, 2)
            upper = torch.tensor([0, m], dtype=indices.dtype, device=indices.device)
            hit = (seen, (pairs + upper).view(indices.shape))
        if seen is not None:  # (an inference tensor's: built for the call)
            _ALIASED[indices] = hit
    return hit[1]
