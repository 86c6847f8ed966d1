"""Public ops reject bad input with a ValueError/TypeError naming the argument, before any work."""

import pytest
import torch

import sparsekernels as sk
from _helpers import randn, random_csr, random_nm


@pytest.fixture
def A(gen):
    return random_csr(6, 5, 0.5, gen)


@pytest.fixture
def W(gen):
    return random_nm(6, 8, 2, 4, gen)


def _cases(A, W, gen):
    B = randn(5, 3, gen=gen)
    return [
        (lambda: sk.spmm(A.to_dense(), B), TypeError, "A must be a CSRMatrix or NMMatrix"),
        (lambda: sk.spmm(A, B.numpy()), TypeError, "B must be a torch.Tensor"),
        (lambda: sk.spmm(A, randn(4, 3, gen=gen)), ValueError, "B must have A's column count 5"),
        (lambda: sk.spmm(A, randn(5, gen=gen)), ValueError, "B must have 2 or 3 dimensions"),
        (lambda: sk.spmm(A, B.float()), TypeError, "operands must share one dtype"),
        (
            lambda: sk.spmm(A, B.long()),
            TypeError,
            "B must be float16, bfloat16, float32 or float64",
        ),
        (lambda: sk.spmm(A, B, bias=randn(5, gen=gen)), ValueError, r"bias must have shape \(6,\)"),
        (
            lambda: sk.spmm(A, B, activation="tanh"),
            ValueError,
            "activation must be None, 'relu' or 'gelu'",
        ),
        (lambda: sk.spmm(A, B.to_sparse()), TypeError, "B must be a dense"),
        (lambda: sk.spmm(A, B, backend="cusparse"), ValueError, "backend must be one of"),
        (lambda: sk.spmm(W, randn(7, 3, gen=gen)), ValueError, "B must have A's column count 8"),
        (lambda: sk.spmm(W, randn(2, 8, 3, gen=gen)), ValueError, "B must have 2 dimensions"),
        (
            lambda: sk.spmm(A.with_values(randn(2, A.nnz, gen=gen)), randn(3, 5, 2, gen=gen)),
            ValueError,
            "batch",
        ),
        (
            lambda: sk.linear(randn(3, 7, gen=gen), W),
            ValueError,
            "x's last dimension must be W's in_features 8",
        ),
        (
            lambda: sk.linear(randn(3, 8, gen=gen), "W"),
            TypeError,
            "W must be a CSRMatrix or NMMatrix",
        ),
        (
            lambda: sk.linear(randn(3, 5, gen=gen), A.with_values(randn(2, A.nnz, gen=gen))),
            ValueError,
            "single matrix",
        ),
        (
            lambda: sk.sddmm(randn(6, 2, gen=gen), randn(5, 3, gen=gen), A),
            ValueError,
            "share their last dimension",
        ),
        (
            lambda: sk.sddmm(randn(5, 2, gen=gen), randn(5, 2, gen=gen), A),
            ValueError,
            "X must have pattern's 6 rows",
        ),
        (
            lambda: sk.sddmm(randn(6, 2, gen=gen), randn(5, 2, gen=gen), A.to_dense()),
            TypeError,
            "pattern must be a CSRMatrix",
        ),
        (
            lambda: sk.sddmm(randn(6, 2, gen=gen), randn(5, 2, gen=gen).float(), A),
            TypeError,
            "share one dtype",
        ),
        (
            lambda: sk.sddmm(randn(2, 6, 2, gen=gen), randn(3, 5, 2, gen=gen), A),
            ValueError,
            "batch",
        ),
        (lambda: sk.sparse_softmax(A.to_dense()), TypeError, "S must be a CSRMatrix"),
        (lambda: sk.sparse_softmax(A, scale="2"), TypeError, "scale must be a number"),
        (
            lambda: sk.sparse_attention(
                randn(1, 2, 6, 4, gen=gen),
                randn(1, 2, 5, 4, gen=gen),
                randn(1, 2, 5, 4, gen=gen),
                A.t(),
            ),
            ValueError,
            r"pattern must have shape \(6, 5\)",
        ),
        (
            lambda: sk.sparse_attention(
                randn(2, 6, 4, gen=gen), randn(2, 5, 4, gen=gen), randn(2, 5, 4, gen=gen), A
            ),
            ValueError,
            "q must have 4 dimensions",
        ),
        (
            lambda: sk.sparse_attention(
                randn(1, 2, 6, 4, gen=gen),
                randn(1, 2, 5, 3, gen=gen),
                randn(1, 2, 5, 4, gen=gen),
                A,
            ),
            ValueError,
            "head dimension",
        ),
        (
            lambda: sk.sparse_attention(
                randn(1, 2, 6, 4, gen=gen),
                randn(1, 2, 5, 4, gen=gen),
                randn(1, 2, 4, 4, gen=gen),
                A,
            ),
            ValueError,
            "v must have k's length",
        ),
    ]


def test_every_case_rejected(A, W, gen):
    cases = _cases(A, W, gen)
    assert len(cases) >= 25
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs two devices (cpu + cuda)")
def test_mixed_devices(A, gen):
    with pytest.raises(ValueError, match="one device"):
        sk.spmm(A, randn(5, 3, gen=gen, device="cuda"))


def test_linear_names_x(W, gen):
    with pytest.raises(TypeError, match="x must be float16"):
        sk.linear(torch.ones(3, 8, dtype=torch.int64), W)
    with pytest.raises(TypeError, match="x is torch.float32, W is torch.float64"):
        sk.linear(torch.ones(3, 8), W)


def test_an_unhashable_backend_is_named_after_a_plan_too(W, gen):
    """linear's eager plans looked the backend up in a dict first: a list raised 'unhashable
    type' once the weight had a plan, where a fresh weight got the clear error."""
    x = randn(3, W.shape[1], gen=gen, dtype=W.dtype)
    for _ in range(2):  # (the first call records the plan)
        with pytest.raises(ValueError, match="backend must be one of"):
            sk.linear(x, W, backend=["dense"])
        sk.linear(x, W)
