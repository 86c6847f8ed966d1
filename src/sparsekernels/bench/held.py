"""What a model holds for its weights: the bytes of every storage reachable from its parameters
and buffers, from its sparse layers' format caches, and from what the ops' caches keep for
those tensors (line layouts, tiled copies, transposes, launch plans), and for CPU CSR layers
the part of the thread's column workspace they need (ops/_cpu_columns.py), each storage
counted once.
Activations and a KV cache (plain attributes, not buffers) are not counted: this is the
"smaller" half of a sparse model, beside the peak memory a call adds."""

from __future__ import annotations

import sys

import torch


def storages(root, found: dict, tensors: set | None = None, device_type: str | None = None):
    """Add to `found` (data_ptr -> bytes) every storage reachable from root through
    containers and objects' fields (on `device_type` only, if given); `tensors` collects the
    ids of the tensors met."""
    seen: set = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, str, bytes, int, float)):
            continue
        seen.add(id(obj))
        if isinstance(obj, (torch.Tensor, torch.UntypedStorage)):
            if tensors is not None and isinstance(obj, torch.Tensor):
                tensors.add(id(obj))
            if device_type is None or obj.device.type == device_type:
                storage = obj.untyped_storage() if isinstance(obj, torch.Tensor) else obj
                found[storage.data_ptr()] = storage.nbytes()
            continue
        if type(obj).__module__.startswith("triton") or callable(obj):
            continue  # (compiled kernels and their launchers hold no weights)
        if isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        else:
            stack.extend(getattr(obj, "__dict__", {}).values())
            stack.extend(getattr(obj, name, None) for name in getattr(type(obj), "__slots__", ()))


def identity_caches() -> list:
    """Every IdentityCache the library's modules keep (ops/_identity_cache.py)."""
    from ..ops._identity_cache import IdentityCache

    return [
        value
        for name, module in sorted(sys.modules.items())
        if name.startswith("sparsekernels.")
        for value in vars(module).values()
        if isinstance(value, IdentityCache)
    ]


def held_bytes(model: torch.nn.Module) -> int:
    """Bytes the model holds for its weights (the module's docstring)."""
    found: dict = {}
    tensors: set = set()
    roots = [*model.parameters(), *model.buffers()]
    roots += [m._format_cache for m in model.modules() if hasattr(m, "_format_cache")]
    storages(roots, found, tensors)
    found.update(_column_workspace(model))
    caches = identity_caches()
    while True:  # (what a cache keeps may key another cache's entries)
        kept = [
            entry[1]
            for cache in caches
            for key, entry in list(cache._entries.items())
            if key in tensors and entry[0]() is not None
        ]
        before = len(tensors)
        storages(kept, found, tensors)
        if len(tensors) == before:
            return sum(found.values())


def _column_workspace(model: torch.nn.Module) -> dict:
    """The part of the calling thread's CPU column workspace (ops/_cpu_columns.py) this model's
    own CSR layers need: int32 columns for the largest of them with int16 columns (the buffer
    itself is as large as the largest weight the thread ran, whichever model it was)."""
    from ..ops._cpu_columns import buffers

    columns = [
        m.column_indices.numel()
        for m in model.modules()
        if isinstance(getattr(m, "column_indices", None), torch.Tensor)
        and m.column_indices.device.type == "cpu"
        and m.column_indices.dtype == torch.int16
    ]
    if not columns or not buffers():
        return {}
    buffer = buffers()[0]
    return {buffer.data_ptr(): min(buffer.nbytes, 4 * max(columns))}
