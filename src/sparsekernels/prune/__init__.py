"""Pruning: magnitude masks, unstructured and N:M."""

from .masks import magnitude_mask, nm_mask

__all__ = ["magnitude_mask", "nm_mask"]
