"""Launch-size arithmetic on the host, in plain Python.

triton.cdiv and triton.next_power_of_2 are constexpr functions in recent Triton (3.9): called
from host code they cost several microseconds each (argument unwrapping, an import), and an
eager decode call makes a dozen of them. These give the same results for the sizes we pass.
"""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n; 0 for n = 0, as triton.next_power_of_2."""
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


def mean_row(nnz: int, rows: int) -> int:
    """Stored entries in an average row, rounded up to a power of 2."""
    return next_power_of_2(max(1, -(-nnz // max(rows, 1))))


def operand_strides(t) -> tuple[int, int, int]:
    """(batch, row, column) strides of a 2-D operand or a batched 3-D one; batch 0 when 2-D,
    so every matrix of the batch reads the same operand."""
    return (t.stride(0) if t.dim() == 3 else 0, t.stride(-2), t.stride(-1))


def matrix_span(t) -> int:
    """A bound on the element offsets within one matrix (the last two dims) of t: the kernels
    compute offsets below 2^31 in int32."""
    dims = zip(t.shape[-2:], t.stride()[-2:], strict=True)
    return sum(max(n, 1) * max(abs(s), 1) for n, s in dims)
