"""Sparse modules whose format is built from their index buffers when those change.

SparseLinear/SparseConv2d (the weight's CSRMatrix or NMMatrix) and SparseAttention (its
pattern) build their format at construction, after a load and after a move (`.to`, `.half`,
`to_empty`), not at the first forward: torch.compile cannot read the buffers' versions while
it traces, so it uses the format built last. A load that leaves a broken pattern is named by
load_state_dict; buffers that are not a pattern yet (`to_empty`'s garbage, the meta device)
are left to the first eager forward, which names the fault.
"""

from __future__ import annotations

import torch

from ..ops._identity_cache import forget


class PreparedFromBuffers:
    """Mixin (before nn.Module): a subclass says how to build its format (`_build`: validates
    and caches it), drop it and which index buffers it comes from."""

    _FORMAT_ATTRIBUTE = "_format_cache"  # where `_build` keeps the format (`_drop` empties it)

    def _build(self) -> None:
        raise NotImplementedError

    def _drop(self) -> None:
        raise NotImplementedError

    def _index_buffers(self) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def _cache_keys(self) -> tuple[torch.Tensor, ...]:
        """The tensors the ops keep things for (ops/_identity_cache.py): dropped on a rebuild
        (a move's old-device copies held memory until the values died)."""
        return self._index_buffers()

    def _on_meta(self) -> bool:
        return any(b.device.type == "meta" for b in self._index_buffers())

    def _prepare(self) -> None:
        """Build the format now, where the buffers hold a sound pattern, after dropping what
        the ops kept for the old one."""
        forget(self._cache_keys())
        self._drop()
        if self._on_meta():
            return
        try:
            self._build()
        except (ValueError, RuntimeError, IndexError):  # (the first forward re-raises it)
            self._drop()

    def __getstate__(self) -> dict:
        """Pickled (torch.save(model), copy.deepcopy) without the format built from the buffers
        (and what it derived: a transpose, packings): it wrote the values twice, 3.2x the
        weight's bytes after a training step; rebuilt on load instead."""
        state = self.__dict__.copy()
        state[self._FORMAT_ATTRIBUTE] = None
        if "_replays" in state:  # (closures over launch plans: rebuilt by later calls)
            state["_replays"] = {}
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self._prepare()

    def _drop_weak_references(self) -> None:
        """Drop what holds this module's tensors weakly (the ops' caches, the format built from
        them): torch.utils.swap_tensors, which `.to()` and load_state_dict use after
        torch.__future__.set_swap_module_params_on_conversion(True), refuses a tensor with
        weak references. The next build takes what it needs again."""
        forget(self._cache_keys())
        self._drop()

    def _apply(self, fn, recurse=True):
        self._drop_weak_references()
        module = super()._apply(fn, recurse)
        self._prepare()
        return module

    def _name_a_broken_load(self, prefix: str, errors: list, errors_before: int) -> None:
        """After a load: build the format, or add why it cannot be built to load's errors."""
        self._drop()
        if len(errors) == errors_before and not self._on_meta():
            try:
                self._build()
            except ValueError as error:
                self._drop()
                errors.append(f"{prefix.rstrip('.') + ': ' if prefix else ''}{error}")
