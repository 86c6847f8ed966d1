"""A SparseLinear's repeat eager call goes straight to what its plan runs.

Through linear() a repeat inference call took 57-65 us of Python on the CPU box with the
launches stood in for (nn.Linear: 7.5; a GPU host runs the same Python ~3x slower): the weight
property's freshness checks, the plan's signature and its checks of the weight, reading the
same versions several times over. The layer keeps its last call's key (x's signature, which
operands want a gradient, the values', the bias's and the index buffers' identities, their
versions and addresses) with what _eager_plans.replayer gave for it: the recorded launches of
an inference call, a training call's autograd path. A call with the same key runs that,
anything else takes linear() as before. _drop (a changed pattern, release_caches, a move)
forgets it.
"""

from __future__ import annotations

import torch

from .._env import flag
from ..ops import _autocast, _eager_plans
from ._weight import _INDEX_BUFFERS

# Off until its GPU tests pass (tests/test_repeat_calls.py); SPARSEKERNELS_LAYER_REPLAYS=1 on.
ENABLED = flag("SPARSEKERNELS_LAYER_REPLAYS", False)
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_MISSING = object()  # (no "bias" Parameter: torch.nn.utils.prune's bias_orig in its place)


def on_cuda(x: torch.Tensor) -> bool:
    """Where launch plans record (a CPU emulation of the host time stands in for it)."""
    return ENABLED and x.is_cuda


def key(layer, x: torch.Tensor) -> tuple | None:
    """This call's key, or None where it cannot take the layer's replay at all (off CUDA,
    torch.compile or torch.func at work, autocast on, values or bias that are not the layer's
    Parameters, as torch.nn.utils.prune leaves them)."""
    if type(x) not in _PLAIN or not on_cuda(x) or torch.compiler.is_compiling():
        return None
    params = layer._parameters  # (not getattr: nn.Module's __getattr__ costs a call each)
    values, bias = params.get("values"), params.get("bias", _MISSING)
    if values is None or bias is _MISSING or values.is_inference():
        return None
    if torch._C._are_functorch_transforms_active() or _autocast.target(x) is not None:
        return None
    # A call recording a gradient: which operands want one (the backward's needs); the values'
    # version left out where they want one, as the plan's signature leaves it out (an optimizer
    # step bumps it every step, and nothing replayed keeps what they held).
    wants = None
    if torch.is_grad_enabled():
        wants = (values.requires_grad, x.requires_grad, bias is not None and bias.requires_grad)
        wants = wants if any(wants) else None
    # Each tensor's id, then the tensor: a kept key keeps its tensors alive, so their ids stay
    # theirs (a new values Parameter at a dead one's id, version and address would otherwise
    # replay launches that read the old one's memory), and two keys compare a tensor only
    # where their ids match: the very same object (tuples compare identical items as equal,
    # never by Tensor.__eq__).
    buffers = layer._buffers
    parts = [x.shape, x.stride(), x.dtype, x.device, wants, id(values), values,
             None if wants and wants[0] else values._version, values.data_ptr(), values.shape,
             values.dtype]  # fmt: skip
    if bias is not None:
        parts += (id(bias), bias, bias.shape, bias.stride(), bias.dtype)
    for name in _INDEX_BUFFERS[layer.format]:
        b = buffers[name]
        parts += (id(b), b, b._version, b.data_ptr())
    return tuple(parts)


def replay(layer, x: torch.Tensor):
    """(the output or None, this call's key): the output where the layer's last key matches
    and its replay runs."""
    call_key = key(layer, x)
    kept = layer._repeat_call
    if call_key is None or kept is None or kept[0] != call_key:
        return None, call_key
    run = kept[1]
    if run is _eager_plans.NEVER:
        return None, None  # (nothing to remember either)
    return run(x, layer._parameters["bias"]), None


def remember(layer, x: torch.Tensor, W, call_key: tuple | None) -> None:
    """After linear()'s call with this key: what the next call with it runs (nothing kept from
    a call a CUDA graph captured: linear leaves no plan for it)."""
    if call_key is None or (x.is_cuda and torch.cuda.is_current_stream_capturing()):
        return
    run = _eager_plans.replayer(x, W, layer._parameters["bias"])
    if run is not None:
        layer._repeat_call = (call_key, run)
