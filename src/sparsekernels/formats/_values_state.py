"""Unpickling CSRMatrix and NMMatrix: `values` (and NMMatrix's `indices`) became checked
properties held as `_values` (`_indices`); objects pickled before keep them under their old
names."""

from __future__ import annotations


def set_state(matrix, state: dict) -> None:
    """A format's __setstate__."""
    for name in ("values", "indices"):
        if name in state:
            state[f"_{name}"] = state.pop(name)
    matrix.__dict__.update(state)
