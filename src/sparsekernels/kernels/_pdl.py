"""Programmatic dependent launch (Hopper): a kernel launched with `launch_pdl` may start while
the kernel before it in the stream finishes, once every program of that one has started its
dependents (`griddepcontrol.launch_dependents`) or ended; it must wait
(`griddepcontrol.wait`: the kernel before complete, its writes visible) before it reads what
that kernel may have written or writes what it may still read.

PDL (a launch constant): 0 off; 1 start the next kernel early, then wait before any load (only
the launch and the scheduling overlap); 2 also load the walk's first step of the weight before
waiting (its bytes in flight while the kernel before drains). 2 needs that the kernel before
did not write the weight: the routes launch with 1 where it may have (a cache just filled, the
weight updated since its last launch: ops/_weight_pdl.py).

The one-token routes take `decode_pdl(device)` (through ops/_weight_pdl.py): SPARSEKERNELS_PDL (0, 1
or 2; 0 when unset) on Hopper and later, else 0. It is read at each routed launch, but an eager
layer's launch plan (ops/_launch_plans.py) replays what its second call launched, and a CUDA graph
what it captured: set it before a model's first call. Off by default because a kernel launched with
it after a torch kernel (which never lets its successor start early) ran 0.4-1.3 us slower
(results/nvidia-h200/2026-12-03/at-542c759/pdl_chain.txt), and most models have torch layers between
their linears.
"""

from __future__ import annotations

import os
from functools import lru_cache

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


@triton.jit
def pdl_start(PDL: tl.constexpr):
    """At the kernel's start: let the next kernel launch; with PDL 1 wait here."""
    if PDL > 0:
        gdc_launch_dependents()
    if PDL == 1:
        gdc_wait()


@triton.jit
def pdl_before_inputs(PDL: tl.constexpr):
    """After the weight's first loads, before x is read or anything stored (PDL 2)."""
    if PDL == 2:
        gdc_wait()


def launch_options(pdl: int) -> dict:
    """The launch's keyword for a kernel taking PDL."""
    if pdl not in (0, 1, 2):
        raise ValueError(f"pdl must be 0, 1 or 2, got {pdl}")
    return {"launch_pdl": True} if pdl else {}


@lru_cache(maxsize=16)
def hopper(device: torch.device) -> bool:
    """A CUDA device of compute capability 9+ (PDL, TMA: sm_90 on)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def decode_pdl(device: torch.device) -> int:
    """The PDL a one-token route launches with on `device` (the module's docstring)."""
    wanted = os.environ.get("SPARSEKERNELS_PDL", "0")
    if wanted not in ("0", "1", "2"):
        raise ValueError(f"SPARSEKERNELS_PDL must be 0, 1 or 2, got {wanted!r}")
    return int(wanted) if wanted != "0" and hopper(device) else 0
