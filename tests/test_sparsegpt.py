"""SparseGPT: sparsegpt_prune against a brute-force OBS reference and against magnitude and
Wanda, its patterns and errors, and sparsify_(..., method=sparsegpt) one pass and sequential
(later stages fitting the dense model's outputs)."""

import copy

import pytest
import torch
from torch import nn

import sparsekernels as sk
from _helpers import tiny_bert
from sparsekernels import SparsityConfig
from sparsekernels.nn import SparseConv2d, SparseLinear
from sparsekernels.prune import (
    METHODS,
    dense_output_target,
    magnitude_mask,
    nm_mask,
    sparsegpt_prune,
    wanda_mask,
)


def _correlated(gen, tokens, features, dtype=torch.float64):
    """Inputs with correlated features of very different scales (as a real layer sees)."""
    mix = torch.randn(features, features, generator=gen, dtype=dtype)
    scale = torch.logspace(-1, 1, features, dtype=dtype)
    return (torch.randn(tokens, features, generator=gen, dtype=dtype) @ mix) * scale


def _damped(H, damp):
    H = H.clone()
    H.diagonal().add_(damp * H.diagonal().mean())
    return H


def _obs_reference(w, H, sparsity=None, n=None, m=None, vector=1, blocksize=128, damp=0.01):
    """SparseGPT spelled out: column by column, prune or keep, and if pruned apply the OBS update
    w_F -= w_j / [H_F^-1]_00 * [H_F^-1]_0,: over the columns F = j.. not yet visited, with
    H_F^-1 an explicit inverse of the damped H's trailing block. The mask comes from the OBS
    saliency w^2 / [H_F^-1]_00 of the current weights: per row at each block's start
    (unstructured), per group of m at the group's start (N:M, summed over `vector` rows)."""
    w = w.clone()
    rows, cols = w.shape
    H = _damped(H, damp)
    inverses = [torch.linalg.inv(H[j:, j:]) for j in range(cols)]
    diag = torch.tensor([inv[0, 0] for inv in inverses], dtype=w.dtype)
    mask = torch.zeros(rows, cols, dtype=torch.bool)
    density = None if sparsity is None else 1 - sparsity
    for j in range(cols):
        if n is None and j % blocksize == 0:
            end = min(j + blocksize, cols)
            keep = round(density * end) - round(density * j)
            saliency = w[:, j:end] ** 2 / diag[j:end]
            for r in range(rows):
                mask[r, j + saliency[r].argsort(descending=True)[:keep]] = True
        if n is not None and j % m == 0:
            saliency = w[:, j : j + m] ** 2 / diag[j : j + m]
            for r0 in range(0, rows, vector):
                best = saliency[r0 : r0 + vector].sum(0).argsort(descending=True)[:n]
                mask[r0 : r0 + vector, j + best] = True
        for r in range(rows):
            if not mask[r, j]:
                w[r, j:] -= w[r, j] / inverses[j][0, 0] * inverses[j][0]
    return w, mask


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sparsity": 0.5},
        {"sparsity": 0.5, "blocksize": 3},  # blocks of 3, 3 and 2 columns
        {"sparsity": 0.3, "blocksize": 5},
        {"n": 2, "m": 4},
        {"n": 2, "m": 4, "blocksize": 4},  # N:M does not depend on the block size
        {"n": 1, "m": 4, "vector": 2},
    ],
)
def test_matches_brute_force_obs(kwargs, gen):
    w = torch.randn(5, 8, generator=gen, dtype=torch.float64)
    x = _correlated(gen, 32, 8)
    got, mask = sparsegpt_prune(w, x.t() @ x, **kwargs, refit=False)
    want, want_mask = _obs_reference(w, x.t() @ x, **kwargs)
    assert torch.equal(mask, want_mask)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
    assert (got[~mask] == 0).all()


def _error(x, w, pruned):
    return float((x @ w.t() - x @ pruned.t()).norm() / (x @ w.t()).norm())


