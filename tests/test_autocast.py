"""linear, spmm, sddmm and the layers under torch.autocast (ops/_autocast.py): as F.linear and
matmul, float32 / 16-bit operands run in autocast's dtype (float64 left alone), the backends
with autocast off; gradients reach float32 values; a weight wanting no gradient keeps its cast
copy while its values last."""

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, randn, random_csr, random_nm, spmm_bound
from sparsekernels.ops import _autocast


@pytest.mark.parametrize("kw", [dict(pattern="2:8"), dict(sparsity=0.6)], ids=["nm", "csr"])
def test_sparse_linear_runs_in_the_autocast_dtype_like_nn_linear(kw):
    torch.manual_seed(0)
    layer = sk.nn.SparseLinear.from_dense(torch.nn.Linear(64, 30), **kw)
    dense = layer.to_linear()  # the same masked weight, dense
    x = torch.randn(2, 5, 64, requires_grad=True)
    x_dense = x.detach().clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = layer(x), dense(x_dense)
    assert got.dtype == want.dtype == torch.bfloat16
    W = layer.weight.to_dense().to(torch.bfloat16).double()
    xb = x.detach().to(torch.bfloat16).double()
    exact = xb @ W.t() + layer.bias.detach().to(torch.bfloat16).double()
    bound = xb.abs() @ W.abs().t() + layer.bias.detach().double().abs()
    assert_close(got, exact, bound, torch.bfloat16)
    got.float().sum().backward()  # (outside the autocast region, as torch advises)
    want.float().sum().backward()
    assert layer.values.grad.dtype == torch.float32 and x.grad.dtype == torch.float32
    torch.testing.assert_close(x.grad, x_dense.grad, rtol=2e-2, atol=2e-2)


def test_16_bit_weights_take_float32_inputs(gen):
    W = random_nm(12, 32, 2, 4, gen, dtype=torch.bfloat16)
    x = randn(3, 32, gen=gen, dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = sk.linear(x, W)
    want = x.to(torch.bfloat16).double() @ W.to_dense().double().t()
    assert got.dtype == torch.bfloat16
    assert_close(got, want, spmm_bound(W.to_dense(), x.to(torch.bfloat16).t()).t(), torch.bfloat16)


def test_float64_is_left_alone(gen):
    A = random_csr(9, 7, 0.5, gen)
    B = randn(7, 4, gen=gen)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = sk.spmm(A, B)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, A.to_dense() @ B)


