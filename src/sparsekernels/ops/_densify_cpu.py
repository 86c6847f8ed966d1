"""A CSR weight densified on the CPU (the dense backend's, and where Triton cannot: batches past
the grid): each entry's flat position (row * cols + column), then one index_copy_.

The positions cost more than the copy (repeat_interleave over the row lengths), and on large
weights their temporaries cost most of all: a fresh allocation past glibc's mmap threshold
faults in every page (~2.5 us a 4 KB page on the 2-core dev VM), so 4096 x 4096 at 70%
(5M entries, 40 MB of int64 positions) took ~75 ms where the copy took ~7. So large weights go
CHUNK entries at a time (whole rows), whose temporaries the allocator reuses. Positions the
sddmm dense route keeps for a pattern (a training step's weight gradient) are used as they are.
"""

from __future__ import annotations

import bisect

import torch

CHUNK = 2**18  # entries a step on large weights (2 MB of int64 positions)


def densify_csr(row_offsets, column_indices, values, rows: int, cols: int, kept=None):
    """The dense (*batch, rows, cols) matrix of values (*batch, nnz); exact (a copy). `kept`:
    the pattern's flat positions (nnz,) where a cache already holds them."""
    weight = values.new_zeros((*values.shape[:-1], rows * cols))
    nnz = column_indices.numel()
    if kept is not None or nnz <= CHUNK:
        flat = kept if kept is not None else _positions(row_offsets, column_indices, 0, rows, cols)
        weight.index_copy_(-1, flat.long(), values)  # (kept ones are int32 where they fit)
        return weight.view(*values.shape[:-1], rows, cols)
    offsets = row_offsets.tolist()
    first = 0
    while first < rows:
        last = _last_row(offsets, first, CHUNK)
        start, end = offsets[first], offsets[last]
        if end > start:
            flat = _positions(row_offsets, column_indices, first, last, cols)
            weight.index_copy_(-1, flat, values[..., start:end])
        first = last
    return weight.view(*values.shape[:-1], rows, cols)


def _positions(row_offsets, column_indices, first: int, last: int, cols: int) -> torch.Tensor:
    """row * cols + column of rows first .. last's entries, int64."""
    ends = row_offsets[first : last + 1]
    start, end = int(ends[0]), int(ends[-1])
    lengths = ends.diff().long()
    bases = torch.arange(first, last, device=row_offsets.device) * cols
    flat = torch.repeat_interleave(bases, lengths, output_size=end - start)
    return flat.add_(column_indices[start:end])


def _last_row(offsets: list[int], first: int, entries: int) -> int:
    """One past the last row of a step from `first` holding at most `entries` (at least a row)."""
    last = bisect.bisect_right(offsets, offsets[first] + entries, lo=first + 1) - 1
    return max(last, first + 1)
