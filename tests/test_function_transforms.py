"""torch.func's transforms through the sparse ops: grad, vjp, jacrev and vmap (per-sample
gradients, ensembles, Jacobians) give what plain autograd and a loop give, in float64, for
CSR and N:M weights, and so do forward mode's jvp, jacfwd and hessian. The ops run new-style
autograd.Functions under them (torch.library's own wrapper is old-style, which they refuse)
with vmap rules (ops/_vmap_rules.py) and jvp rules (ops/_forward_mode.py); sparse_attention
takes its composed ops under them."""

import gc
import warnings
import weakref

import pytest
import torch
from torch import nn
from torch.func import (
    functional_call,
    grad,
    jacfwd,
    jacrev,
    jvp,
    stack_module_state,
    vjp,
    vmap,
)

import sparsekernels as sk
from _helpers import randn, random_csr
from sparsekernels.ops.depthwise import depthwise_conv2d

WEIGHTS = [
    pytest.param(dict(sparsity=0.6), id="csr"),
    pytest.param(dict(pattern="2:8"), id="2:8"),
    pytest.param(dict(pattern="2:4,v=4"), id="2:4,v=4"),
]


def _layer(kw, out_features=12, in_features=16, seed=0):
    torch.manual_seed(seed)
    dense = nn.Linear(in_features, out_features).double()
    dense.weight.data[3] = 0  # an empty row (CSR)
    return sk.nn.SparseLinear.from_dense(dense, **kw)


def _close(got, want):
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def _count_backend_runs(monkeypatch) -> dict:
    from sparsekernels.ops import _dispatch

    counts, run = {}, _dispatch.run

    def counted(op, backend, *args):
        counts[op] = counts.get(op, 0) + 1
        return run(op, backend, *args)

    monkeypatch.setattr(_dispatch, "run", counted)
    return counts


@pytest.mark.parametrize("kw", WEIGHTS)
def test_grad_over_parameters_matches_autograd(kw, gen):
    layer = _layer(kw)
    params = {name: p.detach() for name, p in layer.named_parameters()}
    x = randn(5, 16, gen=gen)
    got = grad(lambda p: functional_call(layer, p, (x,)).square().sum())(params)
    loss = layer(x).square().sum()
    want = dict(zip(params, torch.autograd.grad(loss, list(layer.parameters())), strict=True))
    assert got.keys() == want.keys() == {"values", "bias"}
    for name in want:
        assert want[name].abs().sum() > 0
        _close(got[name], want[name])


@pytest.mark.parametrize("kw", WEIGHTS)
def test_jacrev_and_vjp_give_the_weight(kw, gen):
    layer = _layer(kw)
    dense = layer.weight.to_dense()
    row = randn(16, gen=gen)
    _close(jacrev(layer)(row), dense)
    out, pullback = vjp(layer, randn(3, 16, gen=gen))
    cotangent = randn(*out.shape, gen=gen)
    _close(pullback(cotangent)[0], cotangent @ dense)


@pytest.mark.parametrize("kw", WEIGHTS)
@pytest.mark.parametrize("x_shape", [(6, 16), (6, 3, 16)], ids=["rows", "sequences"])
def test_vmap_over_inputs_is_one_product(kw, x_shape, gen):
    layer = _layer(kw)
    x = randn(*x_shape, gen=gen)
    with torch.no_grad():
        want = torch.stack([layer(sample) for sample in x])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (torch's loop over the batch warns: a rule runs)
        _close(vmap(layer)(x), want)
    _close(vmap(layer, in_dims=1, out_dims=1)(x.transpose(0, 1).contiguous()), want.transpose(0, 1))


@pytest.mark.parametrize("kw", WEIGHTS)
def test_per_sample_gradients_match_a_loop(kw, gen, monkeypatch):
    """vmap(grad): each sample's gradient of the kept values and the bias, as in Opacus-style
    private training; the values' SDDMM is one batched call (an N:M one as a CSR one)."""
    layer = _layer(kw)
    params = {name: p.detach() for name, p in layer.named_parameters()}
    x, target = randn(4, 16, gen=gen), randn(4, 12, gen=gen)

    def loss(p, sample, t):
        return (functional_call(layer, p, (sample[None],))[0] - t).square().sum()

    counts = _count_backend_runs(monkeypatch)
    got = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, target)
    assert counts.get("sddmm_csr") == 1 and "sddmm_nm" not in counts, counts
    for i in range(4):
        layer.zero_grad()
        ((layer(x[i : i + 1])[0] - target[i]).square().sum()).backward()
        _close(got["values"][i], layer.values.grad)
        _close(got["bias"][i], layer.bias.grad)