def test_spmm_in_the_autocast_dtype(gen):
    A = random_csr(9, 7, 0.5, gen, torch.float32)
    B = randn(7, 4, gen=gen, dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = sk.spmm(A, B, activation="relu")
    assert got.dtype == torch.bfloat16
    Ab, Bb = A.to_dense().to(torch.bfloat16).double(), B.to(torch.bfloat16).double()
    assert_close(got, torch.relu(Ab @ Bb), Ab.abs() @ Bb.abs(), torch.bfloat16)


def test_sddmm_and_attention_in_the_autocast_dtype_with_gradients(gen):
    """sddmm casts both operands as matmul does; a backward through it (and through
    sparse_attention and SparseAttention, which use it) reaches float32 inputs."""
    P = random_csr(12, 10, 0.5, gen, torch.float32)
    x = randn(12, 8, gen=gen, dtype=torch.float32).requires_grad_()
    y = randn(10, 8, gen=gen, dtype=torch.float32).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        S = sk.sddmm(x, y, P)
    assert S.values.dtype == torch.bfloat16
    xb, yb = x.detach().to(torch.bfloat16).double(), y.detach().to(torch.bfloat16).double()
    dense = (xb @ yb.t())[P.to_dense() != 0]
    assert_close(S.values, dense, (xb.abs() @ yb.abs().t())[P.to_dense() != 0], torch.bfloat16)
    S.values.float().sum().backward()
    assert x.grad.dtype == torch.float32 and y.grad.dtype == torch.float32
    attention = sk.nn.SparseAttention.local_strided(16, window=4, stride=5)
    q = randn(1, 2, 16, 8, gen=gen, dtype=torch.float32).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attention(q, q, q)
    out.float().sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_the_cast_copy_is_kept_while_the_values_last(gen):
    W = random_csr(9, 7, 0.5, gen, torch.float32)
    first = _autocast.cast_weight(W, torch.bfloat16)
    assert _autocast.cast_weight(W, torch.bfloat16) is first
    assert first.values.dtype == torch.bfloat16
    first_entries = (torch.arange(63) < W.nnz).reshape(9, 7).float()  # another pattern
    other = sk.CSRMatrix.from_dense(first_entries).with_values(W.values)  # the same values
    assert _autocast.cast_weight(other, torch.bfloat16).row_offsets is other.row_offsets
    with torch.no_grad():
        W.values.mul_(2)
    again = _autocast.cast_weight(W, torch.bfloat16)
    assert again is not first
    torch.testing.assert_close(again.values, W.values.to(torch.bfloat16))
    W.values.requires_grad_()
    assert _autocast.cast_weight(W, torch.bfloat16).values.grad_fn is not None  # cast each call


def test_the_cast_copy_follows_an_in_place_pattern_edit(gen):
    W = random_csr(9, 16, 0.5, gen, torch.float32, empty_rows=False)
    first = _autocast.cast_weight(W, torch.bfloat16)
    with torch.no_grad():  # (a layer then builds a new format; the copy must follow it)
        W.column_indices.copy_(W.column_indices.flip(0))
    assert _autocast.cast_weight(W, torch.bfloat16) is not first


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 16])
@pytest.mark.parametrize("kw", [dict(pattern="2:8"), dict(sparsity=0.7)], ids=["nm", "csr"])
def test_sparse_linear_under_cuda_autocast(kw, tokens):
    torch.manual_seed(0)
    layer = sk.nn.SparseLinear.from_dense(torch.nn.Linear(512, 300), **kw).cuda()
    x = torch.randn(tokens, 512, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got = layer(x)
        again = layer(x)  # the kept copy (and the eager plan) on the second call
    assert got.dtype == torch.bfloat16
    W = layer.weight.to_dense().to(torch.bfloat16).double()
    xb = x.to(torch.bfloat16).double()
    exact = xb @ W.t() + layer.bias.detach().to(torch.bfloat16).double()
    bound = xb.abs() @ W.abs().t() + layer.bias.detach().double().abs()
    assert_close(got, exact, bound, torch.bfloat16)
    torch.testing.assert_close(again, got, rtol=0, atol=0)


def test_devices_without_autocast_pass_through():
    """meta tensors (shape inference) have no autocast state to ask: the op runs as before."""
    W = sk.NMMatrix.from_dense(torch.tensor([[1.0, 0.0, 0.0, 2.0]]), 2, 4).to("meta")
    out = sk.linear(torch.ones(3, 4, device="meta"), W)
    assert out.device.type == "meta" and out.shape == (3, 1)


def _gradients(module, inputs, inside: bool) -> list[torch.Tensor]:
    """Gradients of a loss made under bf16 autocast, its backward called inside the autocast
    block or after it."""
    for p in module.parameters():
        p.grad = None
    inputs = [t.detach().clone().requires_grad_() for t in inputs]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = module(*inputs).float().square().mean()
        if inside:  # (torch allows it, though its docs advise against it)
            loss.backward()
    if not inside:
        loss.backward()
    return [t.grad for t in inputs] + [p.grad for p in module.parameters()]


@pytest.mark.parametrize("tokens", [4, 64, 300])
def test_backward_inside_the_autocast_block_as_after_it(tokens, gen):
    """The forward runs with autocast off; the backward ran with it on when called inside the
    block, and torch's CPU CSR matmul has no bfloat16 (NotImplementedError)."""
    torch.manual_seed(0)
    layers = [
        sk.nn.SparseLinear.from_dense(torch.nn.Linear(64, 32), sparsity=0.8),
        sk.nn.SparseLinear.from_dense(torch.nn.Linear(64, 32), sparsity=0.95),
        sk.nn.SparseLinear.from_dense(torch.nn.Linear(64, 32), pattern="2:8"),
        sk.nn.SparseLinear.from_dense(torch.nn.Linear(64, 32), pattern="2:4", vector=4),
    ]
    x = randn(tokens, 64, gen=gen, dtype=torch.float32)
    conv = sk.nn.SparseConv2d.from_dense(torch.nn.Conv2d(16, 8, 1), sparsity=0.75)
    image = randn(2, 16, 3, 4, gen=gen, dtype=torch.float32)
    attention = sk.nn.SparseAttention.local_strided(tokens, window=3, stride=5)
    q = randn(1, 2, tokens, 8, gen=gen, dtype=torch.float32)
    for module, inputs in [*[(layer, (x,)) for layer in layers], (conv, (image,)),
                           (attention, (q, q, q))]:  # fmt: skip
        after = _gradients(module, inputs, inside=False)
        inside = _gradients(module, inputs, inside=True)
        for a, b in zip(after, inside, strict=True):
            assert a.dtype == b.dtype and torch.equal(a, b)