@pytest.mark.parametrize(
    "pattern",
    [
        {"sparsity": 0.5},
        {"sparsity": 0.7},
        {"n": 2, "m": 4},
        {"n": 2, "m": 8, "vector": 4},
        {"n": 4, "m": 8, "block": 2},
    ],
)
def test_reconstruction_beats_magnitude_and_wanda(pattern, gen):
    w = torch.randn(32, 64, generator=gen, dtype=torch.float64)
    x = _correlated(gen, 256, 64)
    pruned, mask = sparsegpt_prune(w, x.t() @ x, **pattern)
    norm = x.norm(dim=0)
    if "sparsity" in pattern:
        magnitude = magnitude_mask(w, pattern["sparsity"], per_row=True)
    else:
        magnitude = nm_mask(w, **pattern)
    wanda = wanda_mask(w, norm, **pattern)
    assert mask.sum() == magnitude.sum() == wanda.sum()  # the same number of weights kept
    ours = _error(x, w, pruned)
    assert ours < _error(x, w, w * wanda) and ours < _error(x, w, w * magnitude)
    # Its own mask without the update is worse: the compensation is doing work.
    assert ours < _error(x, w, w * mask)


@pytest.mark.parametrize("sparsity", [0.0, 0.25, 0.5, 0.9])
def test_unstructured_counts(sparsity, gen):
    w = torch.randn(6, 100, generator=gen, dtype=torch.float64)
    x = _correlated(gen, 128, 100)
    _, mask = sparsegpt_prune(w, x.t() @ x, sparsity=sparsity, blocksize=32)
    assert mask.sum(1).tolist() == [round((1 - sparsity) * 100)] * 6
    _, mask = sparsegpt_prune(w, x.t() @ x, sparsity=sparsity, per_row=False, blocksize=32)
    assert mask.sum() == round((1 - sparsity) * 600)


def test_nothing_pruned_changes_nothing(gen):
    w = torch.randn(4, 16, generator=gen, dtype=torch.float64)
    x = _correlated(gen, 64, 16)
    pruned, mask = sparsegpt_prune(w, x.t() @ x, sparsity=0.0)
    assert mask.all() and torch.equal(pruned, w)


