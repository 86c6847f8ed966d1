"""A training step's repeat linear on the dense route keeps its densified weight to the backward
(ops/_densified_linear.py): its product and the gradients of x, the values and the bias against
float64 references, fresh data each step, the weight changed in place between steps; taken only
where W is no larger than x (and not for the CPU's widened half precision); a gradient of the
gradient through it."""

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, randn, random_csr, spmm_bound
from sparsekernels.ops import _densified_linear


@pytest.fixture
def densified_calls(monkeypatch):
    calls = []
    linear = _densified_linear.linear

    def counted(*args):
        calls.append(1)
        return linear(*args)

    monkeypatch.setattr(_densified_linear, "linear", counted)
    return calls


def _references(W, x, bias, g):
    """float64 (out, dx, dvalues, dbias) for output gradient g."""
    dense = W.to_dense().double()
    x64, g64 = x.detach().double().reshape(-1, W.shape[1]), g.double().reshape(-1, W.shape[0])
    out = x64 @ dense.t() + (0 if bias is None else bias.detach().double())
    full = g64.t() @ x64
    rows = torch.repeat_interleave(torch.arange(W.shape[0]), W.row_offsets.diff().long())
    d_values = full[rows, W.column_indices.long()]
    return out, g64 @ dense, d_values, g64.sum(0), dense, x64, g64


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("shape", [(37, 50), (1, 50), (37, 1), (64, 64)], ids=str)
def test_steps_match_float64(dtype, with_bias, shape, gen, densified_calls):
    """Rows left empty, one output, K = 1, block-sized: three steps of fresh x (3-D) and
    output gradients, the values changed in place between them."""
    rows, cols = shape
    W = random_csr(rows, cols, 0.3, gen, dtype)
    W.values.requires_grad_()
    bias = randn(rows, gen=gen, dtype=dtype).requires_grad_() if with_bias else None
    tokens = max(rows, 8)  # (x at least W's size: the weight is kept)
    for _ in range(3):
        x = randn(2, tokens, cols, gen=gen, dtype=dtype).requires_grad_()
        g = randn(2, tokens, rows, gen=gen, dtype=dtype)
        W.values.grad = None
        if bias is not None:
            bias.grad = None
        out = sk.linear(x, W, bias, backend="dense")
        out.backward(g)
        want, d_x, d_values, d_bias, dense, x64, g64 = _references(W, x, bias, g)
        assert_close(out.reshape(-1, rows), want, spmm_bound(dense, x64.t()).t(), dtype)
        assert_close(x.grad.reshape(-1, cols), d_x, g64.abs() @ dense.abs() + 1e-9, dtype)
        full_bound = g64.abs().t() @ x64.abs()
        rows_of = torch.repeat_interleave(torch.arange(rows), W.row_offsets.diff().long())
        bound = full_bound[rows_of, W.column_indices.long()] + 1e-9
        assert_close(W.values.grad, d_values, bound, dtype)
        if bias is not None:
            assert_close(bias.grad, d_bias, g64.abs().sum(0) + 1e-9, dtype)
        with torch.no_grad():
            W.values.mul_(-1.5)  # an optimizer step
    assert len(densified_calls) == 2  # (the first call took the whole path)


def test_a_weight_larger_than_x_takes_the_twin(gen, densified_calls):
    W = random_csr(37, 50, 0.3, gen, torch.float64)
    W.values.requires_grad_()
    x = randn(4, 50, gen=gen).requires_grad_()  # 200 elements against W's 1850
    for _ in range(2):
        sk.linear(x, W, backend="dense").sum().backward()
    assert densified_calls == []
    torch.testing.assert_close(x.grad, 2 * torch.ones(4, 37).double() @ W.to_dense())