@pytest.mark.parametrize("kw", WEIGHTS)
def test_an_ensemble_over_stacked_values(kw, gen):
    """vmap over models sharing a pattern (stack_module_state's parameters, the first
    member's pattern buffers unbatched): each member's own values."""
    members = [_layer(kw) for _ in range(3)]
    for i, member in enumerate(members[1:], 1):
        with torch.no_grad():
            member.values.mul_(1 + i)
            member.bias.add_(i)
    params, _ = stack_module_state(members)
    buffers = dict(members[0].named_buffers())
    x = randn(5, 16, gen=gen)
    run = vmap(lambda p, b: functional_call(members[0], (p, b), (x,)), in_dims=(0, None))
    got = run(params, buffers)
    with torch.no_grad():
        _close(got, torch.stack([member(x) for member in members]))


@pytest.mark.parametrize("kw", WEIGHTS)
def test_stacked_pattern_buffers_are_refused_with_the_way_out(kw, gen):
    """torch's ensembling recipe vmaps the buffers too: each member's pattern cannot be."""
    members = [_layer(kw) for _ in range(2)]
    params, buffers = stack_module_state(members)
    x = randn(5, 16, gen=gen)
    run = vmap(lambda p, b: functional_call(members[0], (p, b), (x,)))
    with pytest.raises(ValueError, match="must share one pattern; pass the first model's"):
        run(params, buffers)


def test_a_transforms_values_are_not_kept_by_the_layer(gen):
    """After vmap returns, the layer holds nothing of it (an ensemble's stacked values)."""
    layer = _layer(dict(sparsity=0.6))
    stacked = layer.values.detach()[None].repeat(5, 1)
    alive = weakref.ref(stacked)
    bias, x = layer.bias.detach(), randn(2, 16, gen=gen)
    vmap(lambda v: functional_call(layer, {"values": v, "bias": bias}, (x,)))(stacked)
    del stacked
    gc.collect()
    assert alive() is None


