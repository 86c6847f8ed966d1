"""Repeat eager calls of `linear` that want no gradient skip the checks and the backend choice.

An eager linear call paid 87-183 us of Python on the H200's host against 5-25 us of GPU
(benchmarks/results/nvidia-h200/2026-12-02/at-743e956/host_overhead.txt); the checks, the
facts the backends decide on and the choice among them were a third of it for N:M weights
and half for CSR. Their outcome depends only on the call's signature (x's shape, strides,
dtype and device, the bias's, a forced backend) and on the weight as it is (its values'
version: an in-place change can change the scatter kernel's copy). So the first call of a
signature takes the whole path, then remembers the backend chosen; later calls with that
signature run it directly. Not under torch.compile, nor for fake or functional tensors.
A call that records a gradient (a training step) is planned too: its autograd twin is applied
at once with the backend, and whether the backward wants A^T's pattern, the first call chose.
Its signature leaves out the version of values that want a gradient (an optimizer step bumps it
every step): the choice does not read them, since the scatter backend, the only one that keeps
a copy of the values, takes no values that want a gradient and is never planned for a gradient.
The second call of a signature also records the backend's Triton launches where it can, and
later ones replay them through the compiled kernels (ops/_launch_plans.py). The dense backend
(small layers: densify, then cuBLAS) makes its very cuBLAS call directly, its densify launch
replayed too where DENSIFY_PLANS is on.
"""

from __future__ import annotations

import math
import weakref

import torch

from .._env import flag
from ..formats import CSRMatrix, NMMatrix
from . import _cusparselt, _dense, _densified_linear, _dispatch, _launch_plans, _library
from ._identity_cache import IdentityCache, version
from ._layout import column_major
from .spmm import _backward_transposes, csr_problem, nm_problem

# W's values -> {call signature: _Plan}; an entry holds no tensor (IdentityCache's rule; a launch
# plan holds storages, not tensors)
_PLANS = IdentityCache()
_PLAIN = (torch.Tensor, torch.nn.Parameter)
# The dense backend's densify launch recorded and replayed (its GPU test in
# tests/test_launch_plans.py passed on the H200 at 78bfdee); SPARSEKERNELS_DENSIFY_PLANS=0
# turns it off.
DENSIFY_PLANS = flag("SPARSEKERNELS_DENSIFY_PLANS", True)
MOST_SIGNATURES = 16  # kept a weight (a model calls a layer with a few shapes); then cleared
MOST_STREAMS = 4  # launch plans a signature records, one a stream
# Backends a gradient's call is not planned for: the scatter backend reads a copy of the values
# kept per version, cuSPARSELt its own op with the packed weight.
_NOT_PLANNED_WITH_GRADIENT = ("scatter", "cusparselt")


class _Plan:
    __slots__ = ("backend", "launches", "weight", "transposes", "densify_launches")

    def __init__(self, backend: str, W, transposes: bool = False) -> None:
        self.backend = backend
        self.transposes = transposes  # (a gradient's plan: backward wants A^T's pattern)
        # the current stream's key -> its launch plan, or None where recording gave none (tried
        # once a stream: a plan replays on its own stream only, and a warm-up on a side stream,
        # as torch's CUDA graph docs do it, would otherwise leave none for the default one)
        self.launches: dict = {}
        # a gradient's densified linear: its densify's launch plans (_launch_plans.TRAINING)
        self.densify_launches: dict = {}
        # The weight whose checks passed: its shape, pattern and (weakly) its index tensors.
        # Two matrices may share one values tensor; the other one takes the whole path.
        self.weight = (_facts(W), *(weakref.ref(t) for t in _indices(W)))

    def fits(self, W) -> bool:
        facts, *refs = self.weight
        tensors = _indices(W)
        return facts == _facts(W) and all(r() is t for r, t in zip(refs, tensors, strict=True))


