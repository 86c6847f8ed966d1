"""The programmatic dependent launch a one-token route takes for its weight (kernels/_pdl.py).

With PDL 2 a kernel loads its weight's first step before waiting for the kernel before it, so
that kernel must not have written the weight. Three kinds of kernel could have, and each
launch below falls back to PDL 1 (wait first) where one may have run just before:
- a cache fill (the line form, packed offsets, a row order, a cast copy): any fill begun since
  the last one-token launch (`_cache_mode.builds`);
- an update of the weight itself (an optimizer step, a copy_ into it, a `.data` swap): the
  weight's arrays at another version or address than at their last launch;
- a contiguous copy made for the launch: a weight array that is not contiguous.
"""

from __future__ import annotations

import torch

from .._cache_mode import builds, version
from ..kernels._pdl import decode_pdl
from ._identity_cache import IdentityCache

# the weight's values -> (its arrays' versions, builds()) at its last launch
_LAUNCHED = IdentityCache()
_builds_seen = -1  # builds() at the last one-token launch


def weight_pdl(values: torch.Tensor, *indices: torch.Tensor) -> int:
    """decode_pdl(values.device), but 1 instead of 2 where the kernel just before this launch
    may have written the weight's `values` or `indices` (the module's docstring)."""
    global _builds_seen
    pdl = decode_pdl(values.device)
    if pdl != 2:
        return pdl
    arrays = (values, *indices)
    now = tuple(version(a) for a in arrays)
    fills = builds()
    unchanged = (
        fills == _builds_seen  # no fill since the last one-token launch, whatever its weight
        and None not in now
        and all(a.is_contiguous() for a in arrays)
        and _LAUNCHED.get(values) == (now, fills)  # nor since this weight's (another launch
    )  # between could use up the first signal)
    _builds_seen = fills
    if None not in now:
        if values.requires_grad and _LAUNCHED.get(values) is None:
            from ..nn import stepped_values  # (a fused optimizer's step bumps no version)

            stepped_values.track(values)
        _LAUNCHED[values] = (now, fills)
    return 2 if unchanged else 1