def test_sddmm_and_sparse_softmax_under_grad_and_vmap(gen):
    dense = randn(6, 7, gen=gen) * (torch.rand(6, 7, generator=gen) < 0.5)
    dense[2] = 0
    A = sk.CSRMatrix.from_dense(dense)
    X, Y = randn(6, 4, gen=gen), randn(7, 4, gen=gen)
    mask = dense != 0

    def attention_like(x):
        return sk.sparse_softmax(sk.sddmm(x, Y, A), scale=0.5).values.square().sum()

    def reference(x):
        scores = (0.5 * (x @ Y.t())).masked_fill(~mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # (the empty row: nothing)
        return probs[mask].square().sum()

    _close(grad(attention_like)(X), torch.func.grad(reference)(X))
    batch = randn(3, 6, 4, gen=gen)
    _close(vmap(attention_like)(batch), torch.stack([reference(x) for x in batch]))
    _close(vmap(grad(attention_like))(batch), torch.stack([grad(reference)(x) for x in batch]))


@pytest.mark.parametrize(
    "in_dims", [(0, None), (None, 0), (0, 0), (1, 0)], ids=["x", "y", "both", "x-at-1"]
)
@pytest.mark.parametrize("heads", [(None, None), (3, 3), (None, 3)], ids=["2-D", "3-D", "Y-3-D"])
def test_vmap_of_the_csr_ops_is_one_batched_call(in_dims, heads, gen, monkeypatch):
    """sddmm, the row softmax (and its backward) and spmm with batched values take a vmapped
    batch as their own batch (merged with one they already have): one call each, the loop's
    answer."""
    dense = randn(6, 7, gen=gen) * (torch.rand(6, 7, generator=gen) < 0.5)
    dense[2] = 0
    A = sk.CSRMatrix.from_dense(dense)
    lead_x, lead_y = (() if h is None else (h,) for h in heads)
    X, Y, V = randn(*lead_x, 6, 4, gen=gen), randn(*lead_y, 7, 4, gen=gen), randn(7, 5, gen=gen)
    xs = torch.stack([X * (i + 1) for i in range(4)], dim=in_dims[0] or 0)
    ys = torch.stack([Y - i for i in range(4)], dim=in_dims[1] or 0)

    def chain(x, y):
        return sk.spmm(sk.sparse_softmax(sk.sddmm(x, y, A), scale=0.5), V)

    args = (xs if in_dims[0] is not None else X, ys if in_dims[1] is not None else Y)

    def entry(i):
        pairs = zip(args, in_dims, strict=True)
        return tuple(a.select(d, i) if d is not None else a for a, d in pairs)

    counts = _count_backend_runs(monkeypatch)
    got = vmap(chain, in_dims=in_dims)(*args)
    assert counts == {"sddmm_csr": 1, "sparse_softmax": 1, "spmm_csr": 1}
    with torch.no_grad():
        _close(got, torch.stack([chain(*entry(i)) for i in range(4)]))
    counts.clear()

    def loss(x, y):
        return chain(x, y).sin().sum()

    per_sample = vmap(grad(loss), in_dims=in_dims)(*args)
    assert counts.get("sparse_softmax_backward") == 1 and counts["sddmm_csr"] <= 2
    _close(per_sample, torch.stack([grad(loss)(*entry(i)) for i in range(4)]))


@pytest.mark.parametrize("b_batch", [None, 0, "logical"], ids=["B", "B-vmapped", "B-3-D"])
def test_vmap_over_a_batched_csr_weights_values(b_batch, gen, monkeypatch):
    """A CSR weight holding a batch of values (2-D values), vmapped over more values: the op's
    own batch takes both, with B unbatched, vmapped too, or batched itself (3-D)."""
    A = random_csr(6, 7, 0.5, gen)
    values = torch.stack([A.values * (i + 1) for i in range(3)])  # (3, nnz): a batch of weights
    stacked = torch.stack([values - i for i in range(4)])  # vmapped: (4, 3, nnz)
    B = randn(3, 7, 5, gen=gen) if b_batch == "logical" else randn(7, 5, gen=gen)
    Bs = torch.stack([B * (i + 1) for i in range(4)]) if b_batch == 0 else B

    def product(v, b):
        return sk.spmm(A.with_values(v), b, activation="relu")

    counts = _count_backend_runs(monkeypatch)
    got = vmap(product, in_dims=(0, b_batch if b_batch == 0 else None))(stacked, Bs)
    assert counts == {"spmm_csr": 1}
    with torch.no_grad():
        want = torch.stack([product(stacked[i], Bs[i] if b_batch == 0 else B) for i in range(4)])
    _close(got, want)


def test_an_nm_weights_sddmm_gradient_under_grad(gen):
    """The gradient of an N:M weight's values is an SDDMM at its kept positions."""
    layer = _layer(dict(pattern="2:8"))
    x = randn(5, 16, gen=gen)
    got = grad(lambda v: sk.linear(x, layer.weight.with_values(v)).sum())(layer.values.detach())
    dense_grad = torch.ones(5, 12, dtype=torch.float64).t() @ x
    _close(got, dense_grad.gather(1, layer.weight.column_indices()))


@pytest.mark.parametrize("kw", WEIGHTS)
def test_forward_mode_gives_the_weight(kw, gen):
    """jvp and jacfwd (forward mode): the tangent of x, of the values and of the bias."""
    layer = _layer(kw)
    dense = layer.weight.to_dense()
    x = randn(3, 16, gen=gen)
    _close(jacfwd(layer)(x[0]), dense)
    params = {name: p.detach() for name, p in layer.named_parameters()}
    tangents = {name: randn(*p.shape, gen=gen) for name, p in params.items()}
    _, got = jvp(lambda p: functional_call(layer, p, (x,)), (params,), (tangents,))
    tangent_weight = layer.weight.with_values(tangents["values"]).to_dense()
    _close(got, x @ tangent_weight.t() + tangents["bias"])


@pytest.mark.parametrize("kw", WEIGHTS)
def test_hessians_forward_over_reverse_and_reverse_over_reverse(kw, gen):
    """hessian (jacfwd of jacrev) and jacrev of jacrev of a loss in x and in the values match
    the dense model's."""
    layer = _layer(kw)
    dense = layer.weight.to_dense()
    bias = layer.bias.detach()
    x = randn(16, gen=gen)

    def loss(row, weight):
        return torch.tanh(row @ weight.t() + bias).square().sum()

    want = torch.func.hessian(loss)(x, dense)
    _close(torch.func.hessian(lambda row: torch.tanh(layer(row)).square().sum())(x), want)
    _close(jacrev(jacrev(lambda row: torch.tanh(layer(row)).square().sum()))(x), want)
    values = layer.values.detach()

    def by_values(v):
        return torch.tanh(sk.linear(x, layer.weight.with_values(v), bias)).square().sum()

    W = layer.weight
    if isinstance(W, sk.CSRMatrix):
        rows = torch.repeat_interleave(torch.arange(W.shape[0]), W.row_offsets.diff())
        columns = W.column_indices.long()
    else:
        columns = W.column_indices().reshape(-1)
        rows = torch.arange(W.shape[0]).repeat_interleave(W.values.shape[1])
    full = torch.func.hessian(lambda w: loss(x, w))(dense)[rows, columns][:, rows, columns]
    _close(torch.func.hessian(by_values)(values).reshape(full.shape), full)


@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
def test_forward_mode_through_spmm_activations_sddmm_and_softmax(activation, gen):
    dense = randn(6, 7, gen=gen) * (torch.rand(6, 7, generator=gen) < 0.5)
    dense[2] = 0
    A = sk.CSRMatrix.from_dense(dense)
    mask = dense != 0
    B, bias = randn(7, 5, gen=gen), randn(6, gen=gen)
    act = {"none": lambda t: t, "relu": torch.relu, "gelu": torch.nn.functional.gelu}[activation]

    def sparse(v, b):
        return sk.spmm(A.with_values(v), b, bias, activation=activation)

    def full(v, b):
        weight = torch.zeros(6, 7, dtype=torch.float64).masked_scatter(mask, v)
        return act(weight @ b + bias[:, None])

    primals = (A.values.clone(), B)
    tangents = (randn(*A.values.shape, gen=gen), randn(7, 5, gen=gen))
    _close(jvp(sparse, primals, tangents)[1], jvp(full, primals, tangents)[1])
    X, Y = randn(6, 4, gen=gen), randn(7, 4, gen=gen)

    def attention_like(x):
        return sk.sparse_softmax(sk.sddmm(x, Y, A), scale=0.5).values

    def reference(x):
        scores = (0.5 * (x @ Y.t())).masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1)[mask]

    _close(jacfwd(attention_like)(X), jacrev(reference)(X))


