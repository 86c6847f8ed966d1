"""refit_kept: each row's kept weights solved exactly for a fixed mask, against a least-squares
reference in float64; its batching, dtypes, fallbacks and errors; SparseGPT's default use of it."""

import pytest
import torch

from sparsekernels.prune import refit, refit_kept, sparsegpt_prune


def _inputs(gen, tokens, features, dtype=torch.float64):
    """Correlated features of very different scales (as a real layer sees)."""
    mix = torch.randn(features, features, generator=gen, dtype=dtype)
    scale = torch.logspace(-1, 1, features, dtype=dtype)
    return (torch.randn(tokens, features, generator=gen, dtype=dtype) @ mix) * scale


def _reference(w, mask, x, damp=0.01):
    """Row by row: argmin over w' (zero off the mask) of ||X (w' - w)||^2 + lam ||w' - w||^2 by
    torch.linalg.lstsq on the stacked system [X; sqrt(lam) I], dead inputs' weights zeroed first
    (a dead input's diagonal counts as 1 in the mean that sets lam)."""
    x, w = x.double(), w.double().clone()
    diagonal = x.square().sum(0)
    dead = diagonal == 0
    w[:, dead] = 0
    lam = damp * torch.where(dead, torch.ones_like(diagonal), diagonal).mean()
    eye = torch.eye(x.shape[1], dtype=x.dtype)
    stacked = torch.cat([x, lam.sqrt() * eye + dead.double().diag()])
    out = torch.zeros_like(w)
    for r in range(w.shape[0]):
        keep = mask[r]
        if keep.any():
            solution = torch.linalg.lstsq(stacked[:, keep], stacked @ w[r]).solution
            out[r, keep] = solution
    return out


def _mask(gen, rows, cols, density=0.5):
    mask = torch.rand(rows, cols, generator=gen) < density
    mask[0] = False  # an empty row
    mask[1] = True  # a full row
    mask[2] = False
    mask[2, cols // 2] = True  # a single kept weight
    return mask


@pytest.mark.parametrize("rows, cols, tokens", [(7, 13, 40), (9, 33, 100), (3, 1, 8), (1, 20, 64)])
def test_matches_least_squares(rows, cols, tokens, gen):
    rows = max(rows, 3)
    w = torch.randn(rows, cols, generator=gen, dtype=torch.float64)
    x = _inputs(gen, tokens, cols)
    mask = _mask(gen, rows, cols)
    got = refit_kept(w, mask, x.t() @ x)
    want = _reference(w, mask, x)
    torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-10)
    assert (got[~mask] == 0).all() and torch.equal(got[1], w[1])  # the full row as it was


def test_the_optimum_for_its_mask(gen):
    """No change inside the mask lowers the damped output error: its gradient there is zero."""
    w = torch.randn(6, 24, generator=gen, dtype=torch.float64)
    x = _inputs(gen, 64, 24)
    H = x.t() @ x
    mask = _mask(gen, 6, 24)
    got = refit_kept(w, mask, H, damp=0.0)
    gradient = (got - w) @ H
    assert gradient[mask].abs().max() < 1e-8 * gradient.abs().max().clamp_min(1.0) * 1e3

    def error(v):
        return float(torch.einsum("ri,ij,rj->", v - w, H, v - w))

    for _ in range(5):
        nudged = got + 1e-3 * torch.randn(6, 24, generator=gen, dtype=torch.float64) * mask
        assert error(nudged) > error(got)


def test_dead_inputs_get_zero_weight(gen):
    w = torch.randn(5, 16, generator=gen, dtype=torch.float64)
    x = _inputs(gen, 48, 16)
    x[:, 3] = 0  # never seen in calibration
    mask = torch.ones(5, 16, dtype=torch.bool)
    mask[:, 8:] = False
    got = refit_kept(w, mask, x.t() @ x)
    assert (got[:, 3] == 0).all()
    torch.testing.assert_close(got, _reference(w, mask, x), rtol=1e-8, atol=1e-10)


