"""Which copies of a CSR weight the routes may keep beside it (sk.nn.set_weight_copies).

The fast decode and small-batch routes keep a second form of a weight while it lives: the
one- and few-token line walks a line layout with the values packed into it (~1.0 byte a dense
element at 70%, bf16), the 8-64-token scatter kernel a tiled copy (1.2), on top of the CSR's
own 1.2, so a 70% layer run at every size held 3.4 bytes a dense element where dense holds 2.
A layer can ask for less: "in_place" (line walks reading the CSR's values in place, ~0.4 kept;
no tiled copy: 1.6 at most) or "none" (the CSR alone: 1.2; the plain CSR walks and densify
instead, slower at 1-64 tokens). The choice is kept by the pattern's column indices (the
tensor the routes key their copies by); "all" is the default and keeps nothing here.
"""

from __future__ import annotations

import torch

from ._identity_cache import IdentityCache

CHOICES = ("all", "in_place", "none")
_CHOSEN = IdentityCache()  # column indices -> "in_place" or "none"


def chosen(column_indices: torch.Tensor) -> str:
    """What may be kept beside the weight of these column indices."""
    found = _CHOSEN.get(column_indices)
    return "all" if found is None else found


def choose(column_indices: torch.Tensor, choice: str) -> None:
    if choice == "all":
        _CHOSEN.pop(column_indices)
    else:
        _CHOSEN[column_indices] = choice
