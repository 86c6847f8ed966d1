"""SparsityConfig shorthands and sparsify_: swaps, skips, filter_fn, bytes, Hugging Face models,
save and load."""

import copy

import pytest
import torch
from safetensors.torch import load_model, save_model
from torch import nn

import sparsekernels as sk
from _helpers import tiny_bert
from sparsekernels import SparsityConfig
from sparsekernels.nn import SparseConv2d, SparseLinear


@pytest.mark.parametrize(
    "text, want",
    [
        ("2:8", SparsityConfig(n=2, m=8)),
        (" 2 : 8 ", SparsityConfig(n=2, m=8)),
        ("90%", SparsityConfig(sparsity=0.9)),
        ("0.9", SparsityConfig(sparsity=0.9)),
        ("0", SparsityConfig(sparsity=0.0)),
        ("2:8,v=64", SparsityConfig(n=2, m=8, vector=64)),
        ("4:8,v=4,b=4", SparsityConfig(n=4, m=8, vector=4, block=4)),
        ("4:8, vector=4, block=2", SparsityConfig(n=4, m=8, vector=4, block=2)),
        ("2:4,format=csr", SparsityConfig(format="csr", n=2, m=4)),
    ],
)
def test_parse(text, want):
    got = SparsityConfig.parse(text)
    assert got == want
    assert SparsityConfig.parse(got.label) == got


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "empty"),
        ("2:", "two integers"),
        ("a:8", "two integers"),
        ("8:2", "1 <= n < m"),
        ("2:512", "m <= 256"),
        ("90", r"write '90%'"),
        ("150%", r"\[0, 100\)"),
        ("-0.1", r"\[0, 1\)"),
        ("nan", r"\[0, 1\)"),
        ("sparse", "not a sparsity shorthand"),
        ("0.9,v=4", "need an N:M pattern"),
        ("2:8,v=0", "vector must be an int >= 1"),
        ("2:8,v=x", "positive integer"),
        ("2:8,q=3", "unknown option 'q'"),
        ("2:8,v=4,v=8", "given twice"),
        ("2:8,v", "key=value"),
        ("3:8,b=2", "block must divide"),
        ("90%,format=nm", "stored as CSR"),
        ("2:8,format=coo", "format must be"),
    ],
)
def test_parse_errors(text, match):
    with pytest.raises(ValueError, match=match):
        SparsityConfig.parse(text)


@pytest.mark.parametrize(
    "text", ["99.9999999%", "33.3333333333%", "0.123456789", "1e-10", "0.3333333333333333"]
)
def test_label_parses_back(text):
    config = SparsityConfig.parse(text)
    assert SparsityConfig.parse(config.label) == config


def test_config_errors_and_coerce():
    with pytest.raises(ValueError, match="not both"):
        SparsityConfig(sparsity=0.5, n=2, m=4)
    with pytest.raises(ValueError, match="give a sparsity"):
        SparsityConfig()
    with pytest.raises(TypeError, match="shorthand"):
        SparsityConfig.coerce([2, 8])
    with pytest.raises(TypeError, match="str"):
        SparsityConfig.parse(0.5)
    assert SparsityConfig.coerce(0.75) == SparsityConfig(sparsity=0.75)
    assert SparsityConfig.coerce("2:4").density == 0.5
    with pytest.raises(Exception, match="frozen|cannot assign"):
        SparsityConfig(n=2, m=4).n = 3


def _model(gen):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(64, 64),
        nn.ReLU(),
        nn.Linear(64, 32),
        nn.Linear(32, 30),  # in 32: fine for m=8
        nn.Linear(30, 8),  # in 30: not a multiple of 8
    )
    return model.double()


def _masked_copy(model, config):
    masked = copy.deepcopy(model)
    with torch.no_grad():
        for m in masked.modules():
            if (
                isinstance(m, nn.Linear)
                and config.unsupported_reason(tuple(m.weight.shape)) is None
            ):
                m.weight.mul_(config.mask(m.weight))
    return masked


