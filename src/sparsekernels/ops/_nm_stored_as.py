"""An n:m weight stored as another pattern that holds the same entries: 2:16 keeps at most 2
of any 8, so it is a 2:8 weight whose slots with no entry hold zeros (twice the value bytes,
1/4 of dense). linear runs 2:16 at 17-48 tokens through that copy, where 2:8's route beat
2:16's 1.5-2x (kernels/nm_alias_tuning.nm_stored_as). The copy is built once for these very
tensors at their versions (an optimizer step or any in-place edit builds it again) and kept
while the values live, as cuSPARSELt's packing is (ops/_cusparselt._packed)."""

from __future__ import annotations

import weakref

import torch

from .._cache_mode import building
from ..kernels import nm_alias_tuning
from ._identity_cache import IdentityCache, version

# values tensor -> ((values', indices' versions), indices ref, pattern, (values, indices))
_STORED = IdentityCache()


def stored_pattern(
    n: int, m: int, vector: int, block: int, n_cols: int, dtype: torch.dtype
) -> tuple[int, int] | None:
    """The pattern linear runs this n:m weight through a copy of at n_cols tokens, or None."""
    return nm_alias_tuning.nm_stored_as(n_cols, n, m, vector, block, dtype)


def stored_as(
    values: torch.Tensor, indices: torch.Tensor, n: int, m: int, vector: int, to: tuple[int, int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, indices) of the n:m weight (no blocks) as the `to` pattern, kept per weight.
    Built in every call where no change could be seen (inference tensors carry no version; a
    CUDA graph captured in a training step would replay a kept copy stale)."""
    seen = (version(values), version(indices))
    trained = values.requires_grad and torch.is_grad_enabled()
    capturing = values.is_cuda and torch.cuda.is_current_stream_capturing()
    if None in seen or (trained and capturing):
        return _converted(values, indices, n, m, vector, to)
    entry = _STORED.get(values)
    if entry is not None and entry[0] == seen and entry[1]() is indices and entry[2] == to:
        return entry[3]
    with building(values):
        converted = _converted(values, indices, n, m, vector, to)
    _STORED[values] = (seen, weakref.ref(indices), to, converted)
    return converted


def _converted(values, indices, n, m, vector, to) -> tuple[torch.Tensor, torch.Tensor]:
    """Each group's kept slots moved to the part of it they lie in (n:m -> n:(m/r): no part can
    hold more than the whole group's n), the rest of a part's n slots zeros at its lowest free
    offsets, offsets ascending as from_dense stores them. Tensor ops only, no host sync (a
    CUDA graph may capture it)."""
    to_n, to_m = to
    parts, rows = m // to_m, values.shape[0]
    offsets = indices.long().reshape(indices.shape[0], -1, n)  # (row vectors, groups, n)
    groups = offsets.shape[1]
    slot = torch.arange(n, device=indices.device).expand_as(offsets)
    source = torch.full((*offsets.shape[:2], m), -1, dtype=torch.int16, device=indices.device)
    source.scatter_(2, offsets, slot.to(torch.int16))
    source = source.view(*offsets.shape[:2], parts, to_m)  # a part's offset -> its slot, or -1
    free_first_low = to_m - 1 - torch.arange(to_m, device=indices.device, dtype=torch.int16)
    score = (source >= 0).to(torch.int16) * to_m + free_first_low
    picked = score.topk(to_n, dim=-1).indices.sort(dim=-1).values  # (.., parts, to_n)
    taken = source.gather(-1, picked).repeat_interleave(vector, dim=0)[:rows].long()
    grouped = values.detach().reshape(rows, groups, 1, n).expand(rows, groups, parts, n)
    kept = torch.where(taken >= 0, grouped.gather(-1, taken.clamp_min(0)), 0)  # (inf * 0: NaN)
    new_indices = picked.to(indices.dtype).reshape(indices.shape[0], -1)
    return kept.reshape(rows, -1).contiguous(), new_indices
