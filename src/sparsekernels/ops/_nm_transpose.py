"""W^T's CSR pattern for an N:M weight W, built once per weight: the backward of x (W^T @ dY)
runs as a CSR product on it, on the GPU (the CSR kernel) and on the CPU (torch's CSR matmul)."""

from __future__ import annotations

import torch

from .._cache_mode import building
from ._identity_cache import IdentityCache, version

# indices tensor -> ((its version, rows, pattern), W^T's Pattern, permutation of W's values)
_TRANSPOSED = IdentityCache()


def transposed_pattern(indices: torch.Tensor, rows: int, n, m, vector, block):
    """The CSR pattern of W^T for an N:M weight W (rows, K) and the permutation taking W's
    values (row-major) to W^T's entry order. A fixed mask makes it a once-per-weight cost
    (keyed by the indices tensor's identity; an in-place edit bumps its version)."""
    from ..formats._pattern import Pattern, index_dtype_for
    from ..formats.nm import nm_columns

    key = (version(indices), rows, n, m, vector, block)
    hit = _TRANSPOSED.get(indices)
    if hit is None or hit[0] != key or key[0] is None:
        with building(indices):
            columns = nm_columns(indices, rows, n, m, vector, block)
            slots = columns.shape[1]
            cols = indices.shape[1] * block // n * m
            offsets = torch.arange(rows + 1, device=indices.device) * slots
            pattern = Pattern(
                offsets.to(index_dtype_for(rows * slots)),
                columns.reshape(-1).to(index_dtype_for(cols)),
                (rows, cols),
            )
            transposed, perm = pattern.transpose()
        hit = (key, transposed, perm)
        if key[0] is not None:  # (an inference tensor's: built for the call)
            _TRANSPOSED[indices] = hit
    return hit[1], hit[2]