def _indices(W) -> tuple:
    return (W.row_offsets, W.column_indices) if type(W) is CSRMatrix else (W.indices,)


def _facts(W) -> tuple:
    """What a plan was checked for: the weight's shape and pattern, and its index arrays'
    versions (an in-place edit takes the whole path again, whose checks see it)."""
    arrays = tuple(version(t) for t in _indices(W))
    if type(W) is CSRMatrix:
        return W.shape, arrays
    return W.shape, W.n, W.m, W.vector, W.block, arrays


def _signature(x: torch.Tensor, W, bias: torch.Tensor | None, backend: str | None) -> tuple:
    """The call's signature, the values' version first (remember drops older versions' plans;
    None for a gradient's values, which the choice does not read)."""
    bias_part = None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.device)
    values = W.values
    return (
        version(values), values.shape, values.dtype, x.shape, x.stride(), x.dtype, x.device,
        bias_part, backend, _dispatch.triton_interpreter_enabled(),
    )  # fmt: skip


def _grad_signature(x: torch.Tensor, W, bias: torch.Tensor | None, backend: str | None) -> tuple:
    """A call recording a gradient: which operands want one, as well (the backward's needs)."""
    values = W.values
    wants = (values.requires_grad, x.requires_grad, bias is not None and bias.requires_grad)
    bias_part = None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.device)
    return (
        None if wants[0] else version(values), wants, values.shape, values.dtype, x.shape,
        x.stride(), x.dtype, x.device, bias_part, backend, _dispatch.triton_interpreter_enabled(),
    )  # fmt: skip


def _b(x: torch.Tensor, W) -> torch.Tensor:
    """linear's B: x's tokens as columns (W @ x^T)."""
    return x.reshape(math.prod(x.shape[:-1]), W.shape[1]).t()


def _csr_columns(W: CSRMatrix) -> torch.Tensor:
    cols = W.pattern.column_indices_int16()  # as spmm passes them
    return W.column_indices if cols is None else cols


def run(x: torch.Tensor, W, bias: torch.Tensor | None, backend: str | None):
    """linear(x, W, bias) by the backend an earlier call of this signature chose, else None."""
    kind = type(W)
    if kind is not CSRMatrix and kind is not NMMatrix:
        return None
    if type(x) not in _PLAIN or (bias is not None and type(bias) not in _PLAIN):
        return None  # (anything else: the whole path's checks name it)
    if backend is not None and type(backend) is not str:
        return None  # (a list, say: unhashable in the lookup; the whole path names it)
    gradient = not _library.eager_inference(W.values, x, bias)
    if gradient and not _library.eager(W.values, x, bias):  # (before any lookup: not compiling)
        return None
    if x.is_cuda and x.get_device() != torch.cuda.current_device():
        return None  # (the whole path launches on x's device)
    plans = _PLANS.get(W.values)
    if plans is None:
        return None
    if gradient:
        plan = plans.get(_grad_signature(x, W, bias, backend))
        return None if plan is None or not plan.fits(W) else _with_gradient(x, W, bias, plan)
    plan = plans.get(_signature(x, W, bias, backend))
    if plan is None or not plan.fits(W):
        return None
    if plan.backend == "dense":
        b = _b(x, W)
        if column_major(b):  # (else the backend multiplies another way)
            return _densified_product(b, W, bias, plan).view(*x.shape[:-1], W.shape[0])
    out = None
    stream = _launch_plans.stream_of(x)
    launches = plan.launches.get(stream)
    if launches is not None:
        out = launches.replay(x, bias, _launch_plans.weight_state(W), stream)
    if out is None:
        call = _backend_call(x, W, bias, plan.backend)
        if not _may_record(plan, stream, x):
            out = call()
        else:
            out, plan.launches[stream] = _launch_plans.record(call, x, bias, W)
    return out.t().contiguous().view(*x.shape[:-1], W.shape[0])


