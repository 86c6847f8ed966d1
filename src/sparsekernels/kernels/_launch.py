"""Triton launches through the compiled kernel's own launcher once their specialization is known.

A launch through Triton's JIT function cost 34-40 us of host time on the H200's host against
10.5 us through the compiled kernel's launcher (benchmarks/results/nvidia-h200/2026-12-02/
at-fe7e976/launch_overhead.txt), and an eager training step of the Sparse Transformer made 45
of them (benchmarks/results/cpu/2026-12-07-eager-audit/report.md). `launch(fn, grid, *args,
**constexprs)` is `fn[grid](*args, **constexprs)`: the first call of a specialization goes
through the JIT function (compiling if need be), later ones find its compiled kernel by the
specialization key Triton itself computes for each argument (native_specialize_impl, as the
JIT function's binder calls it: dtypes, 16-byte alignment, integers equal to 1 or divisible
by 16) and the constexprs, and launch it with this call's arguments.

Runtime arguments go positionally, in the kernel's order; constexprs and launch options by
keyword. Only where Triton is the release whose launcher arguments this passes (3.6.x, as
ops/_launch_plans.py), outside the interpreter, and with no launch hooks set (a profiler's
would miss the launch); otherwise, and where SPARSEKERNELS_FAST_LAUNCH=0, through the JIT
function. VERIFY (the GPU tests) checks every fast launch's kernel against the JIT function's.
"""

from __future__ import annotations

import os

import torch
import triton

ENABLED = os.environ.get("SPARSEKERNELS_FAST_LAUNCH", "1") != "0"
SUPPORTED_TRITON = ("3.6.",)  # the launcher's arguments as JITFunction.run passes them there
_USABLE = (  # (Triton reads TRITON_INTERPRET when kernels are defined: at import, as here)
    ENABLED
    and triton.__version__.startswith(SUPPORTED_TRITON)
    and os.environ.get("TRITON_INTERPRET", "0") != "1"
)
if _USABLE:
    from triton._C.libtriton import native_specialize_impl  # (the binder's own, per argument)
VERIFY = False
stats = {"fast": 0, "jit": 0}  # (the GPU tests check the fast launches ran)


class _Kernel:
    """One JIT function on one device: how to key its launches, and the kernels seen per key."""

    __slots__ = ("backend", "flags", "seen")

    def __init__(self, fn, device: int) -> None:
        self.backend = fn.device_caches[device][3]
        # per parameter, as the binder passes them: (is_const, specialize, align); None for a
        # constexpr (keyed by its value)
        self.flags = [
            None
            if p.is_constexpr
            else (p.is_const, not p.do_not_specialize, not p.do_not_specialize_on_alignment)
            for p in fn.params
        ]
        self.seen: dict = {}  # key -> (kernel, the bound arguments after the positional ones)


_KERNELS: dict = {}  # (JIT function, device) -> _Kernel


def _hooks_idle() -> bool:
    from triton import knobs

    hooks = (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook)
    return all(h is None or not getattr(h, "calls", True) for h in hooks)


def launch(fn, grid: tuple, *args, **kwargs):
    """fn[grid](*args, **kwargs), through the compiled kernel where its specialization was seen;
    returns the compiled kernel, as a JIT launch does."""
    if not _USABLE or not _hooks_idle():
        return fn[grid](*args, **kwargs)
    device = torch.cuda.current_device()
    known = _KERNELS.get((fn, device))
    if known is None:
        kernel = fn[grid](*args, **kwargs)
        _KERNELS[(fn, device)] = _Kernel(fn, device)
        stats["jit"] += 1
        return kernel
    key = _key(known, args, kwargs)
    entry = known.seen.get(key)
    if entry is None:
        kernel = fn[grid](*args, **kwargs)
        known.seen[key] = _entry(fn, device, kernel, args, kwargs)
        stats["jit"] += 1
        return kernel
    if entry is False:  # (a keyword for a runtime argument: its value is not in the key)
        return fn[grid](*args, **kwargs)
    kernel, tail = entry
    if VERIFY:
        _verify(fn, grid, kernel, args, kwargs)
    g = (*grid, 1, 1)
    stream = torch._C._cuda_getCurrentRawStream(device)
    kernel.run(g[0], g[1], g[2], stream, kernel.function, kernel.packed_metadata, None, None,
               None, *args, *tail)  # fmt: skip
    stats["fast"] += 1
    return kernel


def _key(known: _Kernel, args: tuple, kwargs: dict) -> tuple:
    backend, flags = known.backend, known.flags
    parts = []
    for arg, flag in zip(args, flags, strict=False):  # (more args: Triton refused)
        if flag is None:  # a constexpr passed positionally: its value
            parts.append(("constexpr", arg))
        else:
            parts.append(native_specialize_impl(backend, arg, *flag))
    return (*parts, *kwargs.items())


def _entry(fn, device: int, kernel, args: tuple, kwargs: dict):
    """(kernel, the bound arguments after the positional ones), or False where a keyword names a
    runtime argument (the key holds only its specialization, not its value)."""
    binder = fn.device_caches[device][4]
    bound, _, _ = binder(*args, **kwargs)
    params = fn.params
    for param in params[len(args) :]:
        if param.name in kwargs and not param.is_constexpr:
            return False
    return kernel, list(bound.values())[len(args) :]


def _verify(fn, grid: tuple, kernel, args: tuple, kwargs: dict) -> None:
    """The JIT function's own lookup for this call (a warm-up: nothing launched) must find the
    very kernel launched."""
    found = fn.run(*args, grid=grid, warmup=True, **kwargs)
    if found is not kernel:
        raise AssertionError(f"fast launch of {fn.__name__}: another kernel than the JIT's")
