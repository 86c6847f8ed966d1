"""NumPy scalars (a count or a sparsity read from an array) are taken wherever a Python number
is, as that number: the same results, and Python ints and floats in what is stored. Bools and
non-integral values where an int is needed are refused as before."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import sparsekernels as sk
from _helpers import randn, random_csr
from sparsekernels.models.llama import LlamaConfig, LlamaStack
from sparsekernels.models.sparse_transformer import TransformerConfig
from sparsekernels.prune import (
    SparsityConfig,
    magnitude_mask,
    nm_mask,
    sparsegpt_prune,
    topk_mask,
    wanda_mask,
)

# (values every NumPy type holds exactly, so the Python number and the scalar are one value)
INTS = [np.int64, np.int32, np.uint8]
FLOATS = [np.float32, np.float64]
BOOLS = [True, np.bool_(True)]


def exactly(value, kind) -> bool:
    """value is the Python `kind` itself (not a NumPy scalar, nor np.float64, a float subclass)."""
    return type(value) is kind


# --------------------------------------------------------------------------- pruning
@pytest.mark.parametrize("to", FLOATS)
def test_sparsity_config_stores_python_numbers(to):
    config = SparsityConfig(sparsity=to(0.75))
    assert config == SparsityConfig(sparsity=0.75) and exactly(config.sparsity, float)
    assert repr(config) == repr(SparsityConfig(sparsity=0.75)) and config.label == "75%"
    assert SparsityConfig.coerce(to(0.75)) == config
    assert exactly(SparsityConfig.coerce(to(0.75)).sparsity, float)


@pytest.mark.parametrize("to", INTS)
def test_nm_config_stores_python_ints(to):
    config = SparsityConfig(n=to(2), m=to(8), vector=to(4), block=to(2))
    assert config == SparsityConfig(n=2, m=8, vector=4, block=2)
    assert all(exactly(getattr(config, k), int) for k in ("n", "m", "vector", "block"))
    assert config.label == "2:8,v=4,b=2"


@pytest.mark.parametrize("to", FLOATS)
def test_magnitude_and_topk_masks_take_a_numpy_sparsity(to, gen):
    w = randn(6, 8, gen=gen)
    for per_row in (False, True):
        want = magnitude_mask(w, 0.75, per_row=per_row)
        assert torch.equal(magnitude_mask(w, to(0.75), per_row=per_row), want)
        assert torch.equal(topk_mask(w.abs(), to(0.75), per_row=per_row), want)


@pytest.mark.parametrize("to", INTS)
def test_nm_mask_and_matrix_take_numpy_ints(to, gen):
    w = randn(6, 16, gen=gen)
    want = nm_mask(w, 2, 8, vector=2, block=2)
    assert torch.equal(nm_mask(w, to(2), to(8), vector=to(2), block=to(2)), want)
    W = sk.NMMatrix.from_dense(w * want, n=to(2), m=to(8), vector=to(2), block=to(2))
    assert all(exactly(getattr(W, k), int) for k in ("n", "m", "vector", "block"))
    assert torch.equal(W.to_dense(), w * want)
    assert torch.equal(W.packed_indices(to(4)), W.packed_indices(4))


def test_wanda_and_sparsegpt_take_numpy_scalars(gen):
    w, x = randn(4, 16, gen=gen), randn(64, 16, gen=gen)
    norm, hessian = x.norm(dim=0), x.T @ x
    assert torch.equal(wanda_mask(w, norm, np.float32(0.5)), wanda_mask(w, norm, 0.5))
    assert torch.equal(
        wanda_mask(w, norm, n=np.int64(2), m=np.int64(4)), wanda_mask(w, norm, n=2, m=4)
    )
    for pattern in ({"sparsity": 0.5}, {"n": 2, "m": 4}):
        want = sparsegpt_prune(w, hessian, **pattern, blocksize=8, damp=0.01)
        given = {k: (np.float32 if k == "sparsity" else np.int64)(v) for k, v in pattern.items()}
        got = sparsegpt_prune(w, hessian, **given, blocksize=np.int64(8), damp=np.float64(0.01))
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_sparsify_and_distill_take_numpy_scalars():
    torch.manual_seed(0)
    teacher = torch.nn.Sequential(torch.nn.Linear(16, 8)).double()
    student, plain = copy.deepcopy(teacher), copy.deepcopy(teacher)
    summary = sk.sparsify_(student, np.float32(0.75))
    sk.sparsify_(plain, 0.75)
    assert exactly(summary.config.sparsity, float)
    assert torch.equal(student[0].weight.to_dense(), plain[0].weight.to_dense())
    batches = [{"input": torch.randn(8, 16, dtype=torch.float64)}]
    losses = sk.prune.distill_(student, teacher, batches, epochs=np.int64(2), lr=np.float32(1e-3))
    assert len(losses) == 2


# --------------------------------------------------------------------------- ops and layers
@pytest.mark.parametrize("to", INTS)
def test_depthwise_stride(to, gen):
    x, weight = randn(2, 4, 7, 7, gen=gen), randn(4, 1, 3, 3, gen=gen)
    want = sk.ops.depthwise_conv2d(x, weight, stride=2, backend="reference")
    got = sk.ops.depthwise_conv2d(x, weight, stride=to(2), backend="reference")
    assert torch.equal(got, want)
    layer = sk.nn.DepthwiseConv2d(to(4), stride=to(2), dtype=torch.float64)
    assert exactly(layer.stride, int) and exactly(layer.channels, int)
    assert layer.weight.shape == (4, 1, 3, 3) and layer(x).shape == want.shape


@pytest.mark.parametrize("to", FLOATS)
def test_softmax_and_attention_scale(to, gen):
    S = random_csr(8, 8, 0.5, gen)
    want = sk.sparse_softmax(S, 0.5).values
    assert torch.equal(sk.sparse_softmax(S, to(0.5)).values, want)
    attn = sk.nn.SparseAttention.local_strided(
        np.int64(16), window=np.int64(4), stride=np.int64(4), scale=to(0.5)
    )
    plain = sk.nn.SparseAttention.local_strided(16, window=4, stride=4, scale=0.5)
    assert exactly(attn.scale, float) and attn.shape == plain.shape
    assert torch.equal(attn.column_indices, plain.column_indices)
    q = randn(1, 2, 16, 8, gen=gen)
    got = sk.sparse_attention(q, q, q, plain.pattern, scale=to(0.5))
    assert torch.equal(got, plain(q, q, q))


def test_load_smtx_seed(tmp_path, gen):
    path = tmp_path / "a.smtx"
    sk.save_smtx(random_csr(6, 9, 0.4, gen), path)
    want = sk.load_smtx(path, seed=3)
    assert torch.equal(sk.load_smtx(path, seed=np.int64(3)).values, want.values)


# --------------------------------------------------------------------------- models
def test_model_configs_store_python_numbers():
    cfg = LlamaConfig(
        hidden=np.int64(32), intermediate=np.int32(64), heads=np.int64(4), kv_heads=np.int64(2),
        layers=np.int64(1), rope_theta=np.float32(1e4), eps=np.float64(1e-5),
    )  # fmt: skip
    assert cfg == LlamaConfig(hidden=32, intermediate=64, heads=4, kv_heads=2, layers=1,
                              rope_theta=1e4, eps=1e-5)  # fmt: skip
    assert all(exactly(getattr(cfg, k), int) for k in ("hidden", "heads", "kv_heads", "layers"))
    assert exactly(cfg.rope_theta, float) and exactly(cfg.eps, float)
    stack = LlamaStack(cfg).double()
    stack.allocate_cache(batch=np.int64(1), max_len=np.int64(6))
    prompt = torch.randn(1, 2, 32, dtype=torch.float64)
    want = stack.generate(prompt, steps=2)
    assert torch.equal(stack.generate(prompt, steps=np.int64(2)), want)
    assert torch.equal(stack.decode(want[:, -1:], np.int64(3), np.int64(1)),
                       stack.decode(want[:, -1:], 3, 1))  # fmt: skip
    t = TransformerConfig(vocab=np.int64(11), dim=np.int64(16), heads=np.int32(2))
    assert t == TransformerConfig(vocab=11, dim=16, heads=2) and exactly(t.dim, int)


# --------------------------------------------------------------------------- still refused
@pytest.mark.parametrize("bad", [*BOOLS, np.float64(2.0), 2.0, "2"])
def test_ints_refuse_bools_and_non_integral_values(bad, gen):
    w, x = randn(4, 8, gen=gen), randn(1, 2, 5, 5, gen=gen)
    with pytest.raises(TypeError, match="n must be an int"):
        nm_mask(w, bad, 4)
    with pytest.raises(TypeError, match="stride must be an int"):
        sk.ops.depthwise_conv2d(x, randn(2, 1, 3, 3, gen=gen), stride=bad)
    with pytest.raises(TypeError, match="stride must be an int"):
        sk.nn.DepthwiseConv2d(2, stride=bad)
    with pytest.raises(TypeError, match="seed must be an int"):
        sk.load_smtx("never-read.smtx", seed=bad)
    with pytest.raises(ValueError, match="n must be an int"):  # (the config's ValueError)
        SparsityConfig(n=bad, m=4)
    with pytest.raises(ValueError, match="hidden must be a positive int"):
        LlamaConfig(hidden=bad)
    with pytest.raises(ValueError, match="window must be a positive int"):
        sk.nn.SparseAttention.local_strided(16, window=bad, stride=4)


@pytest.mark.parametrize("bad", [*BOOLS, "0.5", None, torch.tensor(0.5)])
def test_numbers_refuse_bools_strings_and_tensors(bad, gen):
    with pytest.raises(TypeError, match="scale must be a number"):
        sk.sparse_softmax(random_csr(4, 4, 0.5, gen), bad)
    with pytest.raises(ValueError, match="sparsity must be a number"):
        magnitude_mask(randn(4, 4, gen=gen), bad)
    if bad is not None:  # (None asks for N:M: refused for the missing n and m instead)
        with pytest.raises(ValueError, match="sparsity must be a number"):
            SparsityConfig(sparsity=bad)
    if not isinstance(bad, str):  # (a string is a shorthand: "0.5" parses)
        with pytest.raises(TypeError, match="config must be"):
            SparsityConfig.coerce(bad)