def replayer(x: torch.Tensor, W, bias: torch.Tensor | None):
    """For a layer's repeat calls (nn/_repeat_calls.py), after linear's whole or planned call: a
    function (x, bias) -> linear's output or None for later calls of this signature whose
    weight the caller vouches for (its tensors, their versions and addresses unchanged), which
    skips the plan's checks. An inference call's runs the launches its plan recorded on this
    stream (None where that stream differs); a call recording a gradient runs its plan's
    autograd path. None where the launches are not recorded yet, NEVER where nothing will be
    (no plan: the call was not planned; recording refused, a backend not all Triton launches)."""
    stream = _launch_plans.stream_of(x)
    if stream is None:
        return _launch_plans.NEVER
    gradient = not _library.eager_inference(W.values, x, bias)
    if gradient and not _library.eager(W.values, x, bias):
        return _launch_plans.NEVER
    plans = _PLANS.get(W.values)
    signature = (_grad_signature if gradient else _signature)(x, W, bias, None)
    plan = None if plans is None else plans.get(signature)
    if plan is None or not plan.fits(W):
        return _launch_plans.NEVER
    if gradient:
        return lambda x, bias: _with_gradient(x, W, bias, plan)
    if stream not in plan.launches:
        return None if _may_record(plan, stream, x) else _launch_plans.NEVER
    launches = plan.launches[stream]
    dense = plan.backend == "dense" and column_major(_b(x, W))
    if launches is None or not launches.lean:
        return _launch_plans.NEVER
    rows, cols = math.prod(x.shape[:-1]), W.shape[1]
    shape = (*x.shape[:-1], W.shape[0])
    if dense:  # (_densified_product's product: the densify replayed, then cuBLAS)

        def densified(x: torch.Tensor, bias: torch.Tensor | None):
            weight = launches.replay_linear(x, bias)  # (None on another stream)
            if weight is None:
                return None
            x2 = x.reshape(rows, cols)
            out = x2 @ weight.t() if bias is None else torch.addmm(bias, x2, weight.t())
            return out.view(shape)

        return densified

    def launched(x: torch.Tensor, bias: torch.Tensor | None):
        out = launches.replay_linear(x, bias)
        return None if out is None else out.t().contiguous().view(shape)

    return launched


def _with_gradient(x: torch.Tensor, W, bias: torch.Tensor | None, plan: _Plan) -> torch.Tensor:
    """linear's whole path from its autograd twin on: spmm's arguments as it passes them."""
    if type(W) is CSRMatrix and plan.backend == "dense" and _densified_linear.takes(x, W):
        columns, launches = _csr_columns(W), plan.densify_launches
        return _densified_linear.linear(x, W, columns, bias, launches)  # (one densify a step)
    b = _b(x, W)
    if type(W) is CSRMatrix:
        t_ro = t_ci = t_perm = None
        if plan.transposes:
            pattern, t_perm = W.pattern.transpose()
            t_ro, t_ci = pattern.row_offsets, pattern.column_indices
        arrays = (W.row_offsets, _csr_columns(W), W.values, b, bias, W.row_order)
        out = _library.spmm_csr_eager(*arrays, t_ro, t_ci, t_perm, "none", plan.backend)
    else:
        out = _library.spmm_nm_eager(W.values, W.indices, b, bias, "none", W.n, W.m, W.vector,
                                     W.block, False, plan.backend)  # fmt: skip
    return out.t().contiguous().view(*x.shape[:-1], W.shape[0])


