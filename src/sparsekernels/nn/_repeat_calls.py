"""A layer's repeat eager call goes straight to what its plan runs.

Through linear() a repeat no-grad SparseLinear call spent 93-136 us of an H100's host time
(nn.Linear: 24-36): the weight property's freshness checks, the op's autocast and argument
checks, the plan's signature and its checks of the weight, reading the same versions several
times over; the attention core 83-118 (causal SDPA: 40-63). The layer keeps its last call's
key (the input's signature, which operands want a gradient, and its weight's or pattern's
tensors: identities, versions, addresses) with what the ops' replayer gave for it
(_eager_plans.replayer, _attention_plans.replayer): the recorded launches of an inference
call, a training call's autograd path; one entry per signature (a model calls a layer with a
few shapes), the latest state's. A call with a kept key runs that (58-84 and 44-61 us there,
results/nvidia-h100/2026-12-07/at-edd0380); anything else takes the op as before. _drop (a
changed pattern, release_caches, a move, a load) forgets them.
"""

from __future__ import annotations

import torch

from .._env import flag
from ..ops import _autocast
from ..ops._launch_plans import NEVER
from ._weight import _INDEX_BUFFERS

# On since its GPU tests passed on an H100 (results/nvidia-h100/2026-12-07/at-edd0380: a
# SparseLinear's no-grad host time 93-136 -> 58-84 us, the attention core's 83-118 -> 44-61);
# SPARSEKERNELS_LAYER_REPLAYS=0 turns it off.
ENABLED = flag("SPARSEKERNELS_LAYER_REPLAYS", True)
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_MISSING = object()  # (no "bias" Parameter: torch.nn.utils.prune's bias_orig in its place)


def on_cuda(x: torch.Tensor) -> bool:
    """Where launch plans record (a CPU emulation of the host time stands in for it): CUDA, on
    the current device (the ops launch on x's own device; a plan's path on the current one)."""
    return ENABLED and x.is_cuda and x.get_device() == torch.cuda.current_device()


def _may_replay(x: torch.Tensor) -> bool:
    """Not off CUDA, not while torch.compile traces or torch.func's transforms run, not under
    autocast (the op casts first), and a plain tensor."""
    return (
        type(x) in _PLAIN
        and on_cuda(x)
        and not torch.compiler.is_compiling()
        and not torch._C._are_functorch_transforms_active()
        and _autocast.target(x) is None
    )


MOST_SIGNATURES = 16  # kept a layer (a model calls it with a few shapes); then cleared


def _held(state: list, tensors: list, t: torch.Tensor, versioned: bool = True) -> None:
    """A tensor's part of a key's state: its id, version (unless not `versioned`), address,
    shape, strides and dtype; the tensor itself into `tensors`, which the entry keeps alive so
    that the id stays its own (a new values Parameter at a dead one's id, version and address
    would otherwise replay launches that read the old one's memory)."""
    version = t._version if versioned else None
    state += (id(t), version, t.data_ptr(), t.shape, t.stride(), t.dtype)
    tensors.append(t)


def linear_key(layer, x: torch.Tensor) -> tuple | None:
    """A SparseLinear call's key (its signature, its weight's state, the tensors to keep), or
    None where it cannot take the layer's replay at all (see _may_replay; values or bias that
    are not the layer's plain Parameters, as torch.nn.utils.prune or FSDP2 leave them)."""
    if not _may_replay(x):
        return None
    params = layer._parameters  # (not getattr: nn.Module's __getattr__ costs a call each)
    values, bias = params.get("values"), params.get("bias", _MISSING)
    if type(values) not in _PLAIN or values.is_inference():
        return None  # (None, or a subclass: FSDP2's DTensor, a fake tensor)
    if bias is not None and type(bias) not in _PLAIN:
        return None  # (_MISSING among them)
    # A call recording a gradient: which operands want one (the backward's needs); the values'
    # version left out where they want one, as the plan's signature leaves it out (an optimizer
    # step bumps it every step, and nothing replayed keeps what they held).
    wants = None
    if torch.is_grad_enabled():
        wants = (values.requires_grad, x.requires_grad, bias is not None and bias.requires_grad)
        wants = wants if any(wants) else None
    state, tensors = [], []
    _held(state, tensors, values, versioned=not (wants and wants[0]))
    if bias is not None:
        _held(state, tensors, bias, versioned=False)  # (read by each call: not recorded)
    buffers = layer._buffers
    for name in _INDEX_BUFFERS[layer.format]:
        _held(state, tensors, buffers[name])
    return (x.shape, x.stride(), x.dtype, x.device, wants, bias is None), tuple(state), tensors


def attention_key(layer, qkv: torch.Tensor) -> tuple | None:
    """A SparseAttention call's key on packed qkv, or None (see _may_replay)."""
    if not _may_replay(qkv) or type(layer.scale) not in (float, int, type(None)):
        return None  # (a tensor or NumPy scale set since: the op checks it)
    offsets, columns = layer._buffers["row_offsets"], layer._buffers["column_indices"]
    if type(offsets) not in _PLAIN or type(columns) not in _PLAIN:
        return None
    if offsets.is_inference() or columns.is_inference():
        return None
    gradient = qkv.requires_grad and torch.is_grad_enabled()
    state, tensors = [], []
    _held(state, tensors, offsets)
    _held(state, tensors, columns)
    signature = (qkv.shape, qkv.stride(), qkv.dtype, qkv.device, gradient, layer.scale)
    return signature, tuple(state), tensors


def replay(layer, call_key: tuple | None, *args):
    """The output where the layer keeps this call's signature with this state and its replay
    runs, else None."""
    if call_key is None:
        return None
    entry = layer._replays.get(call_key[0])
    if entry is None or entry[0] != call_key[1] or entry[1] is NEVER:
        return None
    return entry[1](*args)


def remember(layer, call_key: tuple | None, make_run) -> None:
    """After the whole call with this key: what the next call with it runs, from make_run()
    (a function, None where nothing is ready yet, NEVER where nothing will be), in place of
    what the signature kept for an older state. Nothing kept from a call a CUDA graph captured
    (the ops leave no plan for it), nor asked again where the layer keeps this very key (its
    replay declined: another stream)."""
    if call_key is None or _capturing():
        return
    signature, state, tensors = call_key
    replays = layer._replays
    entry = replays.get(signature)
    if entry is not None and entry[0] == state:
        return
    run = make_run()
    if run is None:
        return
    if entry is None and len(replays) >= MOST_SIGNATURES:
        replays.clear()
    held = _memory(state)
    if entry is not None and _memory(entry[0]) != held:  # (a new Parameter, a `.data` swap)
        for key in [k for k, e in replays.items() if _memory(e[0]) != held]:
            del replays[key]  # (their plans would hold the old tensors' memory to their calls)
    replays[signature] = (state, run, tensors)


def _memory(state: tuple) -> tuple:
    """The tensors' ids and addresses in a key's state (_held's items 0 and 2 of 6 each)."""
    return state[0::6] + state[2::6]


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
