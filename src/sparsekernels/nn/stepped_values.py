"""A sparse layer's values after an optimizer step: their version counter bumped.

What the ops keep per weight is checked against its values' version (ops/_identity_cache.py's
`version`): autocast's cast copy, a decode route's packed values, the scatter kernel's tiles,
cuSPARSELt's compressed weight, linear's eager plans. Fused optimizers (Adam, AdamW or SGD with
fused=True) write the parameters without bumping it (torch 2.13 on the CPU: still 0 after a
step), so those copies would go stale: an evaluation between training steps would run the
first evaluation's weights. One global optimizer step post-hook bumps the version of every
tracked values tensor the step updated (torch.autograd.graph.increment_version: metadata
only, no pass over the data). Layers track their values when they build their format; the ops
track any values that want a gradient when they first keep something derived from them
(`_cache_mode.building`) or first launch a one-token route on them (ops/_weight_pdl.py), so
a user's own CSRMatrix or NMMatrix of parameters is covered too.
"""

from __future__ import annotations

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from ..ops._identity_cache import IdentityCache

_TRACKED = IdentityCache(forgettable=False)  # values -> True (held weakly)
_HOOK: list = []  # the hook's handle, once registered


def track(values: torch.Tensor) -> None:
    """Bump `values`' version after every optimizer step that holds it."""
    if not _HOOK:
        _HOOK.append(register_optimizer_step_post_hook(_after_step))
    if _TRACKED.get(values) is None:
        _TRACKED[values] = True


def untrack(values: torch.Tensor) -> None:
    """Stop tracking `values` (its weak reference blocks torch.utils.swap_tensors)."""
    _TRACKED.pop(values)


def _after_step(optimizer, args, kwargs) -> None:
    stepped = [p for group in optimizer.param_groups for p in group["params"]
               if _TRACKED.get(p) is not None]  # fmt: skip
    if stepped:
        torch.autograd.graph.increment_version(stepped)
