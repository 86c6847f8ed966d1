"""SparseLinear's state: state_dict round trips and what a load refuses, safetensors,
torch.compile of the layers, and the caches a training step leaves beside a weight."""

import copy

import pytest
import torch
from safetensors.torch import load_model, save_model
from torch import nn

import sparsekernels as sk
from sparsekernels.nn import SparseAttention, SparseLinear
from test_nn import PATTERNS, _linear


@pytest.mark.parametrize("name", ["csr-70%", "2:8-v4"])
def test_state_dict_round_trip(name, gen):
    kwargs, _ = PATTERNS[name]
    layer = SparseLinear.from_dense(_linear(gen), **kwargs)
    state = layer.state_dict()
    expected = {"values", "bias", "_extra_state"} | (
        {"row_offsets", "column_indices"} if "csr" in name else {"indices"}
    )
    assert set(state) == expected
    other = SparseLinear.from_dense(_linear(gen), **kwargs)  # another weight, another pattern
    x = torch.randn(3, 32, generator=gen, dtype=torch.float64)
    other(x)  # builds and caches the old pattern
    other.load_state_dict(state)
    torch.testing.assert_close(other(x), layer(x), rtol=0, atol=0)
    assert torch.equal(other.to_dense(), layer.to_dense())


def test_csr_state_dict_with_another_nnz(gen):
    layer = SparseLinear.from_dense(_linear(gen), 0.9)
    other = SparseLinear.from_dense(_linear(gen), 0.5)
    values = other.values
    other.load_state_dict(layer.state_dict())
    assert other.values is values and other.values.numel() == layer.values.numel()
    x = torch.randn(3, 32, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(other(x), layer(x), rtol=0, atol=0)


def test_an_int32_checkpoint_loads_into_one_int16_copy(gen):
    """A state dict saved with int32 column indices (before they were stored as int16) loads
    into the layer's int16 buffer; with assign=True the layer takes the int32 tensors, then
    keeps only the format's int16 copy once its weight is built (not both)."""
    layer = SparseLinear.from_dense(_linear(gen), 0.7)
    attention = SparseAttention.local_strided(16, window=4, stride=5)
    x = torch.randn(3, 32, generator=gen, dtype=torch.float64)
    for module in (layer, attention):
        old = {k: v.int() if k == "column_indices" else v for k, v in module.state_dict().items()}
        for assign in (False, True):
            fresh = (SparseLinear.from_dense(_linear(gen), 0.7) if module is layer else
                     SparseAttention.local_strided(16, window=4, stride=5))  # fmt: skip
            fresh.load_state_dict(old, assign=assign)
            built = fresh.weight if module is layer else fresh.pattern
            assert fresh.column_indices.dtype == torch.int16
            assert fresh.column_indices is built.column_indices
            assert fresh.row_offsets is built.row_offsets
            if module is layer:
                torch.testing.assert_close(fresh(x), layer(x), rtol=0, atol=0)
            else:
                assert torch.equal(built.column_indices, attention.pattern.column_indices)


def test_load_rejects_a_broken_pattern(gen):
    layer = SparseLinear.from_dense(_linear(gen), 0.5)
    state = layer.state_dict()
    state["column_indices"] = state["column_indices"].flip(0)
    with pytest.raises(RuntimeError, match="column_indices must be strictly increasing"):
        layer.load_state_dict(state)  # named at load
    with pytest.raises(ValueError, match="column_indices"):
        layer(torch.randn(2, 32, dtype=torch.float64))  # and again at use
    nm = SparseLinear.from_dense(_linear(gen), pattern="2:8")
    with pytest.raises(RuntimeError, match="a 4:8 12 x 32 checkpoint cannot load into a 2:8"):
        nm.load_state_dict(SparseLinear.from_dense(_linear(gen), pattern="4:8").state_dict())


def test_load_rejects_another_layout_and_keeps_the_layer(gen):
    """Tensors that fit are not enough: a 2:8 checkpoint's tensors have 4:16's shapes, and a
    CSR one of fewer columns fits a wider layer. A failed load leaves the layer as it was."""
    x = torch.randn(3, 32, generator=gen, dtype=torch.float64)
    cases = [
        (dict(pattern="4:16"), _linear(gen), dict(pattern="2:8"), "a 2:8 12 x 32 checkpoint"),
        (dict(sparsity=0.5), _linear(gen), dict(sparsity=0.5, pattern=None), "CSR 12 x 16"),
        (dict(sparsity=0.5), _linear(gen), dict(sparsity=0.9, pattern=None), "CSR 7 x 32"),
    ]
    for mine, dense, theirs, message in cases:
        layer = SparseLinear.from_dense(dense, **mine)
        before = layer(x)
        shape = {"CSR 12 x 16": (16, 12), "CSR 7 x 32": (32, 7)}.get(message, (32, 12))
        other = SparseLinear.from_dense(_linear(gen, *shape), **theirs)
        assert other.values.shape != layer.values.shape or "2:8" in message
        with pytest.raises(RuntimeError, match=message):
            layer.load_state_dict(other.state_dict())
        torch.testing.assert_close(layer(x), before, rtol=0, atol=0)


@pytest.mark.parametrize("kwargs", [{"sparsity": 0.7}, {"pattern": "2:8"}])
def test_layers_compile_with_fullgraph(kwargs, gen):
    """torch.compile(fullgraph=True) traces a layer straight after construction, a load or a
    move (the format is built then, not at the first call), forward and backward."""
    layer = SparseLinear.from_dense(_linear(gen), **kwargs)
    loaded = SparseLinear.from_dense(_linear(gen), **kwargs)
    loaded.load_state_dict(layer.state_dict())
    x = torch.randn(3, 32, generator=gen, dtype=torch.float64, requires_grad=True)
    want = layer(x)
    want.sum().backward()
    grads = (x.grad.clone(), layer.values.grad.clone())
    moved = copy.deepcopy(layer).to(torch.float32)  # (a move rebuilds the format)
    for module in (layer, loaded, moved):
        torch._dynamo.reset()
        module.zero_grad()
        xm = x.detach().to(module.values.dtype).requires_grad_()
        got = torch.compile(module, backend="aot_eager", fullgraph=True)(xm)
        torch.testing.assert_close(got, want.to(got.dtype))
        got.sum().backward()
        torch.testing.assert_close(
            (xm.grad, module.values.grad), tuple(g.to(got.dtype) for g in grads)
        )
    attention = SparseAttention.local_strided(16, window=4, stride=5)
    q = torch.randn(1, 2, 16, 8, generator=gen, dtype=torch.float64)
    torch._dynamo.reset()
    compiled = torch.compile(attention, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(q, q, q), attention(q, q, q))


def test_release_caches_after_training(gen):
    """A training step leaves the transposed pattern and kept positions beside a CSR weight;
    release_caches drops them (and distill_ does it when done), the results unchanged."""
    from sparsekernels.bench.held import held_bytes

    model = nn.Sequential(_linear(gen, 32, 48), nn.GELU(), _linear(gen, 48, 16))
    sk.sparsify_(model, "50%")
    x = torch.randn(20, 32, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        want = model(x)
    inference = held_bytes(model)
    model(x).sum().backward()
    stored = sum(layer.values.numel() for layer in model if isinstance(layer, SparseLinear))
    assert held_bytes(model) > inference + 4 * stored  # (the transposes' int32 permutations)
    sk.nn.release_caches(model)
    with torch.no_grad():
        torch.testing.assert_close(model(x), want, rtol=0, atol=0)
    assert held_bytes(model) == inference
    teacher = nn.Sequential(_linear(gen, 32, 48), nn.GELU(), _linear(gen, 48, 16))
    sk.prune.distill_(model, teacher, [{"input": x}], epochs=1, lr=1e-9)
    with torch.no_grad():
        model(x)
    assert held_bytes(model) == inference
    attention = SparseAttention.local_strided(16, window=4, stride=5)
    q = torch.randn(1, 2, 16, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    attention(q, q, q).sum().backward()
    before = held_bytes(attention)
    sk.nn.release_caches(attention)
    assert held_bytes(attention) < before
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        sk.nn.release_caches("model")


def test_checkpoints_without_the_layout_still_load(gen):
    """State dicts written before `_extra_state` existed load (strict) as before."""
    for kwargs in (dict(sparsity=0.7), dict(pattern="2:8")):
        layer = SparseLinear.from_dense(_linear(gen), **kwargs)
        old = {k: v for k, v in layer.state_dict().items() if k != "_extra_state"}
        fresh = SparseLinear.from_dense(_linear(gen), **kwargs)
        fresh.load_state_dict(old)
        x = torch.randn(3, 32, generator=gen, dtype=torch.float64)
        torch.testing.assert_close(fresh(x), layer(x), rtol=0, atol=0)
    csr = SparseLinear.from_dense(_linear(gen), 0.7)
    before = csr(x)
    taller = SparseLinear.from_dense(_linear(gen, 32, 20), 0.5).state_dict()
    del taller["_extra_state"]
    with pytest.raises(RuntimeError, match="size mismatch for row_offsets"):
        csr.load_state_dict(taller)
    torch.testing.assert_close(csr(x), before, rtol=0, atol=0)  # (not resized half-way)


def test_safetensors_save_and_load_a_model(tmp_path, gen):
    def build(seed):
        g = torch.Generator().manual_seed(seed)
        model = nn.Sequential(
            _linear(g, 32, 16, dtype=torch.float32),
            nn.ReLU(),
            _linear(g, 16, 8, dtype=torch.float32),
        )
        model[0] = SparseLinear.from_dense(model[0], 0.8)
        model[2] = SparseLinear.from_dense(model[2], pattern="2:4")
        return model

    model = build(0)
    save_model(model, str(tmp_path / "m.safetensors"))
    fresh = build(1)
    load_model(fresh, str(tmp_path / "m.safetensors"))
    x = torch.randn(4, 32, generator=gen)
    torch.testing.assert_close(fresh(x), model(x), rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("kwargs", [{"sparsity": 0.7}, {"pattern": "2:8"}, {"pattern": "2:4"}])
@pytest.mark.parametrize("tokens", [1, 16, 600])
def test_layers_compile_with_fullgraph_on_cuda(kwargs, tokens, gen):
    """Inductor on the GPU routes (decode walks, tensor cores, cuSPARSELt at 2:4) through a
    layer built, then compiled straight away."""
    dense = nn.Linear(512, 304, device="cuda", dtype=torch.bfloat16)
    layer = SparseLinear.from_dense(dense, **kwargs)
    x = torch.randn(tokens, 512, generator=gen, dtype=torch.bfloat16).cuda()
    want = x.double() @ layer.to_dense().double().t() + layer.bias.double()
    bound = x.double().abs() @ layer.to_dense().double().abs().t() + layer.bias.double().abs()
    torch._dynamo.reset()
    got = torch.compile(layer, fullgraph=True)(x)
    assert ((got.double() - want).abs() <= 2e-2 * bound + 1e-3).all()


def test_caches_follow_fused_steps_data_swaps_and_moves(gen):
    """What the ops keep per values version (here autocast's cast copy) is renewed after a
    fused optimizer's step (which bumps no version: the layer's hook does), a `.data` swap
    (vector_to_parameters) and a move, which also drops what training left (bench/held.py)."""
    from sparsekernels.bench.held import held_bytes

    bf16 = torch.bfloat16
    dense = _linear(gen, dtype=torch.float32)
    layer = SparseLinear.from_dense(dense, 0.5)
    x = torch.randn(5, 32, generator=gen)

    def fresh():  # the product from the values as they are now, cast here
        W = layer.weight.with_values(layer.values.detach().to(bf16))
        return sk.linear(x.to(bf16), W, layer.bias.detach().to(bf16))

    def autocast_eval():
        with torch.no_grad(), torch.autocast("cpu", dtype=bf16):
            return layer(x)

    autocast_eval()  # the cast copy, kept
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.5, fused=True)
    layer(x).sum().backward()
    optimizer.step()
    torch.testing.assert_close(autocast_eval(), fresh(), rtol=0, atol=0)
    vector = torch.nn.utils.parameters_to_vector(layer.parameters())
    torch.nn.utils.vector_to_parameters(vector * 2, layer.parameters())
    torch.testing.assert_close(autocast_eval(), fresh(), rtol=0, atol=0)
    twin = SparseLinear.from_dense(dense, 0.5)  # what inference alone holds
    with torch.no_grad():
        twin(x)
    inference = held_bytes(twin)
    layer(x.clone().requires_grad_()).sum().backward()  # dX's transposed pattern, kept
    autocast_eval()  # and a cast copy
    assert held_bytes(layer) > inference
    layer.to(torch.float32)  # (a move of nothing still rebuilds the format, drops the rest)
    with torch.no_grad():
        layer(x)
    assert held_bytes(layer) == inference


@pytest.mark.parametrize("kind", ["csr", "nm"])
def test_a_users_own_weight_follows_fused_steps(kind, gen):
    """A CSRMatrix / NMMatrix of the user's parameters, no layer: autocast's kept cast copy
    went stale after a fused optimizer's step (no version bump, nothing tracked them), so an
    evaluation between steps ran the first evaluation's weights. The ops track them now."""
    bf16 = torch.bfloat16
    dense = torch.randn(16, 32, generator=gen)
    if kind == "csr":
        W0 = sk.CSRMatrix.from_dense(dense * (torch.rand(16, 32, generator=gen) < 0.4))
    else:
        W0 = sk.NMMatrix.from_dense(dense * sk.prune.nm_mask(dense, 2, 8), 2, 8)
    values = torch.nn.Parameter(W0.values.clone())
    W = W0.with_values(values)
    optimizer = torch.optim.Adam([values], lr=0.5, fused=True)
    x = torch.randn(4, 32, generator=gen)

    def autocast_eval():
        with torch.no_grad(), torch.autocast("cpu", dtype=bf16):
            return sk.linear(x, W)

    def fresh():
        return sk.linear(x.to(bf16), W.with_values(values.detach().to(bf16)))

    torch.testing.assert_close(autocast_eval(), fresh(), rtol=0, atol=0)  # (the copy, kept)
    sk.linear(x, W).square().sum().backward()
    optimizer.step()
    torch.testing.assert_close(autocast_eval(), fresh(), rtol=0, atol=0)


def test_a_layer_pickles_after_cusparselt_packed_its_weight(monkeypatch, tmp_path):
    """torch.save(layer) raised "cannot pickle 'weakref'" once cuSPARSELt's packed weight was
    kept beside the N:M matrix (every GPU forward through that backend). It is kept by the
    values' identity now (ops/_cusparselt.py), out of the pickle, and remade."""
    from sparsekernels.ops import _cusparselt

    monkeypatch.setattr(torch, "_cslt_compress", lambda dense: dense.clone())  # (CUDA-only)
    layer = SparseLinear.from_dense(nn.Linear(64, 32).half(), pattern="2:4")
    W = layer.weight
    _cusparselt._packed(W.values, W.indices, W.shape[1])  # (what a GPU forward does)
    torch.save(layer, tmp_path / "layer.pt")
    back = torch.load(tmp_path / "layer.pt", weights_only=False)
    x = torch.randn(3, 64).half()
    torch.testing.assert_close(back(x), layer(x), rtol=0, atol=0)
    assert _cusparselt._PACKED.get(layer.values) is not None
    assert _cusparselt._PACKED.get(back.values) is None
