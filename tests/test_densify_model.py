"""densify_, sparsify_'s inverse: each sparse layer back to a dense one computing the same
thing (zeros where entries were pruned), with its place, training mode, dtype and gradients
kept, and Hugging Face models saved by save_pretrained loading into plain transformers."""

import pytest
import torch
from torch import nn

import sparsekernels as sk
from _helpers import randn, tiny_bert

CONFIGS = ["70%", "2:8", "2:8,v=4", "4:8,v=4,b=4", "2:4"]


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 1)
        self.mlp = nn.Sequential(nn.Linear(64, 96), nn.GELU(), nn.Linear(96, 32, bias=False))

    def forward(self, image, x):
        return self.conv(image), self.mlp(x)


def _randomized(model: nn.Module, gen, dtype=torch.float64) -> nn.Module:
    model = model.to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(randn(*p.shape, gen=gen, dtype=dtype))
    return model


@pytest.mark.parametrize("config", CONFIGS)
def test_dense_layers_compute_what_the_sparse_ones_did(config, gen):
    model = _randomized(_Net(), gen)
    sk.sparsify_(model, config)
    sparse_weights = {name: m.to_dense().clone() for name, m in model.named_modules()
                      if isinstance(m, sk.nn.SparseLinear | sk.nn.SparseConv2d)}  # fmt: skip
    image, x = randn(2, 8, 5, 3, gen=gen), randn(7, 64, gen=gen)
    want = model(image, x)
    summary = sk.densify_(model)
    assert summary.swapped == ["conv", "mlp.0", "mlp.2"] and not summary.skipped
    assert type(model.conv) is nn.Conv2d and type(model.mlp[0]) is nn.Linear
    assert model.mlp[2].bias is None
    for name, weight in sparse_weights.items():
        assert torch.equal(model.get_submodule(name).weight, weight), name
    got = model(image, x)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
    # pruning the dense model again by magnitude keeps the same entries
    sk.sparsify_(model, config)
    for name, weight in sparse_weights.items():
        assert torch.equal(model.get_submodule(name).to_dense(), weight), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mode_dtype_and_gradients_are_kept(dtype, gen):
    model = _randomized(nn.Sequential(nn.Linear(32, 16), nn.Linear(16, 8)), gen, dtype)
    sk.sparsify_(model, "2:8")
    model[0].train()
    model[1].eval()
    model[1].values.requires_grad_(False)
    sk.densify_(model)
    assert model[0].training and not model[1].training
    assert model[0].weight.dtype == dtype and model[0].bias.dtype == dtype
    assert model[0].weight.requires_grad and model[0].bias.requires_grad
    assert not model[1].weight.requires_grad and model[1].bias.requires_grad  # (each its own)


def test_a_layer_under_two_names_becomes_one_dense_layer(gen):
    shared = nn.Linear(16, 16)
    model = _randomized(nn.Sequential(shared, nn.ReLU(), shared), gen)
    sk.sparsify_(model, "70%")
    summary = sk.densify_(model)
    assert summary.swapped == ["0"]
    assert model[0] is model[2] and type(model[0]) is nn.Linear


def test_what_stays_sparse_and_why(gen):
    model = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16))
    conv = nn.Conv2d(8, 8, 1)
    sk.sparsify_(model, "2:8")
    model.append(sk.nn.SparseConv2d.from_dense(conv, sparsity=0.5, activation="relu"))
    summary = sk.densify_(model, filter_fn=lambda module, fqn: fqn != "1")
    assert summary.swapped == ["0"]
    assert summary.skipped["1"] == "excluded by filter_fn"
    assert "relu" in summary.skipped["2"] and "to_conv" in summary.skipped["2"]
    assert isinstance(model[1], sk.nn.SparseLinear) and isinstance(model[2], sk.nn.SparseConv2d)
    root = sk.nn.SparseLinear.from_dense(nn.Linear(16, 16), pattern="2:8")
    assert "root" in sk.densify_(root).skipped[""]
    assert "densify_: swapped 1 layer(s), skipped 2" in str(summary)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        sk.densify_("model")
    with pytest.raises(TypeError, match="filter_fn must be callable"):
        sk.densify_(nn.Linear(4, 4), filter_fn="all")