def test_chunks_give_the_same_answer(gen, monkeypatch):
    w = torch.randn(23, 16, generator=gen, dtype=torch.float64)
    x = _inputs(gen, 64, 16)
    mask = _mask(gen, 23, 16)
    whole = refit_kept(w, mask, x.t() @ x)
    monkeypatch.setattr(refit, "CHUNK_BYTES", 3 * 16 * 16 * 8)  # 3 rows' systems at a time
    torch.testing.assert_close(refit_kept(w, mask, x.t() @ x), whole, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dtypes(dtype, gen):
    w = torch.randn(8, 32, generator=gen).to(dtype)
    x = _inputs(gen, 128, 32)
    mask = _mask(gen, 8, 32)
    got = refit_kept(w, mask, (x.t() @ x).float())
    assert got.dtype == dtype and (got[~mask] == 0).all()
    want = _reference(w, mask, x)
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-3
    torch.testing.assert_close(
        got.double(), want, rtol=tolerance, atol=tolerance * want.abs().max()
    )


def test_float64_where_float32_cannot_factor(gen, monkeypatch):
    """Where float32's Cholesky fails, the chunk is solved again from the float64 hessian."""
    factor = torch.linalg.cholesky_ex
    dtypes = []

    def float32_fails(a, **kwargs):
        dtypes.append(a.dtype)
        out, info = factor(a, **kwargs)
        return out, info + (a.dtype == torch.float32)

    monkeypatch.setattr(torch.linalg, "cholesky_ex", float32_fails)
    x = _inputs(gen, 64, 8)
    w = torch.randn(4, 8, generator=gen, dtype=torch.float32)
    mask = _mask(gen, 4, 8)
    got = refit_kept(w, mask, x.t() @ x)
    assert dtypes == [torch.float32, torch.float64] and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), _reference(w, mask, x), rtol=1e-5, atol=1e-5)


def test_singular_without_damping_names_damp(gen):
    x = _inputs(gen, 3, 10)  # 3 tokens: any 4 inputs are linearly dependent
    w = torch.randn(2, 10, generator=gen, dtype=torch.float64)
    mask = torch.zeros(2, 10, dtype=torch.bool)
    mask[:, :6] = True
    with pytest.raises(ValueError, match="raise damp"):
        refit_kept(w, mask, x.t() @ x, damp=0.0)
    assert torch.isfinite(refit_kept(w, mask, x.t() @ x)).all()  # damped: solvable


def test_nothing_kept_and_everything_kept(gen):
    w = torch.randn(4, 12, generator=gen, dtype=torch.float64)
    x = _inputs(gen, 32, 12)
    assert (refit_kept(w, torch.zeros(4, 12, dtype=torch.bool), x.t() @ x) == 0).all()
    assert torch.equal(refit_kept(w, torch.ones(4, 12, dtype=torch.bool), x.t() @ x), w)


@pytest.mark.parametrize(
    "pattern",
    [
        {"sparsity": 0.5},
        {"sparsity": 0.8, "per_row": False},
        {"n": 2, "m": 4},
        {"n": 1, "m": 4, "vector": 3},
    ],
)
def test_sparsegpt_refits_by_default(pattern, gen):
    w = torch.randn(12, 32, generator=gen, dtype=torch.float64)
    x = _inputs(gen, 96, 32)
    H = x.t() @ x
    paper, mask = sparsegpt_prune(w, H, **pattern, refit=False)
    got, got_mask = sparsegpt_prune(w, H, **pattern)
    assert torch.equal(got_mask, mask)
    torch.testing.assert_close(got, _reference(w, mask, x), rtol=1e-8, atol=1e-10)

    def error(v):
        return float((x @ (v - w).t()).norm())

    assert error(got) < error(paper)


def test_bad_arguments(gen):
    w = torch.randn(4, 8, generator=gen, dtype=torch.float64)
    H = torch.eye(8, dtype=torch.float64)
    mask = torch.ones(4, 8, dtype=torch.bool)
    with pytest.raises(TypeError, match="mask must be a torch.Tensor"):
        refit_kept(w, mask.tolist(), H)
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        refit_kept(w, mask.int(), H)
    with pytest.raises(ValueError, match="mask must have w's shape"):
        refit_kept(w, mask[:, :4], H)
    with pytest.raises(ValueError, match="hessian must have shape"):
        refit_kept(w, mask, H[:4, :4])
    with pytest.raises(ValueError, match="w must be finite"):
        refit_kept(w.clone().fill_(float("nan")), mask, H)
    with pytest.raises(ValueError, match="hessian must be symmetric"):
        refit_kept(w, mask, H + torch.triu(torch.ones(8, 8, dtype=torch.float64), 1))
    with pytest.raises(ValueError, match="damp must be"):
        refit_kept(w, mask, H, damp=-1)
    with pytest.raises(TypeError, match="refit must be a bool"):
        sparsegpt_prune(w, H, n=2, m=4, refit="yes")


@pytest.mark.gpu
def test_on_cuda_as_on_the_cpu(gen):
    """On a CUDA weight (the GPU demo's bf16 layers, float32 work), the CPU's answer."""
    w = torch.randn(40, 96, generator=gen).to(torch.bfloat16)
    x = _inputs(gen, 256, 96).float()
    mask = _mask(gen, 40, 96)
    H = x.t() @ x
    want = refit_kept(w, mask, H)
    got = refit_kept(w.cuda(), mask.cuda(), H.cuda())
    assert got.device.type == "cuda" and got.dtype == torch.bfloat16
    torch.testing.assert_close(got.cpu().float(), want.float(), rtol=1e-2, atol=1e-2)
    pruned, kept = sparsegpt_prune(w.cuda(), H.cuda(), n=2, m=4)
    assert (pruned[~kept] == 0).all() and torch.isfinite(pruned.float()).all()