@pytest.mark.parametrize("n, m, vector, block", [(2, 4, 1, 1), (2, 8, 4, 1), (4, 8, 3, 2)])
def test_nm_structure_and_updates(n, m, vector, block, gen):
    rows, cols = 10, 32
    w = torch.randn(rows, cols, generator=gen, dtype=torch.float64)
    x = _correlated(gen, 128, cols)
    pruned, mask = sparsegpt_prune(w, x.t() @ x, n=n, m=m, vector=vector, block=block, refit=False)
    assert (mask.view(rows, cols // m, m).sum(-1) == n).all()
    for r0 in range(0, rows, vector):  # the rows of a vector share their choice
        assert (mask[r0 : r0 + vector] == mask[r0]).all()
    runs = mask.view(rows, cols // block, block)
    assert (runs.all(-1) | ~runs.any(-1)).all()  # kept columns come in aligned runs of block
    assert (pruned[~mask] == 0).all()
    moved = (pruned - w).abs() > 1e-12
    assert moved[mask].float().mean() > 0.9  # kept weights are updated, not just copied
    assert moved[:, 0].sum() == (~mask[:, 0]).sum()  # column 0 has nothing before it
    # The exact refit (the default) moves every kept weight, column 0's too, and keeps the mask.
    refit, refit_mask = sparsegpt_prune(w, x.t() @ x, n=n, m=m, vector=vector, block=block)
    assert torch.equal(refit_mask, mask) and (refit[~mask] == 0).all()
    assert ((refit - w).abs() > 1e-12)[mask].all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dtype_and_dead_inputs(dtype, gen):
    w = torch.randn(8, 16, generator=gen).to(dtype)
    x = _correlated(gen, 64, 16)
    x[:, 3] = 0  # an input the calibration never saw: no information, weight zeroed
    pruned, mask = sparsegpt_prune(w, x.t() @ x, n=2, m=4)
    assert pruned.dtype == dtype and pruned.shape == w.shape and mask.dtype == torch.bool
    assert torch.isfinite(pruned).all() and (pruned[:, 3] == 0).all()
    assert (mask.view(8, 4, 4).sum(-1) == 2).all()
    _, unstructured = sparsegpt_prune(w, x.t().float() @ x.float(), sparsity=0.5)
    assert unstructured.sum(1).tolist() == [8] * 8


@pytest.mark.parametrize(
    "w, H, kwargs, error, match",
    [
        (torch.ones(4, 8), torch.eye(7), {"sparsity": 0.5}, ValueError, r"\(8, 8\)"),
        (torch.ones(4, 8), torch.eye(8).long(), {"sparsity": 0.5}, TypeError, "floating-point"),
        (torch.ones(4, 8), [[1.0]], {"sparsity": 0.5}, TypeError, "hessian must be a torch"),
        (torch.ones(8), torch.eye(8), {"sparsity": 0.5}, ValueError, "w must have 2"),
        (torch.ones(4, 8).long(), torch.eye(8), {"sparsity": 0.5}, TypeError, "w must be float"),
        (torch.full((4, 8), float("nan")), torch.eye(8), {"sparsity": 0.5}, ValueError, "finite"),
        (torch.ones(4, 8), torch.eye(8) * float("inf"), {"n": 2, "m": 4}, ValueError, "finite"),
        (torch.ones(4, 8), -torch.eye(8), {"n": 2, "m": 4}, ValueError, "positive definite"),
        (torch.ones(4, 8), torch.eye(8), {}, ValueError, "give a sparsity"),
        (torch.ones(4, 8), torch.eye(8), {"sparsity": 0.5, "n": 2, "m": 4}, ValueError, "both"),
        (torch.ones(4, 8), torch.eye(8), {"n": 2}, ValueError, "both n and m"),
        (torch.ones(4, 8), torch.eye(8), {"n": 2, "m": 3}, ValueError, "multiple of m=3"),
        (torch.ones(4, 8), torch.eye(8), {"sparsity": 1.5}, ValueError, r"\[0, 1\]"),
        (torch.ones(4, 8), torch.eye(8), {"sparsity": 0.5, "vector": 2}, ValueError, "N:M"),
        (torch.ones(4, 8), torch.eye(8), {"sparsity": 0.5, "blocksize": 0}, ValueError, "blocks"),
        (torch.ones(4, 8), torch.eye(8), {"sparsity": 0.5, "damp": -1}, ValueError, "damp"),
        (torch.ones(4, 8), torch.eye(8), {"sparsity": 0.5, "per_row": 1}, TypeError, "per_row"),
    ],
)
def test_errors(w, H, kwargs, error, match):
    with pytest.raises(error, match=match):
        sparsegpt_prune(w, H, **kwargs)


def test_config_method():
    assert "sparsegpt" in METHODS
    config = SparsityConfig.parse("2:4,method=sparsegpt")
    assert config.method == "sparsegpt" and SparsityConfig.parse(config.label) == config
    assert SparsityConfig.parse("50%,method=sparsegpt").label == "50%,method=sparsegpt"
    w, x = torch.randn(4, 8), torch.randn(32, 8)
    with pytest.raises(ValueError, match="updates the kept weights"):
        config.mask(w)
    with pytest.raises(ValueError, match="needs hessian"):
        config.prune(w)
    with pytest.raises(ValueError, match="hessian is for method 'sparsegpt'"):
        SparsityConfig(n=2, m=4).prune(w, hessian=x.t() @ x)
    pruned, mask = config.prune(w, hessian=x.t() @ x)
    want = sparsegpt_prune(w, x.t() @ x, n=2, m=4)
    assert torch.equal(pruned, want[0]) and torch.equal(mask, want[1])
    pruned, mask = SparsityConfig(n=2, m=4).prune(w)  # magnitude: masked, not updated
    assert torch.equal(mask, nm_mask(w, 2, 4)) and torch.equal(pruned, w * mask)
    with pytest.raises(ValueError, match="updates the kept weights"):
        SparseLinear.from_dense(nn.Linear(8, 4), pattern=config)


# ----------------------------------------------------------------------------- sparsify_
def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).double()


def _gram(x):
    return x.t() @ x


def test_sparsify_one_pass_matches_sparsegpt_prune(gen):
    model, x = _mlp(), _correlated(gen, 64, 16)
    dense = copy.deepcopy(model)
    summary = sk.sparsify_(model, "2:4,method=sparsegpt", calibration=lambda m: m(x))
    assert summary.config.method == "sparsegpt" and summary.swapped == ["0", "2"]
    assert all(not m._forward_pre_hooks for m in model.modules())
    hidden = dense[1](dense[0](x))  # one pass: both layers see the dense model's inputs
    for index, inputs in ((0, x), (2, hidden)):
        want, mask = sparsegpt_prune(dense[index].weight.detach(), _gram(inputs), n=2, m=4)
        torch.testing.assert_close(model[index].to_dense(), want)
    # The dense model's layers keep their own weights.
    assert torch.equal(dense[0].weight, _mlp()[0].weight)


def test_sparsify_sequential_fits_the_dense_outputs(gen):
    """The first stage prunes on the dense inputs; the second records the dense model's inputs,
    then fits the dense model's outputs from the partly pruned model's inputs."""
    model, x = _mlp(), _correlated(gen, 64, 16)
    dense = copy.deepcopy(model)
    calls = []

    def calibration(m):
        calls.append(1)
        m(x)

    sk.sparsify_(model, "50%,method=sparsegpt", calibration=calibration, sequential=True)
    assert len(calls) == 3  # stage 1; stage 2 over the dense model, then the pruned one
    first, _ = sparsegpt_prune(dense[0].weight.detach(), _gram(x), sparsity=0.5)
    torch.testing.assert_close(model[0].to_dense(), first)
    bias = dense[0].bias.detach()
    drifted = torch.relu(x @ first.t() + bias)  # through the pruned layer
    hidden = torch.relu(x @ dense[0].weight.detach().t() + bias)
    w = dense[2].weight.detach()
    target = dense_output_target(w, _gram(drifted), drifted.t() @ hidden)
    second, _ = sparsegpt_prune(target, _gram(drifted), sparsity=0.5)
    torch.testing.assert_close(model[2].to_dense(), second)
    own, _ = sparsegpt_prune(w, _gram(drifted), sparsity=0.5)  # (its own weight as the target)
    assert not torch.allclose(second, own)
    one_pass = copy.deepcopy(dense)
    sk.sparsify_(one_pass, "50%,method=sparsegpt", calibration=lambda m: m(x))
    assert not torch.allclose(one_pass[2].to_dense(), second)
    assert torch.equal(dense[0].weight, _mlp()[0].weight)  # the dense model as it was


def test_sequential_conv_fits_the_dense_outputs(gen):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(8, 16, 1), nn.ReLU(), nn.Conv2d(16, 4, 1)).double()
    x = torch.randn(3, 8, 5, 4, generator=gen, dtype=torch.float64)
    dense = copy.deepcopy(model)
    sk.sparsify_(model, "2:4,method=sparsegpt", calibration=lambda m: m(x), sequential=True)
    pixels = x.movedim(1, -1).reshape(-1, 8)
    first, _ = sparsegpt_prune(dense[0].weight.detach().reshape(16, 8), _gram(pixels), n=2, m=4)
    bias = dense[0].bias.detach()
    drifted = torch.relu(pixels @ first.t() + bias)
    hidden = torch.relu(pixels @ dense[0].weight.detach().reshape(16, 8).t() + bias)
    w = dense[2].weight.detach().reshape(4, 16)
    target = dense_output_target(w, _gram(drifted), drifted.t() @ hidden)
    want, _ = sparsegpt_prune(target, _gram(drifted), n=2, m=4)
    torch.testing.assert_close(model[2].to_dense().reshape(4, 16), want)


def test_sequential_calibration_must_repeat_itself(gen):
    """The dense and the pruned passes pair their calls: calibration that changes between
    passes (other batches, more or fewer calls) is an error, and nothing is swapped."""
    x = _correlated(gen, 40, 16)
    halves = lambda m: (m(x[:20]), m(x[20:]))  # noqa: E731
    changes = [  # (the first two passes, the third: stage 2 over the pruned model)
        (lambda m: m(x), lambda m: m(x[:30])),  # other tokens
        (lambda m: m(x), halves),  # more calls
        (halves, lambda m: m(x[:20])),  # fewer
    ]
    for before, later in changes:
        model, calls = _mlp(), []

        def calibration(m, before=before, later=later, calls=calls):
            calls.append(1)
            return before(m) if len(calls) < 3 else later(m)

        with pytest.raises(ValueError, match="same batches in the same order on every pass"):
            sk.sparsify_(model, "2:4,method=sparsegpt", calibration=calibration, sequential=True)
        assert isinstance(model[0], nn.Linear) and isinstance(model[2], nn.Linear)
        assert torch.equal(model[0].weight, _mlp()[0].weight)


class _Branches(nn.Module):
    """Two layers fed the same tensor (like query/key/value), then one fed their sum."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x):
        return self.c(self.a(x) + self.b(x))


def test_sequential_stages_group_layers_that_share_an_input(gen):
    torch.manual_seed(0)
    model, x = _Branches().double(), _correlated(gen, 32, 8)
    dense = copy.deepcopy(model)
    calls = []

    def calibration(m):
        calls.append(1)
        m(x[:16])
        m(x[16:])  # two batches: statistics add up over calls

    summary = sk.sparsify_(model, "2:4,method=sparsegpt", calibration=calibration, sequential=True)
    assert len(calls) == 3 and summary.swapped == ["a", "b", "c"]  # stages [a, b] and [c]
    pruned = {}
    for name in ("a", "b"):
        pruned[name], _ = sparsegpt_prune(
            dense.get_submodule(name).weight.detach(), _gram(x), n=2, m=4
        )
        torch.testing.assert_close(model.get_submodule(name).to_dense(), pruned[name])
    bias = dense.a.bias.detach() + dense.b.bias.detach()
    drifted = x @ (pruned["a"] + pruned["b"]).t() + bias
    hidden = x @ (dense.a.weight + dense.b.weight).detach().t() + bias
    w = dense.c.weight.detach()
    target = dense_output_target(w, _gram(drifted), drifted.t() @ hidden)
    want, _ = sparsegpt_prune(target, _gram(drifted), n=2, m=4)
    torch.testing.assert_close(model.c.to_dense(), want)


def test_sparsify_conv(gen):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(8, 16, 1), nn.ReLU(), nn.Conv2d(16, 4, 1)).double()
    x = torch.randn(2, 8, 3, 3, generator=gen, dtype=torch.float64)
    dense = copy.deepcopy(model)
    sk.sparsify_(model, "2:4,method=sparsegpt", calibration=lambda m: m(x))
    assert isinstance(model[0], SparseConv2d)
    pixels = x.movedim(1, -1).reshape(-1, 8)
    want, _ = sparsegpt_prune(dense[0].weight.detach().reshape(16, 8), _gram(pixels), n=2, m=4)
    torch.testing.assert_close(model[0].to_dense().reshape(16, 8), want)


def test_sparsify_bert_sequential_beats_wanda(gen):
    bert = tiny_bert()
    calib = {"input_ids": torch.randint(0, 64, (8, 16), generator=gen)}
    with torch.no_grad():
        want = bert(**calib).last_hidden_state
    errors = {}
    for method in ("wanda", "sparsegpt"):
        pruned = copy.deepcopy(bert)
        cfg = SparsityConfig(n=2, m=4, method=method)
        summary = sk.sparsify_(pruned, cfg, calibration=lambda m: m(**calib), sequential=True)
        assert len(summary.swapped) == 2 * 6 + 1
        assert all(isinstance(pruned.get_submodule(n), SparseLinear) for n in summary.swapped)
        with torch.no_grad():
            errors[method] = float((pruned(**calib).last_hidden_state - want).norm())
    assert errors["sparsegpt"] < errors["wanda"]


def test_sparsify_errors_leave_the_model_as_it_was(gen):
    x = _correlated(gen, 32, 16)
    with pytest.raises(ValueError, match="needs calibration="):
        sk.sparsify_(_mlp(), "2:4,method=sparsegpt")
    with pytest.raises(TypeError, match="sequential must be a bool"):
        sk.sparsify_(_mlp(), "2:4,method=sparsegpt", calibration=lambda m: m(x), sequential=1)
    with pytest.raises(ValueError, match="sequential=True .* calibration="):
        sk.sparsify_(_mlp(), "2:4", sequential=True)
    model = _mlp()
    original = copy.deepcopy(model.state_dict())
    calls = []

    def fails_second_time(m):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("data loader failed")
        m(x)

    with pytest.raises(RuntimeError, match="data loader"):
        sk.sparsify_(model, "2:4,method=sparsegpt", calibration=fails_second_time, sequential=True)
    assert isinstance(model[0], nn.Linear) and isinstance(model[2], nn.Linear)  # nothing swapped
    assert all(torch.equal(v, original[k]) for k, v in model.state_dict().items())
    assert all(not m._forward_pre_hooks for m in model.modules())
    with pytest.raises(ValueError, match="no tokens through 2"):
        sk.sparsify_(model, "2:4,method=sparsegpt", calibration=lambda m: m[0](x), sequential=True)
    assert isinstance(model[0], nn.Linear)
