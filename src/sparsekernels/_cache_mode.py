"""What is kept across calls: built outside torch.inference_mode, and keyed by `version`.

A tensor made under inference_mode is an inference tensor: autograd cannot save it and it takes
no in-place update outside that mode. So a pattern's row order, transpose or flat positions (or
a layer's narrowed index buffers, or a scratch buffer) built by a first call under
inference_mode, an evaluation pass, and kept would break a later training step on the same
weight ("Inference tensors cannot be saved for backward") or a later call outside the mode.
Cache fills run in `building()`: their tensors are normal ones whatever mode the call came in.
"""

from __future__ import annotations

import contextlib

import torch

_builds = 0  # cache fills begun (builds()): what a launch with PDL 2 must not follow


def building() -> contextlib.AbstractContextManager:
    """inference_mode(False) where inference mode is on, else nothing (and nothing while
    torch.compile traces, which cannot read the mode). Counts the fill (builds())."""
    if torch.compiler.is_compiling():
        return contextlib.nullcontext()
    global _builds
    _builds += 1
    if torch.is_inference_mode_enabled():
        return torch.inference_mode(False)
    return contextlib.nullcontext()


def builds() -> int:
    """How many cache fills have begun: a change tells that kernels writing kept arrays may
    have run since the last look (ops/_weight_pdl.py)."""
    return _builds


def version(tensor: torch.Tensor) -> tuple[int, int] | None:
    """What tells a tensor's contents changed: its version counter (in-place changes bump it)
    and its storage's address (`.data = ...` swaps the storage without a bump, as
    torch.nn.utils.vector_to_parameters does); None for an inference tensor, which has no
    counter: what is derived from it cannot be kept (reading `_version` there raises)."""
    if tensor.is_inference():
        return None
    return tensor._version, tensor.data_ptr()