def _attention_reference(q, k, v, mask, scale):
    empty = ~mask.any(-1, keepdim=True)  # a query with no keys: zeros (and zero tangents)
    scores = (scale * q @ k.transpose(-1, -2)).masked_fill(~mask, float("-inf"))
    return (torch.softmax(scores.masked_fill(empty, 0.0), dim=-1) * ~empty) @ v


def test_sparse_attention_under_grad_vmap_and_jacfwd(gen):
    """The composed path (SDDMM, row softmax, SpMM) under the transforms; the fused kernel has
    no rules for them, so the transforms take the composed ops on the GPU too."""
    mask = torch.rand(5, 6, generator=gen) < 0.5
    mask[1] = False  # a query with no keys
    pattern = sk.CSRMatrix.from_dense(mask.double())
    q, k, v = randn(2, 2, 5, 3, gen=gen), randn(2, 2, 6, 3, gen=gen), randn(2, 2, 6, 4, gen=gen)

    def loss(attend, q, k, v):
        return attend(q, k, v).square().sum()

    def sparse(q, k, v):
        return sk.sparse_attention(q, k, v, pattern, scale=0.7)

    def dense(q, k, v):
        return _attention_reference(q, k, v, mask, 0.7)

    got = grad(lambda *t: loss(sparse, *t), argnums=(0, 1, 2))(q, k, v)
    want = grad(lambda *t: loss(dense, *t), argnums=(0, 1, 2))(q, k, v)
    for g, w in zip(got, want, strict=True):
        _close(g, w)
    stacked = [randn(3, *t.shape, gen=gen) for t in (q, k, v)]
    _close(vmap(sparse)(*stacked), vmap(dense)(*stacked))
    _close(jacfwd(sparse)(q[:1], k[:1], v[:1]), jacfwd(dense)(q[:1], k[:1], v[:1]))


