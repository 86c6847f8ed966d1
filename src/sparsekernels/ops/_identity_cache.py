"""A cache keyed by a tensor's identity, for what the ops derive once per weight or pattern
(packed offsets, transposed patterns, tile plans, flat positions).

torch.utils.weak.WeakIdKeyDictionary does the same but builds a weak reference for every lookup
(2.8 us a lookup on the CPU box, and an eager SDDMM call makes six). Here the key is id(tensor)
and the entry keeps a weak reference that a lookup checks (0.3 us); its callback drops the entry
when the tensor dies, before the id can be reused. An entry's value must not refer to its
tensor, or the tensor would never die.
"""

from __future__ import annotations

import weakref

import torch

from .._cache_mode import version  # noqa: F401 (the caches' key: imported from here)

_ALL: weakref.WeakSet = weakref.WeakSet()  # every cache, for forget()


class IdentityCache:
    def __init__(self, forgettable: bool = True) -> None:
        """`forgettable`: forget() drops its entries (what the ops derive, not what they track)."""
        self._entries: dict[int, tuple[weakref.ref, object]] = {}
        if forgettable:
            _ALL.add(self)

    def get(self, tensor: torch.Tensor):
        """The value stored for this very tensor, else None."""
        entry = self._entries.get(id(tensor))
        if entry is None or entry[0]() is not tensor:
            return None
        return entry[1]

    def __setitem__(self, tensor: torch.Tensor, value: object) -> None:
        key, entries = id(tensor), self._entries

        def drop(ref: weakref.ref) -> None:
            current = entries.get(key)
            if current is not None and current[0] is ref:
                entries.pop(key, None)  # (another thread may have dropped it since)

        entries[key] = (weakref.ref(tensor, drop), value)

    def __len__(self) -> int:
        return len(self._entries)

    def pop(self, tensor: torch.Tensor) -> None:
        """Drop what is stored for this very tensor, if anything."""
        entry = self._entries.get(id(tensor))
        if entry is not None and entry[0]() is tensor:
            self._entries.pop(id(tensor), None)  # (two threads releasing: one finds it gone)


def forget(tensors) -> None:
    """Drop what every cache keeps for these tensors (rebuilt by the next call that needs
    it): what training left beside a weight (transposed patterns, flat positions), say."""
    for cache in list(_ALL):
        for tensor in tensors:
            cache.pop(tensor)
