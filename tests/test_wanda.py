"""Wanda masks (|W| * input norm, per row / per N:M group) and sparsify_(..., calibration=)."""

import copy
import itertools

import pytest
import torch
from safetensors.torch import load_model, save_model
from torch import nn

import sparsekernels as sk
from _helpers import tiny_bert
from sparsekernels import SparsityConfig
from sparsekernels.nn import SparseConv2d, SparseLinear
from sparsekernels.prune import magnitude_mask, nm_mask, nm_select, topk_mask, wanda_mask


def _brute_unstructured(scores, sparsity):
    """Per row: the index set of the right size with the largest total score."""
    rows, cols = scores.shape
    keep = round((1 - sparsity) * cols)
    mask = torch.zeros(rows, cols, dtype=torch.bool)
    for i in range(rows):
        choices = itertools.combinations(range(cols), keep)
        best = max(choices, key=lambda c: scores[i, list(c)].sum())
        mask[i, list(best)] = True
    return mask


def _brute_nm(scores, n, m, vector, block):
    """Per (vector rows x group of m) the choice of n // block blocks with the largest sum."""
    rows, cols = scores.shape
    mask = torch.zeros(rows, cols, dtype=torch.bool)
    for r0 in range(0, rows, vector):
        for g in range(0, cols, m):
            tile = scores[r0 : r0 + vector, g : g + m]
            block_sums = tile.sum(0).view(m // block, block).sum(1)
            best = max(
                itertools.combinations(range(m // block), n // block),
                key=lambda c: block_sums[list(c)].sum(),
            )
            for b in best:
                mask[r0 : r0 + vector, g + b * block : g + (b + 1) * block] = True
    return mask


def _distinct(gen, shape):
    """Random weights and norms whose products have no ties."""
    w = torch.randn(shape, generator=gen, dtype=torch.float64)
    norm = torch.rand(shape[1], generator=gen, dtype=torch.float64) + 0.1
    return w, norm


@pytest.mark.parametrize("sparsity", [0.0, 0.25, 0.5, 0.75])
def test_unstructured_count_and_choice(sparsity, gen):
    w, norm = _distinct(gen, (6, 8))
    mask = wanda_mask(w, norm, sparsity=sparsity)
    assert mask.dtype == torch.bool and mask.shape == w.shape
    assert mask.sum(1).tolist() == [round((1 - sparsity) * 8)] * 6
    assert torch.equal(mask, _brute_unstructured(w.abs() * norm, sparsity))


@pytest.mark.parametrize(
    "n, m, vector, block", [(2, 4, 1, 1), (1, 4, 1, 1), (2, 8, 3, 1), (4, 8, 2, 2)]
)
def test_nm_count_and_choice(n, m, vector, block, gen):
    w, norm = _distinct(gen, (7, 16))
    mask = wanda_mask(w, norm, n=n, m=m, vector=vector, block=block)
    assert (mask.view(7, 16 // m, m).sum(-1) == n).all()
    assert torch.equal(mask, _brute_nm(w.abs() * norm, n, m, vector, block))


def test_equal_norms_give_per_row_magnitude(gen):
    w = torch.randn(16, 32, generator=gen)
    ones = torch.full((32,), 3.0)
    assert torch.equal(wanda_mask(w, ones, sparsity=0.5), magnitude_mask(w, 0.5, per_row=True))
    assert torch.equal(wanda_mask(w, ones, n=2, m=4), nm_mask(w, 2, 4))
    assert torch.equal(wanda_mask(w, ones, n=2, m=8, vector=4), nm_mask(w, 2, 8, vector=4))


def test_norms_change_the_choice():
    w = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    assert wanda_mask(w, torch.tensor([8.0, 1.0, 1.0, 1.0]), sparsity=0.5).tolist() == [
        [True, False, False, True]
    ]
    assert wanda_mask(w, torch.tensor([8.0, 1.0, 0.0, 1.0]), n=2, m=4).tolist() == [
        [True, False, False, True]
    ]


def test_shared_selection_and_nan():
    scores = torch.tensor([[1.0, 3.0, 2.0, 0.0], [4.0, 0.0, 1.0, 2.0]])
    assert topk_mask(scores, 0.5).sum() == 4 and topk_mask(scores, 0.5)[1, 0]
    assert topk_mask(scores, 0.5, per_row=True).sum(1).tolist() == [2, 2]
    assert nm_select(scores, 1, 4).tolist() == [[False, True, False, False]] + [
        [True, False, False, False]
    ]
    w = torch.tensor([[float("nan"), 1.0, 2.0, 3.0]])
    assert wanda_mask(w, torch.tensor([0.0, 1.0, 1.0, 1.0]), sparsity=0.75)[0, 0]  # NaN kept


@pytest.mark.parametrize(
    "norm, kwargs, error, match",
    [
        (torch.ones(7), {"sparsity": 0.5}, ValueError, r"shape \(in_features,\) = \(8,\)"),
        (torch.ones(1, 8), {"sparsity": 0.5}, ValueError, "shape"),
        (-torch.ones(8), {"sparsity": 0.5}, ValueError, "non-negative"),
        (torch.full((8,), float("nan")), {"sparsity": 0.5}, ValueError, "finite"),
        (torch.full((8,), float("inf")), {"n": 2, "m": 4}, ValueError, "finite"),
        (torch.ones(8, dtype=torch.long), {"sparsity": 0.5}, TypeError, "floating-point"),
        ([1.0] * 8, {"sparsity": 0.5}, TypeError, "torch.Tensor"),
        (torch.ones(8), {}, ValueError, "give a sparsity"),
        (torch.ones(8), {"sparsity": 0.5, "n": 2, "m": 4}, ValueError, "not both"),
        (torch.ones(8), {"n": 2}, ValueError, "both n and m"),
        (torch.ones(8), {"sparsity": 1.5}, ValueError, r"\[0, 1\]"),
        (torch.ones(8), {"sparsity": 0.5, "vector": 2}, ValueError, "N:M patterns only"),
        (torch.ones(8), {"n": 2, "m": 3}, ValueError, "multiple of m=3"),
    ],
)
def test_errors(norm, kwargs, error, match):
    with pytest.raises(error, match=match):
        wanda_mask(torch.randn(4, 8), norm, **kwargs)


def test_config_method():
    config = SparsityConfig.parse("2:4,method=wanda")
    assert config.method == "wanda" and SparsityConfig.parse(config.label) == config
    assert SparsityConfig.parse("50%").method == "magnitude"
    with pytest.raises(ValueError, match="method must be"):
        SparsityConfig(n=2, m=4, method="random")
    with pytest.raises(ValueError, match="needs input_norm"):
        config.mask(torch.randn(4, 8))
    with pytest.raises(ValueError, match="prunes by magnitude"):
        SparsityConfig(sparsity=0.5).mask(torch.randn(4, 8), torch.ones(8))


# ----------------------------------------------------------------------------- sparsify_
def _sequential():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).double()


def _skewed_input(gen):
    """Inputs whose features have very different scales, so Wanda differs from magnitude."""
    scale = torch.logspace(-2, 2, 16, dtype=torch.float64)
    return torch.randn(20, 16, generator=gen, dtype=torch.float64) * scale


@pytest.mark.parametrize("config", ["50%", "2:4", "2:8,v=4"])
def test_sparsify_sequential_matches_wanda_mask(config, gen):
    model = _sequential()
    dense = copy.deepcopy(model)
    x = _skewed_input(gen)
    summary = sk.sparsify_(model, config, calibration=lambda m: m(x))
    assert summary.config.method == "wanda" and summary.swapped == ["0", "2"]
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())
    cfg = SparsityConfig.parse(config)
    hidden = dense[1](dense[0](x))
    for index, inputs in ((0, x), (2, hidden)):
        norm = inputs.square().sum(0).sqrt()  # (float64 norms for a float64 model)
        if cfg.structured:
            kwargs = {"n": cfg.n, "m": cfg.m, "vector": cfg.vector}
        else:
            kwargs = {"sparsity": cfg.sparsity}
        got = model[index].to_dense() != 0
        assert torch.equal(got, wanda_mask(dense[index].weight, norm, **kwargs))
        if index == 0:  # the skewed norms moved the choice away from magnitude's
            assert not torch.equal(got, cfg.mask(dense[index].weight))
    assert model(x).shape == (20, 8)


def test_sparsify_calibration_errors_and_unreached_layer(gen):
    with pytest.raises(ValueError, match="needs calibration"):
        sk.sparsify_(_sequential(), SparsityConfig(n=2, m=4, method="wanda"))
    with pytest.raises(TypeError, match="calibration must be callable"):
        sk.sparsify_(_sequential(), "2:4", calibration="data")
    model = _sequential()
    with pytest.raises(ValueError, match="no tokens through 2"):
        sk.sparsify_(model, "2:4", calibration=lambda m: m[0](_skewed_input(gen)))
    assert isinstance(model[0], nn.Linear)  # nothing swapped
    assert all(not m._forward_pre_hooks for m in model.modules())
    model = _sequential()

    def boom(m):
        raise RuntimeError("data loader failed")

    with pytest.raises(RuntimeError, match="data loader"):
        sk.sparsify_(model, "2:4", calibration=boom)
    assert all(not m._forward_pre_hooks for m in model.modules())


@pytest.mark.parametrize("config", ["2:4,method=wanda", "50%,method=sparsegpt"])
def test_calibration_that_refills_one_input_buffer(config, gen):
    """Batches fed through one tensor refilled in place give the statistics of every batch,
    as separate tensors do (the hook's reuse of a shared input checks its version)."""
    batches = [_skewed_input(gen) * scale for scale in (0.01, 1.0, 3.0)]

    def separate(m):
        for b in batches:
            m(b)

    def refilled(m):
        buffer = torch.empty_like(batches[0])
        for b in batches:
            m(buffer.copy_(b))

    masks = []
    for calibration in (separate, refilled):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 8)).double()  # (one layer: its input is the last)
        sk.sparsify_(model, config, calibration=calibration)
        masks.append(model[0].to_dense())
    torch.testing.assert_close(masks[0], masks[1], rtol=0, atol=0)


def test_float64_norms_decide_near_ties():
    """A float64 model's Wanda scores are not rounded to float32 first."""
    for first, second in ((1.0 + 1e-9, 1.0), (1.0, 1.0 + 1e-9)):
        model = nn.Sequential(nn.Linear(2, 1, bias=False)).double()
        with torch.no_grad():
            model[0].weight.fill_(1.0)
        x = torch.tensor([[first, second]], dtype=torch.float64)
        sk.sparsify_(model, "50%", calibration=lambda m, x=x: m(x))
        assert (model[0].to_dense() != 0).tolist() == [[first > second, second > first]]


def test_calibration_by_keyword_and_zero_size_layers(gen):
    model = _sequential()
    x = _skewed_input(gen)
    sk.sparsify_(model, "2:4", calibration=lambda m: m[2](input=torch.relu(m[0](input=x))))
    assert isinstance(model[0], SparseLinear) and isinstance(model[2], SparseLinear)
    for shape in ((0, 8), (8, 0)):
        for config in ("50%", "2:4,method=sparsegpt"):
            model = nn.Sequential(nn.Linear(*shape)).double()
            inputs = torch.randn(3, shape[0], dtype=torch.float64)
            sk.sparsify_(model, config, calibration=lambda m, x=inputs: m(x))
            assert isinstance(model[0], SparseLinear) and model(inputs).shape == (3, shape[1])


def test_sparsify_conv_calibration(gen):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(8, 16, 1), nn.ReLU(), nn.Conv2d(16, 4, 1))
    scale = torch.logspace(-2, 2, 8).view(1, 8, 1, 1)
    x = torch.randn(2, 8, 3, 3, generator=gen) * scale
    dense = copy.deepcopy(model)
    sk.sparsify_(model, "2:4", calibration=lambda m: m(x))
    assert isinstance(model[0], SparseConv2d)
    norm = x.transpose(0, 1).reshape(8, -1).square().sum(1).sqrt()
    want = wanda_mask(dense[0].weight.reshape(16, 8), norm, n=2, m=4)
    assert torch.equal(model[0].to_dense().reshape(16, 8) != 0, want)
    assert model(x).shape == (2, 4, 3, 3)


