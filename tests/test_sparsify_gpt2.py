"""sparsify_ on GPT-2, whose linears are Hugging Face's Conv1D (weight stored transposed, x @ W
+ b): swapped as nn.Linear is, by magnitude and calibrated, against a masked dense copy; saved
and loaded; a failed calibration leaves the Conv1Ds in place."""

import copy

import pytest
import torch

import sparsekernels as sk
from sparsekernels import SparsityConfig
from sparsekernels.nn import SparseLinear

transformers = pytest.importorskip("transformers")
Conv1D = transformers.pytorch_utils.Conv1D
CONV1DS = 2 * 4  # a block's c_attn, attention c_proj, c_fc and MLP c_proj


def tiny_gpt2(seed: int):
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    torch.manual_seed(seed)
    return transformers.GPT2LMHeadModel(config).double().eval()


def masked_copy(model, config: SparsityConfig):
    """The model with each Conv1D's weight masked as an nn.Linear's (out, in) would be."""
    masked = copy.deepcopy(model)
    with torch.no_grad():
        for m in masked.modules():
            if isinstance(m, Conv1D):
                m.weight.mul_(config.mask(m.weight.t()).t())
    return masked


@pytest.mark.parametrize("config", ["2:4", "70%", "2:8,v=4"])
def test_gpt2_conv1d_swapped_as_linear(config, gen):
    model = tiny_gpt2(0)
    want_model = masked_copy(model, SparsityConfig.parse(config))
    summary = sk.sparsify_(model, config)
    assert len(summary.swapped) == CONV1DS
    assert summary.skipped == {"lm_head": "weight is tied to another module's parameter"}
    assert not any(isinstance(m, Conv1D) for m in model.modules())
    c_attn = model.transformer.h[0].attn.c_attn
    assert isinstance(c_attn, SparseLinear) and (c_attn.out_features, c_attn.in_features) == (
        96,
        32,
    )
    ids = torch.randint(0, 64, (2, 12), generator=gen)
    with torch.no_grad():
        got, want = model(ids).logits, want_model(ids).logits
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_gpt2_calibrated_and_saved(gen, tmp_path):
    from safetensors.torch import load_model, save_model

    model = tiny_gpt2(0)
    ids = torch.randint(0, 64, (4, 16), generator=gen)
    summary = sk.sparsify_(model, "2:4,method=sparsegpt", calibration=lambda m: m(ids))
    assert len(summary.swapped) == CONV1DS
    with torch.no_grad():
        got = model(ids).logits
    save_model(model, str(tmp_path / "gpt2.safetensors"))
    fresh = tiny_gpt2(1)
    sk.sparsify_(fresh, "2:4")
    load_model(fresh, str(tmp_path / "gpt2.safetensors"))
    with torch.no_grad():
        torch.testing.assert_close(fresh(ids).logits, got, rtol=0, atol=0)
    wanda = tiny_gpt2(0)
    sk.sparsify_(wanda, "2:4", calibration=lambda m: m(ids), sequential=True)
    layer = wanda.transformer.h[1].mlp.c_proj  # (in 128: the twin's weight read as (out, in))
    assert isinstance(layer, SparseLinear) and layer.in_features == 128


def test_a_failed_calibration_puts_the_conv1ds_back(gen):
    model = tiny_gpt2(0)
    before = {name: p.clone() for name, p in model.named_parameters()}
    ids = torch.randint(0, 64, (2, 8), generator=gen)

    def failing(m):
        m(ids)
        raise RuntimeError("the calibration data ran out")

    with pytest.raises(RuntimeError, match="ran out"):
        sk.sparsify_(model, "2:4", calibration=failing)
    assert sum(isinstance(m, Conv1D) for m in model.modules()) == CONV1DS
    after = dict(model.named_parameters())
    assert after.keys() == before.keys()
    assert all(torch.equal(after[name], p) for name, p in before.items())


def test_a_failed_swap_puts_the_remaining_conv1ds_back(monkeypatch):
    """A swap failing part-way left the layers after it as linear twins (the same outputs,
    but a state_dict with their weights transposed). Those are Conv1Ds again."""
    model = tiny_gpt2(0)
    real, calls = SparseLinear.from_dense, []

    def failing_third(linear, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("out of memory, say")
        return real(linear, *args, **kwargs)

    monkeypatch.setattr(SparseLinear, "from_dense", failing_third)
    with pytest.raises(RuntimeError, match="out of memory"):
        sk.sparsify_(model, "2:4")
    assert sum(isinstance(m, SparseLinear) for m in model.modules()) == 2
    assert sum(isinstance(m, Conv1D) for m in model.modules()) == CONV1DS - 2
    assert not any(type(m) is torch.nn.Linear for m in model.transformer.modules())
