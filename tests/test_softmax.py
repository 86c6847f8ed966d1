"""sparse_softmax over CSR rows: equals dense softmax with non-stored entries at -inf."""

import pytest
import torch

import sparsekernels as sk
from _helpers import ALL_DTYPES, randn, random_csr


def _dense_softmax(S, scale):
    dense = S.to_dense().double() * scale
    stored = torch.zeros(S.shape, dtype=torch.bool)
    stored[S.pattern.row_indices(), S.column_indices.long()] = True
    probs = dense.masked_fill(~stored, float("-inf")).softmax(-1)
    return probs[..., S.pattern.row_indices(), S.column_indices.long()]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("scale", [1.0, 0.125, 3.0])
def test_forward(dtype, scale, gen):
    S = random_csr(33, 47, 0.3, gen, dtype)  # includes empty rows
    got = sk.sparse_softmax(S, scale)
    tol = {torch.float64: 1e-12, torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}
    torch.testing.assert_close(
        got.values.double(), _dense_softmax(S, scale), atol=tol[dtype], rtol=tol[dtype]
    )
    rows = S.pattern.row_indices()
    sums = torch.zeros(33, dtype=torch.float64).index_add_(0, rows, got.values.double())
    nonempty = S.row_offsets.diff() > 0
    torch.testing.assert_close(
        sums[nonempty], torch.ones(int(nonempty.sum()), dtype=torch.float64), atol=1e-2, rtol=0
    )


def test_large_values_are_stable(gen):
    S = random_csr(5, 6, 0.8, gen, empty_rows=False)
    big = S.with_values(S.values * 1e4)
    assert torch.isfinite(sk.sparse_softmax(big).values).all()


def test_minus_inf_rows(gen):
    S = random_csr(4, 5, 1.0, gen, empty_rows=False)
    values = S.values.clone()
    values[S.row_offsets[1] : S.row_offsets[2]] = float("-inf")  # row 1 fully masked
    got = sk.sparse_softmax(S.with_values(values)).values
    assert torch.isnan(got[S.row_offsets[1] : S.row_offsets[2]]).all()  # as dense softmax
    assert torch.isfinite(got[: S.row_offsets[1]]).all()


def test_batched_and_backward(gen):
    S = random_csr(8, 9, 0.5, gen)
    values = randn(2, S.nnz, gen=gen).requires_grad_()
    got = sk.sparse_softmax(S.with_values(values), 0.5)
    torch.testing.assert_close(got.values, _dense_softmax(S.with_values(values.detach()), 0.5))
    f = lambda v: sk.sparse_softmax(S.with_values(v), 0.5).values  # noqa: E731
    assert torch.autograd.gradcheck(f, (values,))
    assert torch.autograd.gradgradcheck(f, (values,))  # through the backward op's own autograd


def test_long_rows_as_accurate_as_torch(gen):
    """The reference (the CPU path) summed a row in order in fp32: over 10^5 entries its
    probabilities and gradients were 7-28x less accurate than torch.softmax's."""
    k = 100_000
    S = sk.CSRMatrix(torch.tensor([0, k]), torch.arange(k), torch.zeros(k), (1, k))
    values = (randn(k, gen=gen, dtype=torch.float32) * 2).requires_grad_()
    probs = sk.sparse_softmax(S.with_values(values), 1.0).values
    want = values.detach().double().softmax(-1)
    assert ((probs.double() - want).abs() / want).max() < 3e-6  # torch.softmax's: 1.3e-6
    grad = randn(k, gen=gen, dtype=torch.float32)
    (d_values,) = torch.autograd.grad(probs, values, grad)
    exact = want * (grad.double() - (want * grad.double()).sum())
    assert (d_values.double() - exact).norm() / exact.norm() < 1e-6  # torch's: 2.9e-7


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scores_past_fp32_max_over_log2e_on_the_reference(dtype):
    """Scaled scores past 2.4e38 (fp32's max / log2(e)): the Triton kernel's documented limit
    (NaN rows), computed by the reference as dense softmax does: ties and zeros."""
    dense = torch.tensor([[3e38, -1.0, 3e38, 0.0], [-3e38, -3e38, 0.0, 0.0], [0.5, 0.25, 0, 0]])
    S = sk.CSRMatrix.from_dense(dense).to(dtype)
    for scale, values in ((1.0, S.values), (2.5e38, S.values.clamp(-1, 1))):
        got = sk.sparse_softmax(S.with_values(values), scale, backend="reference").values
        want = _dense_softmax(S.with_values(values.float()), scale)
        assert not want.isnan().any()
        torch.testing.assert_close(got.double(), want, rtol=1e-2, atol=1e-6)
