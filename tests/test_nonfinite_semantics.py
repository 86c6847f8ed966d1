"""Inf and NaN where a user's data has them: the ops must treat them as torch's dense ops do
(architecture.md: NaN or Inf in stored values propagates exactly as in the dense product)."""

import pytest
import torch

import sparsekernels as sk

INF, NAN = float("inf"), float("nan")
DENSE = torch.tensor([[1.0, 0.0, 2.0, 0.0], [0.5, 0.0, 0.0, -1.0], [0.0, 3.0, 0.0, 0.5]])
MASK = DENSE != 0


def _weight(fmt: str):
    if fmt == "csr":
        return sk.CSRMatrix.from_dense(DENSE)
    return sk.NMMatrix.from_dense(DENSE, n=2, m=4, mask=MASK)  # two kept in each row


def _relu_oracle(b, bias, g):
    """float64: relu(A @ B + bias) multiplying only stored entries, through torch.relu."""
    w = DENSE.double().requires_grad_()
    bd, biasd = b.double().requires_grad_(), bias.double().requires_grad_()
    product = (w[:, :, None] * bd[None]).masked_fill(~MASK[:, :, None], 0).sum(1)
    torch.relu(product + biasd[:, None]).backward(g.double())
    return w.grad[MASK], bd.grad, biasd.grad


@pytest.mark.parametrize("fmt", ["csr", "nm"])
@pytest.mark.parametrize("backend", [None, "reference"])
def test_relu_gradient_is_torchs_at_inf_gradients_and_nan_outputs(fmt, backend):
    a = _weight(fmt)
    a.values = a.values.detach().clone().requires_grad_()
    b = torch.ones(4, 2)
    b[3, 1] = NAN  # row 1's column 1 is NaN before the ReLU: its gradient passes through
    bias = torch.tensor([0.0, -10.0, 0.0])  # row 1's column 0 is a dead unit ...
    g = torch.tensor([[1.0, 1.0], [INF, 1.0], [1.0, 2.0]])  # ... with an infinite gradient
    b_, bias_ = b.clone().requires_grad_(), bias.clone().requires_grad_()
    sk.spmm(a, b_, bias_, activation="relu", backend=backend).backward(g)
    d_values, d_b, d_bias = _relu_oracle(b, bias, g)
    # stored values come in row-major order in both formats (N:M keeps the mask's order)
    torch.testing.assert_close(a.values.grad.flatten().double(), d_values, equal_nan=True)
    torch.testing.assert_close(b_.grad.double(), d_b, equal_nan=True)
    torch.testing.assert_close(bias_.grad.double(), d_bias, equal_nan=True)


def test_sddmm_backward_multiplies_only_stored_entries():
    """On the CPU the SDDMM picks `dense` (it reads only the stored entries' rows), and its
    backward passed that name to its SpMMs, which densified the gradient: a NaN in a row of X
    that no entry reads, or an Inf in Y, reached every row of dY or dX."""
    mask = torch.tensor([[1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 1, 1]])
    pattern = sk.CSRMatrix.from_dense(torch.ones(4, 5), mask=mask.bool())
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, 3, generator=gen), torch.randn(5, 3, generator=gen)
    x[2, 0] = NAN  # row 2 stores nothing
    y[0, 1] = INF  # read by row 0 only
    xd, yd = x.double().requires_grad_(), y.double().requires_grad_()
    rows, cols = mask.nonzero(as_tuple=True)
    (xd[rows] * yd[cols]).sum(-1).backward(torch.ones(len(rows), dtype=torch.float64))
    x_, y_ = x.clone().requires_grad_(), y.clone().requires_grad_()
    sk.sddmm(x_, y_, pattern).values.sum().backward()
    torch.testing.assert_close(x_.grad.double(), xd.grad, equal_nan=True)
    torch.testing.assert_close(y_.grad.double(), yd.grad, equal_nan=True)
