"""Unpickling CSRMatrix and NMMatrix: `values` became a checked property held as `_values`;
objects pickled before keep it under its old name."""

from __future__ import annotations


def set_state(matrix, state: dict) -> None:
    """A format's __setstate__."""
    if "values" in state:
        state["_values"] = state.pop("values")
    matrix.__dict__.update(state)
