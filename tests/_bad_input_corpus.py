"""The bad-input corpus's registry and builders (test_bad_input_corpus_rejected.py and
test_bad_input_corpus_handled.py; issue 6, part 1).

Each case either raises a ValueError/TypeError whose message names the argument and the problem
(`rejects`), or returns the correct result, checked against float64 dense math (`handles`).
Cases marked triton=True run a second time with backend="triton" (the interpreter on CPU) to
show the kernel path rejects or handles them the same way. These add to test_ops_bad_inputs.py.
The 'meta' device stands in for a second device: every device check compares devices before
touching data.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import scipy.sparse
import torch

from _helpers import (
    randn,
    random_csr,
    random_nm,
)

F64 = torch.float64
# the corpus's test modules' pytestmark
QUIET = pytest.mark.filterwarnings(
    "ignore:Sparse (CSR tensor support|invariant checks)",
    "ignore:(invalid value|divide by zero) encountered:RuntimeWarning",  # the interpreter's NaNs
)
REJECTED: list = []  # pytest.param(call, error, pattern, backend)
HANDLED: list = []  # pytest.param(check, backend)


def _params(table: list, fn, triton: bool, *args) -> None:
    name = fn.__name__.replace("_", "-")
    table.append(pytest.param(fn, *args, None, id=name))
    if triton:
        table.append(pytest.param(fn, *args, "triton", id=f"{name}[triton]"))


def rejects(error: type[Exception], pattern: str, triton: bool = False):
    """Register a case `fn(g, backend)` that must raise `error` matching `pattern`."""

    def register(fn):
        _params(REJECTED, fn, triton, error, pattern)
        return fn

    return register


def handles(triton: bool = False):
    """Register a case `fn(g, backend)` that checks its own (correct) result."""

    def register(fn):
        _params(HANDLED, fn, triton)
        return fn

    return register


def csr(g, rows=6, cols=5, density=0.5, **kw):
    return random_csr(rows, cols, density, g, **kw)


def nm(g, rows=6, cols=8, n=2, m=4, **kw):
    return random_nm(rows, cols, n, m, g, **kw)


def qkv(g, b=1, h=2, lq=6, lk=5, d=4, dv=3):
    return randn(b, h, lq, d, gen=g), randn(b, h, lk, d, gen=g), randn(b, h, lk, dv, gen=g)


def raw_torch_csr(g, crow, col, shape):
    """A torch CSR tensor built without torch's invariant checks (as users can)."""
    values = randn(len(col), gen=g)
    return torch.sparse_csr_tensor(
        torch.tensor(crow), torch.tensor(col), values, shape, check_invariants=False
    )


def raw_scipy_csr(indptr, indices, shape):
    """A scipy CSR matrix as given: scipy checks its arrays only lazily (check_format)."""
    data = np.arange(1.0, len(indices) + 1)
    return scipy.sparse.csr_matrix((data, np.array(indices), np.array(indptr)), shape=shape)


def seed_for(case_id: str) -> int:
    return zlib.crc32(case_id.encode())


def image(g, shape=(1, 4, 5, 5)):
    return randn(*shape, gen=g)
