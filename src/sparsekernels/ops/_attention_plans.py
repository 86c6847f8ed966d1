"""Repeat eager calls of sparse_attention_packed on the fused kernel skip the checks and lookups.

The Sparse Transformer's layers call it with one signature every step. The checks of q, k, v and
the pattern, the backend choice, the kernel's configuration and the layout's tensor list depend
only on that signature (qkv's shape, strides, dtype and device, the scale as passed, a forced
backend, whether a gradient is recorded) and on the pattern as it is. So the first call of a
signature takes the whole path and leaves its plan (the scale as a float, the configuration,
the layout's tensors) in the pattern's derived cache, which an in-place edit of the pattern's
arrays empties; later calls launch at once. Eager calls only (not compiled, not under torch.func
transforms), on the current device, and not remembered while a CUDA graph is captured.
With LAUNCH_PLANS (on), a call without a gradient also records the forward's Triton launches on its
second call and replays them later (ops/_launch_plans.py, as linear's plans do: qkv is the x
that pointers follow, the pattern the weight whose tensors must stay unchanged). With
_launch_plans.TRAINING, a call recording a gradient does the same for its forward (outputs:
the attention's and the LSE) and its backward (inputs: qkv, the output, the LSE and the output's
gradient; output: qkv's gradient). Their fp32 scratch is allocated by each replay, not held.
"""

from __future__ import annotations

import torch

from .._env import flag
from .._fill_streams import before_launch
from ..formats import CSRMatrix
from . import _launch_plans
from ._dispatch import triton_interpreter_enabled
from ._identity_cache import version
from ._library import eager

# Each of the fused forward's launches (one a component and chunk) passes ~45 arguments through
# Triton's JIT function. On since its GPU tests (tests/test_attention_plans.py) passed on an H100
# (results/nvidia-h100/2026-12-07/at-83930b6); SPARSEKERNELS_ATTENTION_LAUNCH_PLANS=0 turns it off.
LAUNCH_PLANS = flag("SPARSEKERNELS_ATTENTION_LAUNCH_PLANS", True)
MOST_STREAMS = 4  # launch plans a signature records, one a stream
MOST_SIGNATURES = 16  # kept a pattern (a model calls a layer with a few shapes); then cleared
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _plans(qkv: torch.Tensor, pattern, scale, backend) -> tuple[dict, tuple] | None:
    """The pattern's plans and this call's signature, or None where no plan applies."""
    if type(qkv) not in _PLAIN or type(pattern) is not CSRMatrix or not eager(qkv):
        return None
    if backend is not None and type(backend) is not str:
        return None  # (a list, say: unhashable; the whole path names it)
    if type(scale) not in (float, int, type(None)):
        return None  # (a tensor or NumPy scale: the whole path checks it)
    if qkv.is_cuda and qkv.get_device() != torch.cuda.current_device():
        return None
    held = pattern.pattern
    if version(held.row_offsets) is None or version(held.column_indices) is None:
        return None  # (inference tensors: an edit would not be seen)
    gradient = qkv.requires_grad and torch.is_grad_enabled()
    signature = (
        qkv.shape, qkv.stride(), qkv.dtype, qkv.device, scale, backend, gradient,
        triton_interpreter_enabled(),
    )  # fmt: skip
    return held._cached("attention plans", dict), signature


class Plan:
    """What the whole path found for a signature, and the launch plans recorded (per stream)."""

    __slots__ = ("scale", "config", "layout", "launches", "training")

    def __init__(self, scale: float, config: list, layout: list) -> None:
        self.scale, self.config, self.layout = scale, config, layout
        self.launches: dict = {}  # the stream's key -> a LaunchPlan, or None where none came
        # "forward" / "backward" of calls recording a gradient -> {stream's key: LaunchPlan}
        self.training: dict = {"forward": {}, "backward": {}}

    def forward(self, qkv: torch.Tensor, pattern, run):
        """run() (the fused forward, no gradient, after before_launch), replayed where this
        stream recorded its launches; recorded on a stream's first planned call."""
        if not LAUNCH_PLANS:
            return run()
        state = _launch_plans.weight_state(pattern)
        return _launch_plans.replayed(self.launches, (qkv,), state, run, MOST_STREAMS)

    def training_call(self, part: str, inputs: tuple, state: tuple, run):
        """run() (the forward or backward of a call recording a gradient), replayed likewise
        where _launch_plans.TRAINING is on; the backward's inputs checked whole (the output's
        gradient comes in whatever strides autograd gives)."""
        if not _launch_plans.TRAINING:
            return run()
        store = self.training[part]
        return _launch_plans.replayed(store, inputs, state, run, MOST_STREAMS, part == "backward")


def find(qkv: torch.Tensor, pattern, scale, backend) -> Plan | None:
    """The plan an earlier call of this signature left, else None."""
    found = _plans(qkv, pattern, scale, backend)
    return None if found is None else found[0].get(found[1])


def remember(qkv: torch.Tensor, pattern, scale, backend, plan: Plan) -> None:
    if qkv.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    found = _plans(qkv, pattern, scale, backend)
    if found is None:
        return
    plans, signature = found
    if len(plans) >= MOST_SIGNATURES:
        plans.clear()
    plans[signature] = plan


def replayer(qkv: torch.Tensor, pattern, scale):
    """For a SparseAttention's repeat calls (nn/_repeat_calls.py), after a call on packed qkv:
    a function qkv -> the output (or None) for later calls of this signature whose pattern the
    caller vouches for (its tensors, versions and addresses unchanged), skipping the checks and
    lookups. Without a gradient it replays the launches this stream recorded (None on another
    stream); with one it applies the fused kernel's autograd twin with the plan. None where the
    launches are not recorded yet, NEVER where nothing will be (no plan: not the fused kernel)."""
    from ._attention_library import BlockAttentionPackedEager

    NEVER = _launch_plans.NEVER
    stream = _launch_plans.stream_of(qkv)
    plan = None if stream is None else find(qkv, pattern, scale, None)
    if plan is None:
        return NEVER
    if qkv.requires_grad and torch.is_grad_enabled():
        state = _launch_plans.weight_state(pattern) if _launch_plans.TRAINING else None
        args = (plan.layout, plan.scale, plan.config, plan, state)
        return lambda qkv: BlockAttentionPackedEager.apply(qkv, *args)[0]
    if not LAUNCH_PLANS:
        return NEVER
    if stream not in plan.launches:
        recordable = len(plan.launches) < MOST_STREAMS and _launch_plans.can_record(qkv)
        return None if recordable else NEVER
    launches = plan.launches[stream]
    if launches is None:
        return NEVER
    state = launches.state

    def replayed(qkv: torch.Tensor):
        before_launch(qkv.device)  # (as the planned call: after fills on other streams)
        return launches.replay_call((qkv,), state)

    return replayed
