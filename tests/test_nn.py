"""SparseLinear and SparseConv2d: forward and backward against the masked dense layer,
dtype and device moves, and training with a fixed mask (state and loads: test_nn_state.py)."""

import pytest
import torch
from safetensors.torch import load_model, save_model
from torch import nn

import sparsekernels as sk
from sparsekernels.nn import SparseAttention, SparseConv2d, SparseLinear

# (from_dense keyword arguments, expected format)
PATTERNS = {
    "csr-70%": ({"sparsity": 0.7}, "csr"),
    "2:4": ({"pattern": "2:4"}, "nm"),
    "2:8": ({"pattern": "2:8"}, "nm"),
    "2:8-v4": ({"pattern": "2:8", "vector": 4}, "nm"),
    "4:8-v4-b2": ({"pattern": "4:8,v=4,b=2"}, "nm"),
    "2:8-as-csr": ({"pattern": "2:8", "format": "csr"}, "csr"),
}


def _linear(gen, in_features=32, out_features=12, bias=True, dtype=torch.float64):
    layer = nn.Linear(in_features, out_features, bias=bias, dtype=dtype)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen, dtype=dtype))
        if bias:
            layer.bias.copy_(torch.randn(out_features, generator=gen, dtype=dtype))
    return layer


def _mask(kwargs, weight):
    config = sk.prune.config.resolve(
        kwargs.get("sparsity"), kwargs.get("pattern"), kwargs.get("vector"), None, None
    )
    return config.mask(weight)


