"""Weights, patterns and layers made under torch.inference_mode: inference tensors have no
version counter, so what the ops derive from them once per weight elsewhere (N:M patterns
for torch's matmul, transposed patterns, sddmm plans, a layer's format) is built for each
call instead; the products match weights made outside it."""

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, random_csr, random_nm


def _twins(make):
    """The same weight made normally and under inference_mode (same seed)."""
    normal = make(torch.Generator().manual_seed(5))
    with torch.inference_mode():
        frozen = make(torch.Generator().manual_seed(5))
    assert frozen.values.is_inference() and not normal.values.is_inference()
    return normal, frozen


@pytest.mark.parametrize(
    "make",
    [
        lambda g: random_csr(37, 50, 0.3, g, torch.float32),
        lambda g: random_nm(37, 48, 2, 8, g, dtype=torch.float32),
        lambda g: random_nm(36, 64, 1, 4, g, vector=4, dtype=torch.float32),
    ],
    ids=["csr", "nm", "nm-vector"],
)
def test_linear_and_spmm(make):
    normal, frozen = _twins(make)
    x = torch.randn(5, normal.shape[1])
    bias = torch.randn(normal.shape[0])
    want = sk.linear(x, normal, bias)
    with torch.inference_mode():
        for _ in range(2):  # a second call must not trust anything kept from the first
            torch.testing.assert_close(sk.linear(x, frozen, bias), want)
            torch.testing.assert_close(sk.spmm(frozen, x.t()), sk.spmm(normal, x.t()))
    torch.testing.assert_close(sk.linear(x, frozen, bias), want)  # and outside it


def test_sddmm_and_softmax_on_an_inference_pattern():
    normal, frozen = _twins(lambda g: random_csr(40, 30, 0.3, g, torch.float32))
    x, y = torch.randn(40, 8), torch.randn(30, 8)
    want = sk.sparse_softmax(sk.sddmm(x, y, normal), 0.5)
    with torch.inference_mode():
        for _ in range(2):
            got = sk.sparse_softmax(sk.sddmm(x, y, frozen), 0.5)
            torch.testing.assert_close(got.values, want.values)


def test_sparse_linear_made_under_inference_mode():
    dense = torch.nn.Linear(48, 20)
    normal = sk.nn.SparseLinear.from_dense(dense, pattern="2:8")
    with torch.inference_mode():
        frozen = sk.nn.SparseLinear.from_dense(dense, pattern="2:8")
        x = torch.randn(3, 48)
        for _ in range(2):
            torch.testing.assert_close(frozen(x), normal(x))


@pytest.mark.parametrize("kwargs", [{"pattern": "2:8"}, {"sparsity": 0.5}], ids=["nm", "csr"])
def test_layers_made_under_inference_mode_then_trained(kwargs):
    """As nn.Linear's: a layer made under inference_mode holds normal tensors, so calling it
    outside with a gradient (and under autocast) works; its values had been inference
    tensors, which cannot be saved for backward."""
    dense, conv = torch.nn.Linear(48, 20), torch.nn.Conv2d(48, 20, 1)
    with torch.inference_mode():
        layers = [
            sk.nn.SparseLinear.from_dense(dense, **kwargs),
            sk.nn.SparseConv2d.from_dense(conv, **kwargs),
        ]
    for layer, x in zip(layers, (torch.randn(3, 48), torch.randn(2, 48, 3, 3)), strict=True):
        assert not any(t.is_inference() for t in (*layer.parameters(), *layer.buffers()))
        layer(x).sum().backward()
        assert layer.values.grad is not None and layer.bias.grad is not None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert layer(x).dtype == torch.bfloat16


def test_sparse_attention_made_under_inference_mode():
    normal = sk.nn.SparseAttention.local_strided(24, 4, 5)
    with torch.inference_mode():
        frozen = sk.nn.SparseAttention.local_strided(24, 4, 5)
        q, k, v = (torch.randn(2, 3, 24, 8) for _ in range(3))
        for _ in range(2):
            torch.testing.assert_close(frozen(q, k, v), normal(q, k, v))


