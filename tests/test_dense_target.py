"""dense_output_target: the dense weight that maps the pruned model's inputs to the dense
model's outputs, against a ridge least-squares reference in float64; with the exact refit it
fits the dense outputs over a mask; its dtypes, edge cases and errors."""

import pytest
import torch

from sparsekernels.prune import dense_output_target, refit_kept


def _inputs(gen, tokens, features, dtype=torch.float64):
    """Dense-model inputs (correlated features of very different scales) and the same tokens
    as a partly pruned model sees them (drifted by a few percent, unevenly)."""
    mix = torch.randn(features, features, generator=gen, dtype=dtype)
    scale = torch.logspace(-1, 1, features, dtype=dtype)
    xd = (torch.randn(tokens, features, generator=gen, dtype=dtype) @ mix) * scale
    drift = torch.randn(features, features, generator=gen, dtype=dtype) * 0.05
    return xd + xd @ drift, xd


def _reference(w, xs, xd, damp):
    """Row by row: argmin over t of ||X_s t - X_d w||^2 + lam ||t - w||^2, lam = damp times
    the mean of diag(X_s^T X_s), by torch.linalg.lstsq on the stacked system."""
    lam = damp * xs.square().sum(0).mean()
    eye = torch.eye(xs.shape[1], dtype=xs.dtype)
    stacked = torch.cat([xs, lam.sqrt() * eye])
    rhs = torch.cat([xd @ w.t(), lam.sqrt() * w.t()])
    return torch.linalg.lstsq(stacked, rhs).solution.t()


@pytest.mark.parametrize("rows, cols, tokens", [(7, 13, 40), (1, 33, 100), (5, 1, 8), (4, 20, 9)])
@pytest.mark.parametrize("damp", [1e-3, 0.5, 30.0])
def test_matches_ridge_least_squares(rows, cols, tokens, damp, gen):
    w = torch.randn(rows, cols, generator=gen, dtype=torch.float64)
    xs, xd = _inputs(gen, tokens, cols)
    got = dense_output_target(w, xs.t() @ xs, xs.t() @ xd, damp=damp)
    torch.testing.assert_close(got, _reference(w, xs, xd, damp), rtol=1e-7, atol=1e-9)
    assert got.dtype == w.dtype and got.shape == w.shape


def test_same_inputs_give_w_back(gen):
    w = torch.randn(6, 12, generator=gen, dtype=torch.float64)
    x, _ = _inputs(gen, 50, 12)
    H = x.t() @ x
    torch.testing.assert_close(dense_output_target(w, H, H), w, rtol=1e-10, atol=1e-12)


def test_fits_the_dense_outputs_better_than_w(gen):
    """Small ridge: the target's outputs on the drifted inputs match the dense outputs far more
    closely than w's own, every row."""
    w = torch.randn(8, 24, generator=gen, dtype=torch.float64)
    xs, xd = _inputs(gen, 200, 24)
    t = dense_output_target(w, xs.t() @ xs, xs.t() @ xd, damp=1e-6)
    want = xd @ w.t()
    assert ((xs @ t.t() - want).norm(dim=0) < 0.5 * (xs @ w.t() - want).norm(dim=0)).all()


def test_refit_of_the_target_is_least_squares_over_the_mask(gen):
    """With no ridge left (a negligible one here, none in the refit) each row's kept weights
    are argmin ||X_s[:, S] v - X_d w_row||: the dense outputs fit over the mask."""
    w = torch.randn(5, 16, generator=gen, dtype=torch.float64)
    xs, xd = _inputs(gen, 120, 16)
    H = xs.t() @ xs
    mask = torch.rand(5, 16, generator=gen) < 0.5
    mask[0] = False
    mask[1, :] = False
    mask[1, 7] = True  # one kept weight
    t = dense_output_target(w, H, xs.t() @ xd, damp=1e-12)
    got = refit_kept(t, mask, H, damp=0.0)
    for r in range(5):
        keep = mask[r]
        want = torch.zeros(16, dtype=torch.float64)
        if keep.any():
            want[keep] = torch.linalg.lstsq(xs[:, keep], xd @ w[r]).solution
        torch.testing.assert_close(got[r], want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_weight(dtype, gen):
    w = torch.randn(6, 32, generator=gen, dtype=torch.float64)
    xs, xd = _inputs(gen, 128, 32)
    want = _reference(w, xs, xd, 0.5)
    got = dense_output_target(w.to(dtype), (xs.t() @ xs).float(), (xs.t() @ xd).float())
    assert got.dtype == dtype
    bound = 2e-4 if dtype == torch.float32 else 2e-2  # (bf16: the weight's own rounding)
    err = (got.double() - want).norm(dim=1) / want.norm(dim=1)
    assert err.max() < bound, err


def test_inputs_never_nonzero_leave_w(gen):
    w = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    zeros = torch.zeros(4, 4, dtype=torch.float64)
    assert torch.equal(dense_output_target(w, zeros, zeros), w)


def test_a_dead_input_keeps_its_weight(gen):
    """An input the pruned model never feeds: its weight has no data, the ridge keeps it."""
    w = torch.randn(4, 10, generator=gen, dtype=torch.float64)
    xs, xd = _inputs(gen, 60, 10)
    xs[:, 2] = 0
    t = dense_output_target(w, xs.t() @ xs, xs.t() @ xd)
    torch.testing.assert_close(t[:, 2], w[:, 2], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(t, _reference(w, xs, xd, 0.5), rtol=1e-7, atol=1e-9)


def test_bad_arguments(gen):
    w = torch.randn(4, 8, generator=gen, dtype=torch.float64)
    H = torch.eye(8, dtype=torch.float64)
    with pytest.raises(TypeError, match="cross must be a torch.Tensor"):
        dense_output_target(w, H, H.numpy())
    with pytest.raises(ValueError, match=r"cross must have the hessian's shape \(8, 8\)"):
        dense_output_target(w, H, H[:4])
    with pytest.raises(TypeError, match="cross must be a floating-point"):
        dense_output_target(w, H, H.long())
    bad = H.clone()
    bad[0, 1] = float("nan")
    with pytest.raises(ValueError, match="cross must be finite"):
        dense_output_target(w, H, bad)
    for damp in (0, -1.0, 1e4, "0.5", True):
        with pytest.raises(ValueError, match="damp must be a number in"):
            dense_output_target(w, H, H, damp=damp)
    with pytest.raises(ValueError, match="hessian must have shape"):
        dense_output_target(w, H[:4, :4], H)
    with pytest.raises(TypeError, match="w must be"):
        dense_output_target(w.long(), H, H)


@pytest.mark.gpu
def test_on_cuda_as_on_the_cpu(gen):
    w = torch.randn(64, 96, generator=gen, dtype=torch.float64)
    xs, xd = _inputs(gen, 512, 96)
    want = _reference(w, xs, xd, 0.5)
    H, G = (xs.t() @ xs).float().cuda(), (xs.t() @ xd).float().cuda()
    got = dense_output_target(w.float().cuda(), H, G)
    assert got.device.type == "cuda" and got.dtype == torch.float32
    err = (got.double().cpu() - want).norm(dim=1) / want.norm(dim=1)
    assert err.max() < 2e-4, err