@pytest.mark.parametrize("name", list(PATTERNS))
@pytest.mark.parametrize("bias", [True, False])
def test_linear_forward_matches_masked_dense(name, bias, gen):
    kwargs, fmt = PATTERNS[name]
    dense = _linear(gen, bias=bias)
    layer = SparseLinear.from_dense(dense, **kwargs)
    assert layer.format == fmt
    masked = dense.weight.detach() * _mask(kwargs, dense.weight.detach())
    torch.testing.assert_close(layer.to_dense(), masked, rtol=0, atol=0)
    for shape in [(5, 32), (2, 3, 32), (32,)]:
        x = torch.randn(*shape, generator=gen, dtype=torch.float64)
        want = torch.nn.functional.linear(x, masked, dense.bias)
        torch.testing.assert_close(layer(x), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(layer.to_linear()(x), want)


@pytest.mark.parametrize("name", list(PATTERNS))
def test_linear_backward_only_kept_values(name, gen):
    kwargs, _ = PATTERNS[name]
    dense = _linear(gen)
    layer = SparseLinear.from_dense(dense, **kwargs)
    mask = _mask(kwargs, dense.weight.detach())
    x = torch.randn(4, 3, 32, generator=gen, dtype=torch.float64, requires_grad=True)
    layer(x).square().sum().backward()
    w = (dense.weight.detach() * mask).requires_grad_()
    b = dense.bias.detach().clone().requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    torch.nn.functional.linear(x2, w, b).square().sum().backward()
    grad_dense = layer.weight.with_values(layer.values.grad).to_dense()
    torch.testing.assert_close(grad_dense, w.grad * mask)
    torch.testing.assert_close(layer.bias.grad, b.grad)
    torch.testing.assert_close(x.grad, x2.grad)
    assert list(n for n, _ in layer.named_parameters()) == ["values", "bias"]


def test_from_dense_arguments(gen):
    dense = _linear(gen)
    with pytest.raises(ValueError, match="exactly one"):
        SparseLinear.from_dense(dense)
    with pytest.raises(ValueError, match="exactly one"):
        SparseLinear.from_dense(dense, 0.5, pattern="2:8")
    with pytest.raises(ValueError, match="N:M"):
        SparseLinear.from_dense(dense, pattern="50%")
    with pytest.raises(ValueError, match="vector and block"):
        SparseLinear.from_dense(dense, 0.5, vector=4)
    with pytest.raises(ValueError, match="stored as CSR"):
        SparseLinear.from_dense(dense, 0.5, format="nm")
    with pytest.raises(ValueError, match="multiple of m"):
        SparseLinear.from_dense(_linear(gen, in_features=30), pattern="2:8")
    with pytest.raises(TypeError, match="nn.Linear"):
        SparseLinear.from_dense(nn.Conv2d(4, 4, 1), 0.5)
    assert SparseLinear.from_dense(dense, "90%").values.numel() == round(0.1 * 12 * 32)
    config = sk.SparsityConfig(n=2, m=4)
    assert SparseLinear.from_dense(dense, pattern=config).pattern_name == "2:4"
    mask = torch.rand(12, 32, generator=gen) < 0.3
    layer = SparseLinear.from_dense(dense, mask=mask)
    assert torch.equal(layer.to_dense() != 0, mask & (dense.weight != 0))


@pytest.mark.parametrize("layer", [SparseLinear, SparseConv2d])
def test_a_bias_that_is_not_a_float_tensor_is_named(layer, gen):
    weight = sk.CSRMatrix.from_dense(torch.randn(6, 8, generator=gen))
    complex_bias = torch.zeros(6, dtype=torch.complex64)
    for bias, error in (([0.0] * 6, "got list"), (1.0, "got float"), (complex_bias, "complex64")):
        with pytest.raises(TypeError, match=f"bias must be .*{error}"):
            layer(weight, bias)


def test_a_mask_must_agree_with_sparsity_or_pattern(gen):
    dense = _linear(gen)
    half = torch.rand(12, 32, generator=gen) < 0.5
    with pytest.raises(ValueError, match="not the 90.0% that sparsity= asks for"):
        SparseLinear.from_dense(dense, 0.9, mask=half)
    wrong = torch.zeros(12, 32, dtype=torch.bool)
    wrong[:, :3] = True  # three of the first group of eight
    for fmt in (None, "csr"):
        with pytest.raises(ValueError, match="breaks the 2:8 pattern"):
            SparseLinear.from_dense(dense, pattern="2:8", format=fmt, mask=wrong)
    with pytest.raises(ValueError, match=r"mask must have the weight's shape \(12, 32\)"):
        SparseLinear.from_dense(dense, 0.5, mask=half.t())
    layer = SparseLinear.from_dense(dense, 0.5, mask=half)  # what it asks for, near enough
    assert torch.equal(layer.to_dense() != 0, half & (dense.weight != 0))


def test_repr_and_sizes(gen):
    layer = SparseLinear.from_dense(_linear(gen, dtype=torch.float32), pattern="2:8", vector=4)
    text = repr(layer)
    assert "in_features=32, out_features=12" in text and "pattern=2:8,v=4" in text
    assert layer.dense_nbytes == 12 * 32 * 4
    assert layer.nbytes == layer.weight.nbytes < layer.dense_nbytes / 3
    assert layer.density == 0.25
    csr = SparseLinear.from_dense(_linear(gen), 0.75)
    assert "format=csr, pattern=75.0%" in repr(csr)


def test_a_frozen_bias_stays_frozen(gen):
    model = nn.Sequential(_linear(gen), nn.ReLU(), _linear(gen, 12, 4))
    model[0].requires_grad_(False)
    sk.sparsify_(model, "2:4")
    frozen = {n: p.requires_grad for n, p in model.named_parameters()}
    assert frozen == {"0.values": False, "0.bias": False, "2.values": True, "2.bias": True}
    conv = _conv(gen).requires_grad_(False)
    layer = SparseConv2d.from_dense(conv, 0.5)
    assert not layer.values.requires_grad and not layer.bias.requires_grad


@pytest.mark.parametrize("name", ["csr-70%", "2:8"])
def test_dtype_moves(name, gen):
    kwargs, _ = PATTERNS[name]
    layer = SparseLinear.from_dense(_linear(gen), **kwargs)
    index_buffers = {n: b for n, b in layer.named_buffers()}
    x = torch.randn(3, 32, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        want = layer(x)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        moved = layer.to(dtype)
        assert moved is layer and layer.values.dtype == dtype and layer.bias.dtype == dtype
        assert layer.weight.dtype == dtype
        with torch.no_grad():
            got = layer(x.to(dtype))
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), want, rtol=0.05, atol=0.05 * want.abs().max())
    layer.double()
    for n, b in layer.named_buffers():  # the indices are never cast
        assert b.dtype == index_buffers[n].dtype
    model = nn.Sequential(layer).half()
    assert model[0].values.dtype == torch.float16
    assert model[0](x.half()).dtype == torch.float16


