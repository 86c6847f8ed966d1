"""int32 copies of CSR column indices for torch's CPU CSR matmul, each written into one scratch
buffer a thread.

torch's sparse CSR tensors take int32 or int64 indices, while a CSRMatrix keeps int16 columns
where they fit (half the bytes for the GPU kernels). Converting them every call into a fresh
tensor cost as much as the product itself on large weights, mostly the page faults of a fresh
allocation (2-core dev VM: 17.6M columns, 4096 x 14336 at 70%, 45 ms fresh against 5.8 ms into
a buffer already mapped; 5M: 1.75 against 1.27 ms). So each thread converts into its own
buffer, grown to the most columns it has met and then kept: 4 bytes a column of the largest
weight it ran, a layer's worth, not a model's (bench/held.py counts it).
"""

from __future__ import annotations

import threading

import torch

from .._cache_mode import building

_LOCAL = threading.local()


def as_int32(columns: torch.Tensor) -> torch.Tensor:
    """`columns` (CPU) as a contiguous int32 tensor in this thread's buffer: valid until this
    thread's next call, so only for a product made and finished before that."""
    count = columns.numel()
    buffer = getattr(_LOCAL, "buffer", None)
    if buffer is None or buffer.numel() < count:
        # (a normal tensor: an inference one takes no copy_ outside the mode)
        with building(columns):
            buffer = torch.empty(max(count, 1), dtype=torch.int32)
        _LOCAL.buffer = buffer
    return buffer[:count].copy_(columns)


def buffers() -> list[torch.Tensor]:
    """The calling thread's buffer, if it has one (what bench/held.py counts)."""
    buffer = getattr(_LOCAL, "buffer", None)
    return [] if buffer is None else [buffer]