@pytest.mark.parametrize("backend", [None, "reference", "torch_sparse", "dense"])
@pytest.mark.parametrize("kwargs", [{"sparsity": 0.7}, {"pattern": "2:8", "vector": 2}])
@pytest.mark.parametrize("tokens", [3, 130])
def test_evaluate_first_then_train(kwargs, backend, tokens):
    """What a first call under inference_mode keeps (pattern caches, a layer's narrowed
    buffers, the CPU product's scratch buffer) must not be inference tensors: a later call or
    training step outside the mode would fail ("Inference tensors cannot be saved for
    backward", "Inplace update to inference tensor outside InferenceMode")."""
    g = torch.Generator().manual_seed(7)
    dense = torch.nn.Linear(48, 20, dtype=torch.float64)
    with torch.no_grad():
        dense.weight.copy_(torch.randn(20, 48, generator=g, dtype=torch.float64))
    layer = sk.nn.SparseLinear.from_dense(dense, **kwargs)
    x = torch.randn(tokens, 48, generator=g, dtype=torch.float64)
    W = layer.weight
    with torch.inference_mode():  # the evaluation pass
        layer(x)
        sk.linear(x, W, backend=backend)
        sk.spmm(W, x.t(), backend=backend)
        W.to_dense()
        if isinstance(W, sk.CSRMatrix):
            W.t()
    assert not any(b.is_inference() for b in layer.buffers())
    xg = x.clone().requires_grad_()
    out = sk.linear(xg, layer.weight, layer.bias, backend=backend)  # the training step
    (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape)).sum().backward()
    masked = layer.to_dense().detach().requires_grad_()
    x2 = x.clone().requires_grad_()
    want = torch.nn.functional.linear(x2, masked, layer.bias.detach())
    (want * torch.linspace(-1, 1, want.numel(), dtype=want.dtype).view(want.shape)).sum().backward()
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(xg.grad, x2.grad)
    kept = layer.to_dense() != 0
    grad = layer.weight.with_values(layer.values.grad).to_dense()
    torch.testing.assert_close(grad, masked.grad * kept)
    torch.testing.assert_close(sk.linear(x, W, layer.bias, backend=backend), want.detach())


def test_attention_evaluated_first_then_trained():
    attention = sk.nn.SparseAttention.local_strided(24, 4, 5)
    q, k, v = (torch.randn(1, 2, 24, 8, dtype=torch.float64) for _ in range(3))
    with torch.inference_mode():
        attention(q, k, v)
    q.requires_grad_()
    attention(q, k, v).sum().backward()
    assert q.grad is not None and not any(b.is_inference() for b in attention.buffers())


# GPU weights of each route's kind (rows a multiple of 16: cuSPARSELt's 2:4 takes them too)
GPU_WEIGHTS = pytest.mark.parametrize(
    "make",
    [
        lambda g: random_csr(304, 512, 0.3, g, torch.bfloat16, "cuda"),
        lambda g: random_nm(304, 512, 2, 8, g, dtype=torch.bfloat16, device="cuda"),
        lambda g: random_nm(304, 512, 2, 4, g, dtype=torch.bfloat16, device="cuda"),
    ],
    ids=["csr", "2:8", "2:4"],
)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 16])
@GPU_WEIGHTS
def test_linear_on_the_gpu(make, tokens):
    """The GPU routes (the sparse tensor cores' metadata, packed offsets; CSR without the
    scatter kernel's kept copy) with weights made under inference_mode match float64."""
    normal, frozen = _twins(make)
    x = torch.randn(tokens, 512, device="cuda", dtype=torch.bfloat16)
    dense = normal.to_dense().double()
    want, bound = x.double() @ dense.t(), x.double().abs() @ dense.abs().t()
    assert_close(sk.linear(x, normal), want, bound, torch.bfloat16)
    with torch.inference_mode():
        for _ in range(2):
            assert_close(sk.linear(x, frozen), want, bound, torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 16, 300])
@GPU_WEIGHTS
def test_evaluated_first_then_trained_on_the_gpu(make, tokens):
    """The GPU routes' kept copies (line layouts, packed offsets, the sparse tensor cores'
    metadata, the scatter kernel's tiles, cuSPARSELt's packing) made by calls under
    inference_mode, then a training step outside it."""
    W = make(torch.Generator().manual_seed(3))
    x = torch.randn(tokens, 512, device="cuda", dtype=torch.bfloat16)
    dense = W.to_dense().double()
    want, bound = x.double() @ dense.t(), x.double().abs() @ dense.abs().t()
    with torch.inference_mode():
        for _ in range(2):
            assert_close(sk.linear(x, W), want, bound, torch.bfloat16)
    values = W.values.clone().requires_grad_()
    xg = x.clone().requires_grad_()
    out = sk.linear(xg, W.with_values(values))
    assert_close(out, want, bound, torch.bfloat16)
    out.float().sum().backward()
    assert_close(xg.grad, dense.sum(0).expand(tokens, -1), dense.abs().sum(0).expand(tokens, -1),
                 torch.bfloat16)  # fmt: skip
    assert_close(sk.linear(x, W), want, bound, torch.bfloat16)