def test_hugging_face_checkpoint_loads_into_plain_transformers(gen, tmp_path):
    transformers = pytest.importorskip("transformers")
    model = tiny_bert(0).double()
    sk.sparsify_(model, "2:4", filter_fn=lambda module, fqn: "pooler" not in fqn)
    ids = torch.randint(0, 64, (2, 9), generator=gen)
    want = model(input_ids=ids).last_hidden_state
    sk.densify_(model)
    model.save_pretrained(tmp_path)
    plain, info = transformers.BertModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched keys
    got = plain.double().eval()(input_ids=ids).last_hidden_state
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_gpt2_gets_its_conv1d_layers_back(gen, tmp_path):
    transformers = pytest.importorskip("transformers")
    Conv1D = transformers.pytorch_utils.Conv1D
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64,
                                     n_positions=32, bos_token_id=0, eos_token_id=0)  # fmt: skip
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).double().eval()
    sk.sparsify_(model, "2:8")
    ids = torch.randint(0, 64, (2, 9), generator=gen)
    want = model(input_ids=ids).logits
    summary = sk.densify_(model)
    assert len(summary.swapped) == 8
    assert all(type(model.get_submodule(name)) is Conv1D for name in summary.swapped)
    model.save_pretrained(tmp_path)
    plain = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).double().eval()
    torch.testing.assert_close(plain(input_ids=ids).logits, want, rtol=1e-10, atol=1e-10)


# -------------------------------------------------------- a pruned checkpoint, sparse again
def test_nonzero_keeps_each_layers_own_sparsity(gen):
    model = _randomized(nn.Sequential(nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 32)), gen)
    with torch.no_grad():  # pruned elsewhere, to different sparsities
        model[0].weight.mul_(sk.prune.magnitude_mask(model[0].weight, 0.5))
        model[2].weight.mul_(sk.prune.magnitude_mask(model[2].weight, 0.9))
    dense = [model[0].weight.clone(), model[2].weight.clone()]
    x = randn(5, 64, gen=gen)
    want = model(x)
    summary = sk.sparsify_(model, "nonzero")
    assert summary.swapped == ["0", "2"] and str(summary.config) == "nonzero"
    for layer, weight in zip((model[0], model[2]), dense, strict=True):
        assert layer.format == "csr" and layer.values.numel() == int((weight != 0).sum())
        assert torch.equal(layer.to_dense(), weight)
    torch.testing.assert_close(model(x), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("config", ["2:8", "2:8,v=4", "4:8,v=4,b=4", "2:4"])
def test_nonzero_as_n_m_restores_a_densified_model(config, gen):
    model = _randomized(nn.Sequential(nn.Linear(64, 48), nn.Linear(48, 32)), gen)
    sk.sparsify_(model, config)
    x = randn(5, 64, gen=gen)
    want, weights = model(x), [m.to_dense() for m in model]
    sk.densify_(model)
    with torch.no_grad():
        model[0].weight[0, :8] = 0  # a group with fewer nonzeros than n still fits
        weights[0][0, :8] = 0
        want = model(x)
    sk.sparsify_(model, f"{config},method=nonzero")
    for layer, weight in zip(model, weights, strict=True):
        assert torch.equal(layer.to_dense(), weight)
    torch.testing.assert_close(model(x), want, rtol=1e-12, atol=1e-12)


def test_nonzero_refuses_a_pattern_the_weights_do_not_fit(gen):
    model = _randomized(nn.Sequential(nn.Linear(16, 8)), gen)
    sk.sparsify_(model, "2:4")
    sk.densify_(model)
    with pytest.raises(ValueError, match=r"do not fit 1:4: the pattern would drop 32 of 64"):
        sk.sparsify_(model, "1:4,method=nonzero")
    assert type(model[0]) is nn.Linear  # (nothing swapped)


def test_nonzero_config_errors():
    with pytest.raises(ValueError, match="give no sparsity"):
        sk.SparsityConfig(sparsity=0.5, method="nonzero")
    with pytest.raises(ValueError, match="format= only"):
        sk.SparsityConfig.parse("nonzero,v=4")
    with pytest.raises(ValueError, match="no calibration"):
        sk.sparsify_(nn.Sequential(nn.Linear(8, 8)), "nonzero", calibration=lambda m: None)
    assert sk.SparsityConfig.parse("2:4,method=nonzero").label == "2:4,method=nonzero"
    assert sk.SparsityConfig.parse("NonZero").density is None


def test_a_densified_checkpoint_runs_sparse_again(gen, tmp_path):
    """Prune, densify_, save_pretrained; plain transformers loads it; sparsify_ with
    'method=nonzero' gives back the very layers."""
    transformers = pytest.importorskip("transformers")
    model = tiny_bert(0).double()
    keep = lambda module, fqn: "pooler" not in fqn  # noqa: E731
    sk.sparsify_(model, "2:4", filter_fn=keep)
    ids = torch.randint(0, 64, (2, 9), generator=gen)
    want = model(input_ids=ids).last_hidden_state
    sk.densify_(model)
    model.save_pretrained(tmp_path)
    loaded = transformers.BertModel.from_pretrained(tmp_path).double().eval()
    summary = sk.sparsify_(loaded, "2:4,method=nonzero", filter_fn=keep)
    assert len(summary.swapped) == 12
    got = loaded(input_ids=ids).last_hidden_state
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
