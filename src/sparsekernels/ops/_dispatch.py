"""Backend choice: each backend declares what it cannot do; choose() picks the first that can.

A backend is a name, a function listing the reasons it cannot run a problem (empty: it can), and
the function that runs it. Backends of an op are tried in the order they were registered; a
caller can force one with `backend=`, and when none fits the error lists why each was rejected.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .._fill_streams import before_launch
from ..kernels.tuning import MAX_GRID_YZ


@dataclass(frozen=True)
class Problem:
    """What backends look at to decide: device, dtype and op-specific facts."""

    device: torch.device
    dtype: torch.dtype
    facts: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Backend:
    name: str
    run: Callable
    # reasons(problem, forced) -> list of why this backend cannot run the problem
    reasons: Callable[[Problem, bool], list[str]]


_REGISTRY: dict[str, dict[str, Backend]] = {}

# A backend chosen when the op runs rather than when it is called: under torch.compile and
# torch.export. Choosing at the call would guard the graph on every size a rule compares (a
# recompile at each threshold; export refusing a dynamic batch); the op's body chooses from its
# concrete arguments instead, as an eager call does. (Dynamo shows a symbolic size to the code
# it traces as an int, so compiling is the test.) "auto:NAME" carries a hint (a backward's: the
# forward's backend, forced or chosen), taken first where it fits.
AUTO = "auto"


@dataclass(frozen=True)
class Deferred:
    # problem(*the op's run arguments) -> the Problem choose() decides on
    problem: Callable
    # devices where the choice depends on sizes (elsewhere it is made when traced)
    devices: tuple[str, ...] = ("cuda", "cpu")


_DEFERRED: dict[str, Deferred] = {}


def register(op: str, backend: Backend) -> None:
    _REGISTRY.setdefault(op, {})[backend.name] = backend


def defer(
    op: str,
    problem: Callable,
    devices: tuple[str, ...] = ("cuda", "cpu"),
) -> None:
    """Let `op` choose its backend when it runs (AUTO) when traced."""
    _DEFERRED[op] = Deferred(problem, devices)


def _deferred(op: str, problem: Problem) -> bool:
    deferred = _DEFERRED.get(op)
    return (
        deferred is not None
        and torch.compiler.is_compiling()  # (first: eager calls pay only this)
        and problem.device.type in deferred.devices
    )


def is_auto(backend: str) -> bool:
    """Whether `backend` is chosen when the op runs (AUTO, with or without a hint)."""
    return backend.startswith(AUTO) and (len(backend) == len(AUTO) or backend[len(AUTO)] == ":")


def hint_name(backend: str | None) -> str | None:
    """The backend a hint names: NAME from "auto:NAME", None from a bare "auto"."""
    if backend is not None and is_auto(backend):
        return backend[len(AUTO) + 1 :] or None
    return backend


def backends(op: str) -> list[str]:
    return list(_REGISTRY.get(op, {}))


def choose(op: str, problem: Problem, backend: str | None = None) -> str:
    """The name of the backend that runs `problem`; a ValueError says why none can. AUTO
    where the op defers its choice and is traced."""
    table = _REGISTRY[op]
    if backend is not None:
        if not isinstance(backend, str) or backend not in table:
            raise ValueError(f"backend must be one of {sorted(table)} for {op}, got {backend!r}")
        reasons = table[backend].reasons(problem, True)
        if reasons:
            raise ValueError(f"backend {backend!r} cannot run {op}: " + "; ".join(reasons))
        return backend
    if _deferred(op, problem):
        return AUTO
    return _first_fitting(op, problem)


def _first_fitting(op: str, problem: Problem) -> str:
    rejected = []
    for name, candidate in _REGISTRY[op].items():
        reasons = candidate.reasons(problem, False)
        if not reasons:
            return name
        rejected.append(f"{name}: " + "; ".join(reasons))
    raise ValueError(f"no backend can run {op}: " + " | ".join(rejected))


def explain(op: str, problem: Problem) -> dict[str, list[str]]:
    """Every backend of `op` with the reasons it would reject `problem` (empty: accepted)."""
    return {name: b.reasons(problem, False) for name, b in _REGISTRY[op].items()}


def run(op: str, backend: str, *args):
    if is_auto(backend):  # sizes are concrete now
        deferred, hint = _DEFERRED[op], hint_name(backend)
        problem = deferred.problem(*args)
        table = _REGISTRY[op]
        if hint in table and not table[hint].reasons(problem, True):
            backend = hint
        else:
            backend = _first_fitting(op, problem)
    for arg in args:  # (the first tensor's device: every op's operands share one)
        if isinstance(arg, torch.Tensor):
            if arg.is_cuda:
                if arg.get_device() != torch.cuda.current_device():
                    with torch.cuda.device(arg.device):  # (Triton launches on the current one)
                        before_launch(arg.device)
                        return _REGISTRY[op][backend].run(*args)
                before_launch(arg.device)  # (after fills another stream made)
            break
    return _REGISTRY[op][backend].run(*args)


# ----------------------------------------------------------------------- shared reasons
def triton_interpreter_enabled() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


# Looked up once, as a constant: torch.compile traces this module, and it warns on lru_cache.
_TRITON_INSTALLED = importlib.util.find_spec("triton") is not None
# Triton reads TRITON_INTERPRET when a kernel is defined (at this package's import), not when
# it runs: set later, the kernels stay compiled ones and a CPU launch fails inside Triton.
_INTERPRETER_AT_IMPORT = triton_interpreter_enabled()


def triton_device_reasons(problem: Problem, forced: bool) -> list[str]:
    """Triton runs on CUDA; on CPU only in its interpreter, and only when asked for by name."""
    if problem.device.type == "cuda":
        return [] if _TRITON_INSTALLED else ["triton is not installed"]
    if problem.device.type == "cpu" and triton_interpreter_enabled():
        if not _INTERPRETER_AT_IMPORT:
            return [
                "TRITON_INTERPRET=1 was set after sparsekernels was imported; Triton reads it "
                "when the kernels are defined: set it before the import"
            ]
        return [] if forced else ["on CPU the interpreter runs a Triton backend only when named"]
    return [
        f"tensors are on {problem.device.type}; Triton needs CUDA (or on a CPU its interpreter: "
        "TRITON_INTERPRET=1 set before importing sparsekernels)"
    ]


# CUDA caps grid axis 0 at 2^31 - 1 programs (axes 1 and 2: tuning.MAX_GRID_YZ).
MAX_GRID_X = 2**31 - 1


def triton_batched_reasons(problem: Problem, forced: bool) -> list[str]:
    """triton_device_reasons, plus the grid limits on the batch (grid axis 1 or 2) and on the
    rows (axis 0: one program per row; int32 row order)."""
    reasons = triton_device_reasons(problem, forced)
    if reasons:  # (sizes unread: a symbolic size compared would guard a compiled graph)
        return reasons
    if problem.facts.get("batch", 1) > MAX_GRID_YZ:
        reasons.append(f"batch {problem.facts['batch']} exceeds the grid limit {MAX_GRID_YZ}")
    if problem.facts.get("rows", 0) > MAX_GRID_X:
        reasons.append(f"{problem.facts['rows']} rows exceed the grid limit {MAX_GRID_X}")
    return reasons


def always(problem: Problem, forced: bool) -> list[str]:
    return []


def choose_with_hint(op: str, problem: Problem, backend: str | None, hint: str | None) -> str:
    """A forced backend, else `hint` (the backend a forward pass used) when it fits, else
    automatic; when traced, "auto:HINT" (the hint judged on the sizes the op runs with)."""
    if backend is not None:
        return choose(op, problem, backend)
    hint, table = hint_name(hint), _REGISTRY[op]
    if _deferred(op, problem):
        return f"{AUTO}:{hint}" if hint in table else AUTO
    if hint in table and not table[hint].reasons(problem, True):
        return hint
    return _first_fitting(op, problem)