@pytest.mark.parametrize("backend", [None, "reference"])
@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
def test_depthwise_conv2d_under_grad_vmap_and_jacfwd(backend, activation, gen):
    """MobileNet's depthwise 3x3 (stride 2, bias, an activation) against torch's conv2d."""
    x, w, b = randn(2, 3, 5, 4, gen=gen), randn(3, 1, 3, 3, gen=gen), randn(3, gen=gen)
    act = {"none": lambda t: t, "relu": torch.relu, "gelu": torch.nn.functional.gelu}[activation]

    def sparse(x, w, b):
        return depthwise_conv2d(x, w, b, stride=2, activation=activation, backend=backend)

    def dense(x, w, b):
        return act(torch.nn.functional.conv2d(x, w, b, 2, 1, 1, 3))

    loss = [lambda *t, f=f: f(*t).square().sum() for f in (sparse, dense)]
    got = grad(loss[0], argnums=(0, 1, 2))(x, w, b)
    for g, want in zip(got, grad(loss[1], argnums=(0, 1, 2))(x, w, b), strict=True):
        _close(g, want)
    images = randn(4, 2, 3, 5, 4, gen=gen)
    _close(
        vmap(sparse, in_dims=(0, None, None))(images, w, b),
        vmap(dense, in_dims=(0, None, None))(images, w, b),
    )
    _close(jacfwd(sparse, argnums=1)(x[:1], w, b), jacfwd(dense, argnums=1)(x[:1], w, b))


@pytest.mark.gpu
@pytest.mark.parametrize("kw", [*WEIGHTS, pytest.param(dict(pattern="2:4"), id="2:4")])
@pytest.mark.parametrize("tokens", [1, 16, 600])
def test_transforms_on_the_gpu_match_autograd(kw, tokens, gen):
    """The GPU's kernels under grad and vmap: the Triton routes at 1-16 tokens in fp32; at
    600 in bf16, where autograd's 2:4 takes cuSPARSELt's op, which has no rules for them
    (dense under the transforms)."""
    dtype = torch.bfloat16 if tokens == 600 else torch.float32
    tol = 3e-2 if dtype == torch.bfloat16 else 1e-4
    layer = _layer(kw, 256, 512).to(device="cuda", dtype=dtype)
    params = {name: p.detach() for name, p in layer.named_parameters()}
    x = randn(tokens, 512, gen=gen, dtype=dtype, device="cuda")
    got = grad(lambda p: functional_call(layer, p, (x,)).float().square().sum())(params)
    loss = layer(x).float().square().sum()
    want = torch.autograd.grad(loss, [layer.values, layer.bias])
    for name, expected in zip(("values", "bias"), want, strict=True):
        scale = expected.float().abs().max().item()
        torch.testing.assert_close(got[name], expected, rtol=tol, atol=tol * scale)
    with torch.no_grad():
        rows = torch.stack([layer(row[None])[0] for row in x[:4]])
        torch.testing.assert_close(vmap(layer)(x[:4]), rows, rtol=tol, atol=tol)


@pytest.mark.gpu
def test_sparse_attention_under_grad_on_the_gpu(gen):
    """Autograd may take the fused kernel; grad takes the composed ops: the same gradients."""
    pattern = sk.CSRMatrix.from_dense(torch.ones(128, 128).tril()).to("cuda")
    q, k, v = (randn(2, 4, 128, 64, gen=gen, dtype=torch.float32, device="cuda") for _ in "qkv")
    got = grad(
        lambda *t: sk.sparse_attention(*t, pattern).square().sum(), argnums=(0, 1, 2)
    )(q, k, v)  # fmt: skip
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    want = torch.autograd.grad(sk.sparse_attention(*leaves, pattern).square().sum(), leaves)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
def test_depthwise_conv2d_under_grad_and_vmap_on_the_gpu(gen):
    x = randn(2, 32, 14, 14, gen=gen, dtype=torch.float32, device="cuda")
    w = randn(32, 1, 3, 3, gen=gen, dtype=torch.float32, device="cuda")
    b = randn(32, gen=gen, dtype=torch.float32, device="cuda")

    def sparse(x, w, b):
        return depthwise_conv2d(x, w, b, stride=1, activation="relu", backend="triton")

    def dense(x, w, b):
        return torch.relu(torch.nn.functional.conv2d(x, w, b, 1, 1, 1, 32))

    got = grad(lambda *t: sparse(*t).square().sum(), argnums=(0, 1, 2))(x, w, b)
    want = grad(lambda *t: dense(*t).square().sum(), argnums=(0, 1, 2))(x, w, b)
    for g, expected in zip(got, want, strict=True):
        torch.testing.assert_close(g, expected, rtol=1e-4, atol=1e-3)
    images = (
        x[None].expand(3, -1, -1, -1, -1)
        * torch.arange(1, 4, device="cuda")[:, None, None, None, None]
    )
    torch.testing.assert_close(
        vmap(sparse, in_dims=(0, None, None))(images, w, b),
        vmap(dense, in_dims=(0, None, None))(images, w, b),
        rtol=1e-4, atol=1e-4,
    )  # fmt: skip
