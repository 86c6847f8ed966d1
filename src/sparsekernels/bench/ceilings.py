"""The machine's ceilings, measured in the same run: copy bandwidth and dense matmul rates.

They are what every kernel is placed against on the roofline: a memory-bound kernel should
approach the copy bandwidth, a compute-bound one the dense rate of its dtype.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .cases import DTYPE_NAMES
from .harness import Timer
from .peers import set_tf32

# (copy elements of fp32, matmul size) per device; CPU sizes keep a quick run quick.
_SIZES = {"cuda": (2**28, 8192), "cpu": (2**22, 1024), "tiny": (2**18, 256)}


def _matmul_tflops(timer: Timer, size: int, dtype: torch.dtype, tf32: bool) -> float:
    device = timer.device
    a = torch.randn(size, size, device=device).to(dtype)  # random data: zeros draw less power
    b = torch.randn(size, size, device=device).to(dtype)
    restore = set_tf32(tf32) if device.type == "cuda" else (lambda: None)
    try:
        ms = timer.time([lambda: a @ b]).ms
    finally:
        restore()
    return 2 * size**3 / (ms * 1e-3) / 1e12


def _graph_copy_gbps(device: torch.device, nbytes: int = 2**28) -> float:
    """A copy of `nbytes` timed as a CUDA graph without an L2 flush between calls, as the
    kernel sweeps measure it (benchmarks/sweeps/softmax_heads_sweep.py): on the H200 256 MiB
    read 4.24 TB/s where the copy above (1 GiB under do_bench) read 2.77 (2026-11-30). The run
    records 256 MiB and 1 GiB this way, so the gap shows as the size's or the timer's."""
    from triton.testing import do_bench_cudagraph

    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = do_bench_cudagraph(lambda: dst.copy_(src), rep=20, return_mode="median")
    return 2 * src.numel() / (ms * 1e-3) / 1e9


def _copy_gbps(timer: Timer, elements: int) -> float:
    """Bytes read plus bytes written per second by a large device-to-device copy."""
    src = torch.randn(elements, device=timer.device)
    dst = torch.empty_like(src)
    ms = timer.time([lambda: dst.copy_(src)]).ms
    return 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9


COPY_KEYS = ("copy_gbps", "copy_gbps_graph_256mib", "copy_gbps_graph_1gib")


def copy_roof_gbps(ceilings: dict) -> float | None:
    """The bandwidth roof for plots and fractions: the highest copy rate the run measured. On
    the H200 a 1 GiB copy reads 2.77 TB/s as a CUDA graph as under the harness's timer, 256
    MiB 4.22 (at-66451f2: the size, not the timer); the problems here are smaller than 256 MiB,
    so the 1 GiB figure would flatter every kernel by 1.5x."""
    rates = [ceilings[key] for key in COPY_KEYS if ceilings.get(key)]
    return max(rates) if rates else None


def measure_ceilings(timer: Timer, dtypes: Sequence[torch.dtype], *, tiny: bool = False) -> dict:
    """{'copy_gbps': read+write GB/s, 'matmul_tflops': {'bf16': .., 'tf32': .., 'fp32': ..}}
    and on CUDA 'copy_gbps_graph_256mib' and 'copy_gbps_graph_1gib' (_graph_copy_gbps).

    On CUDA bf16, tf32 and strict fp32 (plus fp16 when asked for) at 8192^3; on CPU the
    run's dtypes and fp32 at a small size.
    """
    device = timer.device
    elements, size = _SIZES["tiny" if tiny else device.type if device.type == "cuda" else "cpu"]
    result = {"copy_gbps": _copy_gbps(timer, elements)}
    if device.type == "cuda" and not tiny:
        result["copy_gbps_graph_256mib"] = _graph_copy_gbps(device)
        result["copy_gbps_graph_1gib"] = _graph_copy_gbps(device, 2**30)

    wanted = {torch.float32, *dtypes}
    if device.type == "cuda":
        wanted |= {torch.bfloat16}
    rates = {}
    for dtype in sorted(wanted, key=str):
        rates[DTYPE_NAMES[dtype]] = _matmul_tflops(timer, size, dtype, tf32=False)
    if device.type == "cuda":
        rates["tf32"] = _matmul_tflops(timer, size, torch.float32, tf32=True)
    result["matmul_tflops"] = rates
    result["matmul_size"] = size
    return result