@pytest.mark.parametrize("config", ["2:8", "60%"])
def test_bert_calibration_save_and_load(config, tmp_path, gen):
    model = tiny_bert(0)
    magnitude = copy.deepcopy(model)
    sk.sparsify_(magnitude, config)
    calib = {"input_ids": torch.randint(0, 64, (4, 16), generator=gen)}
    summary = sk.sparsify_(model, config, calibration=lambda m: m(**calib))
    assert len(summary.swapped) == 2 * 6 + 1 and summary.config.method == "wanda"
    assert all(not m._forward_pre_hooks for m in model.modules())
    differ = [
        name
        for name in summary.swapped
        if not torch.equal(
            model.get_submodule(name).to_dense() != 0,
            magnitude.get_submodule(name).to_dense() != 0,
        )
    ]
    assert len(differ) >= len(summary.swapped) // 2  # LayerNorm'd activations vary per feature
    assert all(isinstance(model.get_submodule(n), SparseLinear) for n in summary.swapped)
    inputs = {"input_ids": torch.randint(0, 64, (3, 12), generator=gen)}
    with torch.no_grad():
        got = model(**inputs).last_hidden_state
    assert torch.isfinite(got).all()
    save_model(model, str(tmp_path / "bert.safetensors"))
    fresh = tiny_bert(1)
    sk.sparsify_(fresh, config)  # magnitude masks of other weights, replaced by the load
    load_model(fresh, str(tmp_path / "bert.safetensors"))
    with torch.no_grad():
        torch.testing.assert_close(fresh(**inputs).last_hidden_state, got, rtol=0, atol=0)