@pytest.mark.parametrize("config", ["2:8", "70%", "2:8,v=4", "4:8,v=4,b=2"])
def test_sparsify_sequential(config, gen):
    model = _model(gen)
    want_model = _masked_copy(model, SparsityConfig.parse(config))
    summary = sk.sparsify_(model, config)
    structured = ":" in config
    assert summary.swapped == (["0", "2", "3"] if structured else ["0", "2", "3", "4"])
    if structured:
        assert summary.skipped == {"4": "in_features 30 is not a multiple of m=8"}
        assert isinstance(model[4], nn.Linear)
    assert all(isinstance(model[int(i)], SparseLinear) for i in summary.swapped)
    dense_bytes = sum(model[int(i)].dense_nbytes for i in summary.swapped)
    assert summary.weight_bytes_before == dense_bytes
    assert summary.weight_bytes_after == sum(model[int(i)].nbytes for i in summary.swapped)
    assert summary.weight_bytes_after < 0.6 * dense_bytes
    assert summary.model_bytes_after < summary.model_bytes_before
    assert config.split(",")[0] in str(summary)
    x = torch.randn(5, 64, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(model(x), want_model(x))


def test_filter_fn_and_convolutions(gen):
    model = nn.Sequential(
        nn.Conv2d(16, 32, 1),
        nn.Conv2d(32, 32, 3, padding=1),
        nn.Conv2d(32, 32, 1, groups=4),
        nn.Conv2d(32, 16, 1),
        nn.Flatten(),
        nn.Linear(16 * 9, 8),
    )
    seen = []

    def only_convs(module, fqn):
        seen.append(fqn)
        return isinstance(module, nn.Conv2d)

    summary = sk.sparsify_(model, "2:8", filter_fn=only_convs)
    assert summary.swapped == ["0", "3"]
    assert summary.skipped["1"] == "kernel (3, 3) is not 1x1"
    assert "groups=4" in summary.skipped["2"]
    assert summary.skipped["5"] == "excluded by filter_fn"
    assert isinstance(model[0], SparseConv2d) and isinstance(model[3], SparseConv2d)
    assert model(torch.randn(2, 16, 3, 3, generator=gen)).shape == (2, 8)
    with pytest.raises(TypeError, match="filter_fn"):
        sk.sparsify_(model, "2:8", filter_fn="encoder")


def test_tied_shared_and_special_modules():
    shared = nn.Linear(16, 16)
    embedding = nn.Embedding(10, 16)
    head = nn.Linear(16, 10, bias=False)
    head.weight = embedding.weight  # tied, as a language model head
    model = nn.ModuleDict(
        {
            "a": shared,
            "b": shared,
            "emb": embedding,
            "head": head,
            "mha": nn.MultiheadAttention(16, 2),
        }
    )
    summary = sk.sparsify_(model, "50%")
    assert summary.swapped == ["a"]
    assert model["a"] is model["b"] and isinstance(model["a"], SparseLinear)
    assert summary.skipped["head"] == "weight is tied to another module's parameter"
    assert "MultiheadAttention" in summary.skipped["mha.out_proj"]
    root = sk.sparsify_(nn.Linear(8, 8), "50%")
    assert root.swapped == [] and "root" in root.skipped[""]
    with pytest.raises(TypeError, match="nn.Module"):
        sk.sparsify_("model", "50%")


# ----------------------------------------------------------------------------- transformers
def _inputs(gen):
    ids = torch.randint(0, 64, (3, 12), generator=gen)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 8:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def test_skips_what_reads_its_weights_or_shares_a_bias():
    """nn.TransformerEncoderLayer's fast path (eval, no grad) hands linear1/linear2's weights
    to a fused kernel; a bias shared between layers would be untied by a swap."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True))
    model.eval()
    summary = sk.sparsify_(model, "2:4")
    assert summary.swapped == [] and "fast path" in summary.skipped["0.linear1"]
    with torch.no_grad():
        assert model(torch.randn(2, 5, 16)).shape == (2, 5, 16)
    a, b = nn.Linear(8, 8), nn.Linear(8, 8)
    b.bias = a.bias
    model = nn.Sequential(a, b, nn.Linear(8, 4))
    summary = sk.sparsify_(model, "2:4")
    assert summary.swapped == ["2"] and "bias is tied" in summary.skipped["0"]
    assert model[0].bias is model[1].bias


@pytest.mark.parametrize("config", ["2:8", "80%", "2:8,v=16"])
def test_bert_sparsify_save_and_load(config, tmp_path, gen):
    model = tiny_bert(0)
    want_model = _masked_copy(model, SparsityConfig.parse(config))
    summary = sk.sparsify_(model, config)
    assert len(summary.swapped) == 2 * 6 + 1  # q, k, v, attn out, intermediate, output; pooler
    assert summary.skipped == {}
    inputs = _inputs(gen)
    with torch.no_grad():
        got = model(**inputs).last_hidden_state
        want = want_model(**inputs).last_hidden_state
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    save_model(model, str(tmp_path / "bert.safetensors"))
    fresh = tiny_bert(1)  # other random weights, so other masks
    sk.sparsify_(fresh, config)
    load_model(fresh, str(tmp_path / "bert.safetensors"))
    with torch.no_grad():
        torch.testing.assert_close(fresh(**inputs).last_hidden_state, got, rtol=0, atol=0)
    other = tiny_bert(2)  # and through state_dict
    sk.sparsify_(other, config)
    other.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(other(**inputs).last_hidden_state, got, rtol=0, atol=0)


def test_bert_filter_fn_and_tied_lm_head(gen):
    model = tiny_bert(0, "BertForMaskedLM")
    summary = sk.sparsify_(model, "2:8", filter_fn=lambda m, fqn: ".attention." in fqn)
    assert len(summary.swapped) == 2 * 4
    assert all(".attention." in name for name in summary.swapped)
    assert summary.skipped["cls.predictions.decoder"] in (
        "excluded by filter_fn",
        "weight is tied to another module's parameter",
    )
    with torch.no_grad():
        logits = model(**_inputs(gen)).logits
    assert logits.shape == (3, 12, 64) and torch.isfinite(logits).all()
    summary = sk.sparsify_(model, "2:8")  # the rest; the tied decoder stays dense
    assert (
        summary.skipped["cls.predictions.decoder"] == "weight is tied to another module's parameter"
    )


def test_weights_left_dense_outside_linears_are_reported():
    """A mixture of experts keeps its experts as one 3-D Parameter (transformers 5) and may
    keep a router matrix: the summary said nothing of them; layers already sparse were not
    mentioned either when sparsify_ ran again."""

    class Experts(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_up = nn.Parameter(torch.randn(4, 32, 16))
            self.router = nn.Parameter(torch.randn(4, 16))
            self.scale = nn.Parameter(torch.ones(1, 16))  # (a vector: not a weight matrix)

    model = nn.Sequential(nn.Linear(16, 16), Experts(), nn.LayerNorm(16), nn.Embedding(8, 16))
    summary = sk.sparsify_(model, "2:4")
    assert summary.swapped == ["0"]
    assert set(summary.skipped) == {"1.gate_up", "1.router"}
    assert "(4, 32, 16) parameter of Experts" in summary.skipped["1.gate_up"]
    again = sk.sparsify_(model, "2:8")
    assert again.swapped == [] and again.skipped["0"] == "already sparse (2:4)"