def _densified_product(b: torch.Tensor, W, bias: torch.Tensor | None, plan: _Plan):
    """The dense backend's product for linear's column-major b = x^T, as (x W^T) in x's row
    order: the very cuBLAS call it makes (ops/_dense.py's _in_b_order), the weight densified
    by the plan's replayed launch (the densify's JIT launch alone cost more than cuBLAS's call)."""
    x = b.t()
    if _dense.widens_on_cpu(x):  # (the backend's own call: fp32 on the CPU, ops/_dense.py)
        return _backend_call(x, W, bias, "dense")().t()
    weight = None
    stream = _launch_plans.stream_of(x)
    launches = plan.launches.get(stream)
    if launches is not None:
        weight = launches.replay(x, bias, _launch_plans.weight_state(W), stream)
    if weight is None:
        densify = _densify_call(W)
        if not DENSIFY_PLANS or not _may_record(plan, stream, x):
            weight = densify()
        else:
            weight, plan.launches[stream] = _launch_plans.record(densify, x, bias, W)
    return x @ weight.t() if bias is None else torch.addmm(bias, x, weight.t())


def _may_record(plan: _Plan, stream, x: torch.Tensor) -> bool:
    """Whether this call records its launches: once a stream, on a few streams at most."""
    if stream in plan.launches or len(plan.launches) >= MOST_STREAMS:
        return False
    return _launch_plans.can_record(x)


def _densify_call(W):
    """The dense backend's densified W, as a call to make (its arguments as spmm passes them)."""
    if isinstance(W, CSRMatrix):
        return lambda: _dense.densify_csr(W.row_offsets, _csr_columns(W), W.values, W.shape[1])
    return lambda: _dense.densify_nm(W.values, W.indices, W.n, W.m, W.vector, W.block)


def _backend_call(x: torch.Tensor, W, bias: torch.Tensor | None, name: str):
    """The backend `name`'s product W @ x^T (out features x tokens), as a call to make."""
    b = _b(x, W)
    if isinstance(W, CSRMatrix):
        args = (W.row_offsets, _csr_columns(W), W.values, b, bias, W.row_order, "none")
        return lambda: _dispatch.run("spmm_csr", name, *args)
    if name == "cusparselt":
        return lambda: _cusparselt.spmm(W.values, W.indices, b, bias, "none", W)
    return lambda: _dispatch.run("spmm_nm", name, W.values, W.indices, b, bias, "none", W.n,
                                 W.m, W.vector, W.block, False)  # fmt: skip


def remember(x: torch.Tensor, W, bias: torch.Tensor | None, backend: str | None) -> None:
    """After a whole call of linear: the backend its signature takes, for the next call. Not
    while a CUDA graph is captured: spmm builds the scatter kernel's copy only outside one,
    so a captured first call may choose what eager calls would not."""
    gradient = not _library.eager_inference(W.values, x, bias)
    if gradient and not _library.eager(W.values, x, bias):
        return  # (compiling: first, as is_inference() stops a trace)
    if W.values.is_inference():
        return  # (inference tensors have no version to key on)
    if x.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    b, transposes = _b(x, W), False
    if isinstance(W, CSRMatrix):
        columns = _csr_columns(W)
        if gradient and b.requires_grad:  # (as spmm decides: the backward's need with it)
            name, transposes = _backward_transposes(W, columns, b, backend)
        else:
            problem = csr_problem(W.row_offsets, columns, W.values, b)
            name = _dispatch.choose_with_hint("spmm_csr", problem, backend, None)
    else:
        problem = nm_problem(W.values, b, W.n, W.m, W.vector, W.block, False)
        name = _dispatch.choose_with_hint("spmm_nm", problem, backend, None)
    if gradient and name in _NOT_PLANNED_WITH_GRADIENT:
        return
    signature = (_grad_signature if gradient else _signature)(x, W, bias, backend)
    plans = _PLANS.get(W.values)
    if plans is None or len(plans) >= MOST_SIGNATURES:
        plans = {}
        _PLANS[W.values] = plans
    # An older version's plans never match again (versions only grow): a model evaluated
    # between training steps would otherwise pile one up a step, launch plans and all.
    if signature[0] is not None:
        for stale in [key for key in plans if key[0] is not None and key[0] != signature[0]]:
            del plans[stale]
    plans[signature] = _Plan(name, W, transposes)