def test_cpu_half_precision_takes_the_twin(gen, densified_calls):
    """The CPU's dense backend computes bf16 in fp32: the kept weight's product would not."""
    W = random_csr(16, 16, 0.5, gen, torch.bfloat16)
    W.values.requires_grad_()
    x = randn(64, 16, gen=gen, dtype=torch.bfloat16).requires_grad_()
    for _ in range(2):
        sk.linear(x, W, backend="dense").sum().backward()
    assert densified_calls == []


def test_only_the_wanted_gradients(gen, densified_calls):
    W = random_csr(8, 12, 0.5, gen)
    x = randn(16, 12, gen=gen)
    for wants_x, wants_values in [(True, False), (False, True)]:
        for _ in range(2):
            W.values.requires_grad_(wants_values)
            W.values.grad = None
            xi = x.clone().requires_grad_(wants_x)
            sk.linear(xi, W, backend="dense").sum().backward()
            assert (xi.grad is not None) == wants_x
            assert (W.values.grad is not None) == wants_values
    assert len(densified_calls) == 2


def test_gradients_of_gradients(gen, densified_calls):
    """gradcheck and gradgradcheck in float64 through the planned calls (second-order terms in
    the values through x's gradient)."""
    W = random_csr(6, 5, 0.5, gen, empty_rows=False)
    values = W.values.detach().clone().requires_grad_()
    bias = randn(6, gen=gen).requires_grad_()
    x = randn(8, 5, gen=gen).requires_grad_()

    def f(x, values, bias):
        matrix = sk.CSRMatrix(W.row_offsets, W.column_indices, values, W.shape, check=False)
        return sk.linear(x, matrix, bias, backend="dense")

    f(x, values, bias).sum().backward()  # (the first call: the whole path)
    assert torch.autograd.gradcheck(f, (x, values, bias))
    assert torch.autograd.gradgradcheck(f, (x, values, bias))
    assert densified_calls


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_steps_on_the_gpu_match_float64(dtype, gen, densified_calls):
    """The Triton densify and cuBLAS: a 90%-sparse 300 x 200 weight (rows not multiples of any
    tile) at 1000 tokens, three steps, against float64."""
    W = random_csr(300, 200, 0.1, gen, dtype, device="cuda")
    W.values.requires_grad_()
    bias = randn(300, gen=gen, dtype=dtype, device="cuda").requires_grad_()
    for _ in range(3):
        x = randn(1000, 200, gen=gen, dtype=dtype, device="cuda").requires_grad_()
        g = randn(1000, 300, gen=gen, dtype=dtype, device="cuda")
        W.values.grad = bias.grad = None
        out = sk.linear(x, W, bias, backend="dense")
        out.backward(g)
        cpu = sk.CSRMatrix(W.row_offsets.cpu(), W.column_indices.cpu(), W.values.detach().cpu(),
                           W.shape)  # fmt: skip
        refs = _references(cpu, x.cpu(), bias.cpu(), g.cpu())
        want, d_x, d_values, d_bias, dense, x64, g64 = refs
        assert_close(out, want, spmm_bound(dense, x64.t()).t(), dtype)
        assert_close(x.grad, d_x, g64.abs() @ dense.abs() + 1e-9, dtype)
        rows_of = torch.repeat_interleave(torch.arange(300), cpu.row_offsets.diff().long())
        bound = (g64.abs().t() @ x64.abs())[rows_of, cpu.column_indices.long()] + 1e-9
        assert_close(W.values.grad, d_values, bound, dtype)
        assert_close(bias.grad, d_bias, g64.abs().sum(0) + 1e-9, dtype)
        with torch.no_grad():
            W.values.mul_(-1.5)
    assert len(densified_calls) == 2


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_gives_the_same_gradients(reentrant, gen, densified_calls):
    """torch.utils.checkpoint recomputes the forward in backward (through the plan again):
    the same gradients as without it, accumulated over two micro-batches."""
    from torch.utils.checkpoint import checkpoint

    W = random_csr(12, 10, 0.4, gen)
    W.values.requires_grad_()
    bias = randn(12, gen=gen).requires_grad_()
    xs = [randn(16, 10, gen=gen) for _ in range(2)]

    def grads(wrap):
        W.values.grad = bias.grad = None
        for x in xs:
            x = x.clone().requires_grad_()
            out = wrap(lambda t: torch.tanh(sk.linear(t, W, bias, backend="dense")), x)
            out.square().sum().backward()
        return W.values.grad.clone(), bias.grad.clone()

    sk.linear(xs[0], W, bias, backend="dense")  # (the whole path: later calls are planned)
    plain = grads(lambda f, x: f(x))
    kept = grads(lambda f, x: checkpoint(f, x, use_reentrant=reentrant))
    for a, b in zip(plain, kept, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert len(densified_calls) >= 3  # (reentrant: the first forward runs without a gradient)


@pytest.mark.gpu
@pytest.mark.parametrize("with_bias", [False, True])
def test_replayed_densify_follows_the_values(with_bias, gen, densified_calls, monkeypatch):
    """_launch_plans.TRAINING on: from the third step the densify's launch is replayed, its
    values followed as an input: changed in place by each step (as an optimizer does) and once
    swapped for new storage (`.data =`), every step still matches float64."""
    from sparsekernels.ops import _launch_plans

    monkeypatch.setattr(_launch_plans, "TRAINING", True)
    monkeypatch.setattr(_launch_plans, "ENABLED", True)
    dtype = torch.bfloat16
    W = random_csr(300, 200, 0.1, gen, dtype, device="cuda")
    W.values.requires_grad_()
    bias = randn(300, gen=gen, dtype=dtype, device="cuda").requires_grad_() if with_bias else None
    before = _launch_plans.stats["replayed"]
    for step in range(6):
        x = randn(1000, 200, gen=gen, dtype=dtype, device="cuda").requires_grad_()
        g = randn(1000, 300, gen=gen, dtype=dtype, device="cuda")
        W.values.grad = None
        out = sk.linear(x, W, bias, backend="dense")
        out.backward(g)
        cpu = sk.CSRMatrix(W.row_offsets.cpu(), W.column_indices.cpu(), W.values.detach().cpu(),
                           W.shape)  # fmt: skip
        cpu_bias = None if bias is None else bias.cpu()
        want, d_x, d_values, _, dense, x64, g64 = _references(cpu, x.cpu(), cpu_bias, g.cpu())
        assert_close(out, want, spmm_bound(dense, x64.t()).t(), dtype)
        assert_close(x.grad, d_x, g64.abs() @ dense.abs() + 1e-9, dtype)
        rows_of = torch.repeat_interleave(torch.arange(300), cpu.row_offsets.diff().long())
        bound = (g64.abs().t() @ x64.abs())[rows_of, cpu.column_indices.long()] + 1e-9
        assert_close(W.values.grad, d_values, bound, dtype)
        with torch.no_grad():
            if step == 3:
                W.values.data = W.values.data * 0.5  # new storage, no version bump
            else:
                W.values.mul_(-1.5)
    assert len(densified_calls) == 5
    assert _launch_plans.stats["replayed"] - before >= 3, _launch_plans.stats


def test_training_launch_plans_on_record_nothing_off_cuda(gen, densified_calls, monkeypatch):
    """With TRAINING on, CPU steps take the densify as before (nothing records off CUDA)."""
    from sparsekernels.ops import _eager_plans, _launch_plans

    monkeypatch.setattr(_launch_plans, "TRAINING", True)
    W = random_csr(12, 10, 0.4, gen, torch.float64)
    W.values.requires_grad_()
    for _ in range(3):
        x = randn(30, 10, gen=gen, dtype=torch.float64).requires_grad_()
        out = sk.linear(x, W, backend="dense")
        out.backward(torch.ones_like(out))
        torch.testing.assert_close(out, x @ W.to_dense().t())
    plans = _eager_plans._PLANS.get(W.values)
    assert len(densified_calls) == 2
    assert all(plan.densify_launches == {} for plan in plans.values())
