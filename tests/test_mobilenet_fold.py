"""MobileNet's pieces under torch.autocast (the depthwise op casts as conv2d does, so the sparse
model runs where the dense one does) and fold_ (all or nothing; replacements keep the mode)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import sparsekernels as sk
from _helpers import assert_close, randn
from sparsekernels.models.mobilenet import MobileNetV1, calibrate_, fold_, mobilenet_pair
from sparsekernels.nn import DepthwiseConv2d
from sparsekernels.ops.depthwise import depthwise_conv2d

BF16 = torch.bfloat16


@pytest.mark.parametrize("backend", ["reference", "torch", "triton"])
def test_depthwise_under_autocast_runs_in_its_dtype(backend, gen, monkeypatch):
    """float32 operands under CPU autocast: computed in bf16, as F.conv2d is there."""
    if backend == "triton":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    x = randn(2, 5, 7, 6, gen=gen, dtype=torch.float32)
    w, b = randn(5, 1, 3, 3, gen=gen, dtype=torch.float32), randn(5, gen=gen, dtype=torch.float32)
    with torch.autocast("cpu", dtype=BF16):
        got = depthwise_conv2d(x, w, b, stride=2, activation="relu", backend=backend)
        like = F.conv2d(x, w, b, 2, 1, 1, 5)
    assert got.dtype == like.dtype == BF16
    xs, ws, bs = (t.to(BF16).double() for t in (x, w, b))
    want = F.conv2d(xs, ws, bs, 2, 1, 1, 5).relu()
    bound = F.conv2d(xs.abs(), ws.abs(), bs.abs(), 2, 1, 1, 5)
    assert_close(got, want, bound, BF16)


def test_sparse_mobilenet_under_autocast():
    """The sparse model's stem and pointwise layers gave bf16 to a float32 depthwise layer,
    which refused it; now both models run and agree."""
    sparse, dense = mobilenet_pair(0.25, 0.5, resolution=16, calibration_batch=2)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad(), torch.autocast("cpu", dtype=BF16):
        got, want = sparse(x), dense(x)
    with torch.no_grad():
        exact = sparse(x)
    assert got.dtype == want.dtype == BF16
    scale = exact.abs().max()
    assert (got.float() - exact).abs().max() <= 0.05 * scale


def _pruned_mobilenet(pattern: str) -> MobileNetV1:
    torch.manual_seed(0)
    model = MobileNetV1(0.25)
    sk.sparsify_(model, pattern, filter_fn=lambda m, name: isinstance(m, nn.Conv2d))
    calibrate_(model, torch.randn(2, 3, 16, 16))
    return model


def test_fold_refuses_n_m_before_changing_anything():
    model = _pruned_mobilenet("2:4")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    kinds = [type(m).__name__ for m in model.modules()]
    with pytest.raises(ValueError, match="N:M SparseConv2d.*nothing was folded"):
        fold_(model, depthwise=True)
    assert [type(m).__name__ for m in model.modules()] == kinds
    after = model.state_dict()
    assert after.keys() == before.keys()
    assert all(torch.equal(after[k], v) for k, v in before.items())


@pytest.mark.parametrize("training", [False, True])
def test_fold_replacements_keep_the_model_mode(training):
    model = _pruned_mobilenet("70%").train(training)
    fold_(model, depthwise=True)
    assert any(isinstance(m, DepthwiseConv2d) for m in model.modules())
    assert all(m.training == training for m in model.modules())


def test_depthwise_layer_stride_must_be_an_int():
    with pytest.raises(TypeError, match="stride must be an int, got float"):
        DepthwiseConv2d(4, stride=2.0)