@pytest.mark.parametrize("name", ["csr-70%", "2:8"])
def test_the_weight_is_kept_until_something_changes(name, gen):
    """A repeat `weight` is the same matrix (no rebuild a call) while the values Parameter and
    the index buffers stay as they were; an in-place change to the values shows through it;
    a new Parameter or an index buffer changed in place gives a new matrix."""
    kwargs, _ = PATTERNS[name]
    layer = SparseLinear.from_dense(_linear(gen), **kwargs)
    W = layer.weight
    assert layer.weight is W and W.values is layer.values
    x = torch.randn(3, 32, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        layer.values.mul_(2)
        assert layer.weight is W
        torch.testing.assert_close(layer(x), x @ layer.to_dense().t() + layer.bias)
        layer.values = nn.Parameter(layer.values * 3)
    assert layer.weight is not W and layer.weight.values is layer.values
    W = layer.weight
    next(iter(layer.buffers())).add_(0)  # the same indices, a new version
    assert layer.weight is not W


def test_training_keeps_the_mask(gen):
    dense = _linear(gen)
    layer = SparseLinear.from_dense(dense, pattern="2:8")
    mask = layer.to_dense() != 0
    reference = nn.Linear(32, 12, dtype=torch.float64)
    with torch.no_grad():
        reference.weight.copy_(layer.to_dense())
        reference.bias.copy_(layer.bias)
    opt = torch.optim.SGD(layer.parameters(), lr=0.05, momentum=0.9)
    opt_ref = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(16, 32, generator=gen, dtype=torch.float64)
    target = torch.randn(16, 12, generator=gen, dtype=torch.float64)
    losses = []
    for _ in range(5):
        for model, optimizer in ((layer, opt), (reference, opt_ref)):
            optimizer.zero_grad()
            loss = (model(x) - target).square().mean()
            loss.backward()
            if model is reference:  # masked dense training: only kept weights move
                reference.weight.grad *= mask
            else:
                losses.append(loss.item())
            optimizer.step()
    assert losses[-1] < losses[0]
    assert torch.equal(layer.to_dense() != 0, mask)
    torch.testing.assert_close(layer.to_dense(), reference.weight.detach())


# ----------------------------------------------------------------------------- SparseConv2d
def _conv(gen, cin=32, cout=12, bias=True, dtype=torch.float64, **kw):
    conv = nn.Conv2d(cin, cout, 1, bias=bias, dtype=dtype, **kw)
    with torch.no_grad():
        conv.weight.copy_(torch.randn(conv.weight.shape, generator=gen, dtype=dtype))
        if bias:
            conv.bias.copy_(torch.randn(cout, generator=gen, dtype=dtype))
    return conv


@pytest.mark.parametrize("name", ["csr-70%", "2:8", "4:8-v4-b2"])
@pytest.mark.parametrize("activation", [None, "relu"])
@pytest.mark.parametrize("batch", [1, 3])
def test_conv_forward_matches_masked_dense(name, activation, batch, gen):
    kwargs, _ = PATTERNS[name]
    conv = _conv(gen)
    layer = SparseConv2d.from_dense(conv, activation=activation, **kwargs)
    masked = (
        conv.weight.detach() * _mask(kwargs, conv.weight.detach()[:, :, 0, 0])[:, :, None, None]
    )
    assert torch.equal(layer.to_dense(), masked)
    x = torch.randn(batch, 32, 5, 6, generator=gen, dtype=torch.float64)
    want = torch.nn.functional.conv2d(x, masked, conv.bias)
    if activation == "relu":
        want = want.relu()
    torch.testing.assert_close(layer(x), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(layer(x[0]), want[0], rtol=1e-12, atol=1e-12)  # unbatched


@pytest.mark.parametrize("name", ["csr-70%", "2:8"])
def test_conv_backward(name, gen):
    kwargs, _ = PATTERNS[name]
    conv = _conv(gen)
    layer = SparseConv2d.from_dense(conv, activation="relu", **kwargs)
    x = torch.randn(2, 32, 3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    layer(x).square().sum().backward()
    w = layer.to_dense().detach().requires_grad_()
    b = conv.bias.detach().clone().requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    torch.nn.functional.conv2d(x2, w, b).relu().square().sum().backward()
    mask = layer.dense_weight() != 0
    grad = layer.weight.with_values(layer.values.grad).to_dense()
    torch.testing.assert_close(grad, w.grad[:, :, 0, 0] * mask)
    torch.testing.assert_close(layer.bias.grad, b.grad)
    torch.testing.assert_close(x.grad, x2.grad)


def test_conv_rejects_what_is_not_pointwise(gen):
    for kw in (
        {"kernel_size": 3},
        {"kernel_size": 1, "stride": 2},
        {"kernel_size": 1, "groups": 4},
        {"kernel_size": 1, "padding": 1},
    ):
        with pytest.raises(ValueError, match="1x1"):
            SparseConv2d.from_dense(nn.Conv2d(8, 8, **kw), 0.5)
    for mask in (torch.ones(32, 12), torch.ones(12 * 32), torch.ones(12, 32, 3, 3)):
        with pytest.raises(ValueError, match=r"mask must have shape \(12, 32\)"):
            SparseConv2d.from_dense(_conv(gen), mask=mask.bool())
    layer = SparseConv2d.from_dense(_conv(gen), 0.5)
    with pytest.raises(ValueError, match="32 channels"):
        layer(torch.randn(1, 16, 2, 2, dtype=torch.float64))
    for x, error, words in [
        (torch.randn(2, 32, 2, 2), TypeError, "x is torch.float32, weight is torch.float64"),
        (torch.ones(2, 32, 2, 2, dtype=torch.int64), TypeError, "x must be float16"),
        (torch.randn(2, 32, 2, 2, dtype=torch.float64, device="meta"), ValueError, "x on meta"),
    ]:  # (the layer's names: spmm would name its A and B)
        with pytest.raises(error, match=words):
            layer(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # (autocast's casts are spmm's)
        assert layer.float()(torch.randn(2, 32, 2, 2)).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="activation"):
        SparseConv2d.from_dense(_conv(gen), 0.5, activation="tanh")
    assert "in_channels=32, out_channels=12" in repr(
        SparseConv2d.from_dense(_conv(gen), 0.5, activation="relu")
    )


def test_conv_safetensors_and_half(tmp_path, gen):
    model = nn.Sequential(SparseConv2d.from_dense(_conv(gen, dtype=torch.float32), pattern="2:4"))
    save_model(model, str(tmp_path / "c.safetensors"))
    fresh = nn.Sequential(SparseConv2d.from_dense(_conv(gen, dtype=torch.float32), pattern="2:4"))
    load_model(fresh, str(tmp_path / "c.safetensors"))
    x = torch.randn(2, 32, 3, 3, generator=gen)
    torch.testing.assert_close(fresh(x), model(x), rtol=0, atol=0)
    assert fresh.half()(x.half()).dtype == torch.float16


# ----------------------------------------------------------------------------- SparseAttention
def _sdpa(q, k, v, keep, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=scale)


@pytest.mark.parametrize(
    "build, rule",
    [
        (
            lambda L: SparseAttention.local_strided(L, window=4, stride=5),
            lambda i, j: (((i - j).abs() < 4) | ((i - j) % 5 == 0)) & (j <= i),
        ),
        (
            lambda L: SparseAttention.local_strided(L, window=3, stride=4, causal=False),
            lambda i, j: ((i - j).abs() < 3) | ((i - j) % 4 == 0),
        ),
        (lambda L: SparseAttention.block(L, block=8), lambda i, j: i // 8 == j // 8),
        (
            lambda L: SparseAttention.block(L, block=6, causal=True),
            lambda i, j: (i // 6 == j // 6) & (j <= i),
        ),
    ],
)
def test_attention_patterns_match_masked_sdpa(build, rule, gen, monkeypatch):
    from sparsekernels.nn import attention

    monkeypatch.setattr(attention, "_ROWS_PER_CHUNK", 7)  # several chunks
    L = 30
    attn = build(L)
    i = torch.arange(L)
    keep = rule(i[:, None], i[None, :])
    assert torch.equal(attn.pattern.to_dense() != 0, keep)
    q, k, v = (torch.randn(2, 3, L, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(attn(q, k, v), _sdpa(q, k, v, keep))


def test_attention_user_pattern_state_and_moves(gen):
    L = 16
    keep = torch.rand(L, L, generator=gen) < 0.4
    keep |= torch.eye(L, dtype=torch.bool)
    attn = SparseAttention(keep, scale=0.3)
    same = SparseAttention(sk.CSRMatrix.from_dense(keep.double()), scale=0.3)
    q, k, v = (torch.randn(1, 2, L, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    want = _sdpa(q, k, v, keep, scale=0.3)
    torch.testing.assert_close(attn(q, k, v), want)
    torch.testing.assert_close(same(q, k, v), want)
    assert attn.pattern is attn.pattern  # built once
    assert set(attn.state_dict()) == {"row_offsets", "column_indices"}
    other = SparseAttention.block(L, 4, scale=0.3)
    other.load_state_dict(attn.state_dict())  # another nnz
    torch.testing.assert_close(other(q, k, v), want)
    attn.half()  # the pattern is integer: unchanged; q, k, v decide the dtype
    assert attn.row_offsets.dtype in (torch.int32, torch.int64)
    assert attn(q.half(), k.half(), v.half()).dtype == torch.float16
    assert "density=" in repr(attn)
    with pytest.raises(ValueError, match="window"):
        SparseAttention.local_strided(8, window=0, stride=2)
    with pytest.raises(TypeError, match="pattern"):
        SparseAttention([[1, 0], [0, 1]])


def test_attention_refused_load_leaves_the_module_as_it_was():
    """A checkpoint for another length was refused, but the module had already taken its
    column indices beside its own row offsets, and no call ran after."""
    attn = SparseAttention(torch.ones(8, 8, dtype=torch.bool).tril())
    other = SparseAttention(torch.ones(10, 10, dtype=torch.bool))
    q = torch.randn(1, 1, 8, 4)
    want = attn(q, q, q)
    with pytest.raises(RuntimeError, match="size mismatch"):
        attn.load_state_dict(other.state_dict())
    assert attn.column_indices.numel() == 36
    torch.testing.assert_close(attn(q, q, q), want, rtol=0, atol=0)


@pytest.mark.parametrize("kwargs", [{"sparsity": 0.5}, {"pattern": "2:4"}], ids=["csr", "nm"])
def test_torch_prune_on_the_values(kwargs, gen):
    """torch.nn.utils.prune replaces the values Parameter by values_orig * values_mask, set
    before each forward: the layer read the Parameter by name (KeyError)."""
    import torch.nn.utils.prune as torch_prune

    layer = SparseLinear.from_dense(_linear(gen), **kwargs)
    torch_prune.l1_unstructured(layer, "values", amount=0.25)
    x = torch.randn(3, 32, generator=gen, dtype=layer.values.dtype)
    layer(x).sum().backward()
    kept = layer.values_orig.detach() * layer.values_mask
    want = x @ layer.weight.with_values(kept).to_dense().t() + layer.bias.detach()
    torch.testing.assert_close(layer(x), want)
    assert torch.equal(layer.values_orig.grad == 0, layer.values_mask == 0)  # pruned: no grad
    torch_prune.remove(layer, "values")  # a Parameter again
    torch.testing.assert_close(layer(x), want)
