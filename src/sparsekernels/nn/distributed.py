"""The sparse layers under DistributedDataParallel: their index buffers are int16 where every
column fits (formats/csr.py), and neither NCCL nor gloo takes a 16-bit integer type, so DDP's
broadcast of the module's buffers (at wrap time, and each forward with broadcast_buffers=True)
fails on them (NCCL: "Input tensor data type is not supported for NCCL process group: Short";
gloo: "Invalid scalar type"). The indices are
a fixed mask, the same on every rank built from the same checkpoint or pruning: they need no
broadcast. Leave them out before wrapping:

    names = sk.nn.index_buffer_names(model)
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, names)
    model = DistributedDataParallel(model, device_ids=[rank])

(or pass broadcast_buffers=False where the model has no other buffers to keep in step)."""

from __future__ import annotations

from torch import nn

from ._weight import _INDEX_BUFFERS, SparseWeightModule
from .attention import SparseAttention


def index_buffer_names(model: nn.Module) -> list[str]:
    """The fully qualified names of every sparse layer's index buffers in `model` (CSR row
    offsets and column indices, N:M indices), as `model.named_buffers()` lists them."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    names = []
    for prefix, module in model.named_modules():
        if isinstance(module, SparseWeightModule):
            held = _INDEX_BUFFERS[module.format]
        elif isinstance(module, SparseAttention):
            held = ("row_offsets", "column_indices")
        else:
            continue
        names += [f"{prefix}.{name}" if prefix else name for name in held]
    return names
