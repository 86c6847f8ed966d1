"""The scatter backend of spmm_csr (ops/_csr_scatter.py) through linear and spmm on the GPU:
chosen for a CSRMatrix's own half-precision values at 8-64 tokens (to 80 and in 128-row tiles
on large sparse weights), its copy of the weight rebuilt when the values change in place,
never built for values that need a gradient; where the route takes it, the copy's lookup and
tile height on the CPU."""

import dataclasses

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, randn, random_csr, spmm_bound
from sparsekernels.ops import _csr_scatter, _dispatch
from sparsekernels.ops.spmm import csr_problem, spmm_csr_raw


def test_the_copy_is_kept_for_these_arrays_at_this_version(gen):
    """A lookup finds the copy for the very values and pattern arrays it was built from, at
    the values' version: not after an in-place change, nor for another pattern's arrays."""
    W = random_csr(70, 130, 0.3, gen, torch.bfloat16)
    arrays = (W.row_offsets, W.column_indices, W.values)
    built = _csr_scatter._tiled(*arrays, 130, build=True)
    assert _csr_scatter._tiled(*arrays, 130, build=False)[1] is built[1]
    other = (W.row_offsets.clone(), W.column_indices, W.values)
    assert _csr_scatter._tiled(*other, 130, build=False) is None
    W.values.mul_(2)
    assert _csr_scatter._tiled(*arrays, 130, build=False) is None
    _csr_scatter._tiled(*arrays, 130, build=True)
    # the pattern edited in place (a layer's buffer): the kernel reads only the copy, so a
    # stale one would run the old pattern
    W.column_indices[:2] = W.column_indices[:2].flip(0)
    assert _csr_scatter._tiled(*arrays, 130, build=False) is None


def test_inference_values_are_tiled_for_the_call_only(gen):
    """Inference tensors have no version counter: the copy is built when asked, never kept."""
    with torch.inference_mode():
        W = random_csr(70, 130, 0.3, gen, torch.bfloat16)
    arrays = (W.row_offsets, W.column_indices, W.values)
    offsets, entries = _csr_scatter._tiled(*arrays, 130, build=True)
    assert offsets.numel() == 2 * 3 + 1 and entries.numel() >= W.values.numel()
    assert _csr_scatter._tiled(*arrays, 130, build=False) is None
    assert _csr_scatter._TILED.get(W.values) is None


def test_the_copy_has_the_weights_tile_height(gen):
    """Sparse weights of 2^25 elements or more are copied in 128-row tiles (the launch takes
    its height from the same rule), others in 64."""
    for rows, density, height in ((2048, 0.002, 128), (2048, 0.3, 64), (1000, 0.002, 64)):
        W = random_csr(rows, 2**14 + 3, density, gen, torch.bfloat16)
        offsets, _ = _csr_scatter._tiled(W.row_offsets, W.column_indices, W.values,
                                         W.shape[1], build=True)  # fmt: skip
        assert offsets.numel() == -(-rows // height) * -(-W.shape[1] // 64) + 1


def test_where_the_route_takes_it():
    """8 tokens on dense or large weights, 9-32 on every weight, 33-64 on weights of 2^24
    elements or more, 65-128 on sparse ones of 2^25 or more (their 128-row tiles)."""
    from sparsekernels.kernels.csr_scatter_tuning import csr_scatter_takes

    large, tall = 2**24, 2**25
    assert csr_scatter_takes(8, 0.3, 1000) and not csr_scatter_takes(8, 0.1, 1000)
    assert csr_scatter_takes(8, 0.1, large) and not csr_scatter_takes(7, 0.3, large)
    assert csr_scatter_takes(32, 0.3, 1000) and not csr_scatter_takes(33, 0.3, 1000)
    assert csr_scatter_takes(64, 0.3, large) and not csr_scatter_takes(65, 0.3, tall)
    assert csr_scatter_takes(128, 0.1, tall) and not csr_scatter_takes(129, 0.1, tall)
    assert not csr_scatter_takes(80, 0.1, large)  # (64-row tiles: densify past 64)


def test_zeros_only_at_the_places_on_sparse_weights(monkeypatch):
    """`unscatter` is chosen at densities up to the limit, on both tile heights; never while
    the limit is None."""
    from sparsekernels.kernels import csr_scatter_tuning as tuning

    monkeypatch.setattr(tuning, "CSR_SCATTER_UNSCATTER_MAX_DENSITY", None)
    assert not tuning.csr_scatter_config(16, 4096, 4096, 64, 0.01).unscatter
    monkeypatch.setattr(tuning, "CSR_SCATTER_UNSCATTER_MAX_DENSITY", 0.15)
    for n, block_m in ((16, 64), (32, 64), (16, 128), (77, 128)):
        assert tuning.csr_scatter_config(n, 4096, 4096, block_m, 0.1).unscatter
        assert not tuning.csr_scatter_config(n, 4096, 4096, block_m, 0.3).unscatter
    # the rest of the configuration does not move with it
    on = tuning.csr_scatter_config(16, 14336, 4096, 64, 0.1)
    assert (on.block_n, on.programs_per_sm, on.warps) == (16, 8, 4)


def test_forced_on_batched_values_is_refused():
    """values of shape (1, nnz) make batch 1, and the kernel's 2-D output dropped that
    dimension (a (64, 16) answer for (1, 64, 16)): a forced call is refused now."""
    facts = {"n": 16, "batch": 1, "b_dim": 2, "rows": 64, "k": 64, "density": 0.3}
    cuda = torch.device("cuda", 0)
    assert _csr_scatter.reasons(_dispatch.Problem(cuda, torch.bfloat16, facts), True) == []
    batched = _dispatch.Problem(cuda, torch.bfloat16, {**facts, "values_dim": 2})
    assert _csr_scatter.reasons(batched, True) == [
        "the scatter kernel takes one matrix (1-D values) and a 2-D B"
    ]
    W = random_csr(64, 64, 0.3, torch.Generator().manual_seed(0), torch.bfloat16)
    B = torch.ones(64, 16, dtype=torch.bfloat16)
    assert csr_problem(W.row_offsets, W.column_indices, W.values[None], B).facts["values_dim"] == 2


def _want(W, x, bias=None):
    out = x.double() @ W.to_dense().double().t()
    return out if bias is None else out + bias.double()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    ("rows", "k", "density", "tokens"),
    [
        *((200, 300, 0.3, t) for t in (8, 9, 16, 17, 32)),
        (4100, 4096, 0.1, 8),  # 8 tokens on a sparse weight of 2^24 elements or more
        # 2^25 elements or more at density 0.2 or less: a copy in 128-row tiles
        *((2048, 2**14 + 3, 0.02, t) for t in (8, 12, 24, 33)),
        (2100, 2**14 + 1000, 0.05, 64),
        (2100, 2**14 + 1000, 0.05, 77),  # past 64 tokens on those weights (to 128)
        (2100, 2**14 + 1000, 0.05, 101),
        (2100, 2**14 + 1000, 0.05, 128),
    ],
)
def test_linear_takes_the_scatter_kernel(dtype, rows, k, density, tokens, gen, monkeypatch):
    """Rows and K off the kernel's 64 x 64 tiles, empty rows, tokens off its column tiles;
    the product is the scatter kernel's and matches float64."""
    W = random_csr(rows, k, density, gen, dtype, "cuda")
    x = randn(tokens, k, gen=gen, dtype=dtype, device="cuda")
    backend, calls = _dispatch._REGISTRY["spmm_csr"]["scatter"], []

    def counted(*args):
        calls.append(1)
        return backend.run(*args)

    monkeypatch.setitem(_dispatch._REGISTRY["spmm_csr"], "scatter",
                        dataclasses.replace(backend, run=counted))  # fmt: skip
    got = sk.linear(x, W)
    assert calls == [1]
    assert_close(got, _want(W, x), spmm_bound(W.to_dense(), x.t()).t(), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("rows", "k", "density", "tokens"),
    [(200, 300, 0.1, 16), (200, 300, 0.1, 32), (2048, 2**14 + 3, 0.02, 24), (130, 700, 0.0, 9)],
)
def test_linear_zeroing_only_the_places(rows, k, density, tokens, gen, monkeypatch):
    """With `unscatter` routed (every density), the product still matches float64: 64- and
    128-row tiles, empty rows and tiles, tokens off the column tiles, K split."""
    from sparsekernels.kernels import csr_scatter_tuning as tuning

    monkeypatch.setattr(tuning, "CSR_SCATTER_UNSCATTER_MAX_DENSITY", 1.0)
    W = random_csr(rows, k, density, gen, torch.bfloat16, "cuda")
    x = randn(tokens, k, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = spmm_csr_raw(W.row_offsets, W.column_indices, W.values, x.t(), None, None, "none",
                       backend="scatter").t()  # fmt: skip
    assert_close(got, _want(W, x), spmm_bound(W.to_dense(), x.t()).t(), torch.bfloat16)


@pytest.mark.gpu
def test_spmm_bias_activation_and_a_row_major_b(gen):
    W = random_csr(130, 700, 0.1, gen, torch.bfloat16, "cuda")
    B = randn(700, 24, gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(130, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = sk.spmm(W, B, bias, activation="relu")
    want = torch.relu(W.to_dense().double() @ B.double() + bias.double()[:, None])
    bound = spmm_bound(W.to_dense(), B) + bias.double().abs()[:, None]
    assert_close(got, want, bound, torch.bfloat16)


@pytest.mark.gpu
def test_values_changed_in_place_are_seen(gen):
    """The tiled copy is rebuilt after an in-place change of the values (their version)."""
    W = random_csr(128, 256, 0.3, gen, torch.bfloat16, "cuda")
    x = randn(16, 256, gen=gen, dtype=torch.bfloat16, device="cuda")
    sk.linear(x, W)
    with torch.no_grad():
        W.values.mul_(-2)
    got = sk.linear(x, W)
    assert_close(got, _want(W, x), spmm_bound(W.to_dense(), x.t()).t(), torch.bfloat16)


@pytest.mark.gpu
def test_values_needing_a_gradient_are_not_tiled(gen):
    """Training keeps the other kernels (an optimizer step would rebuild the copy), and its
    gradients are right."""
    W = random_csr(64, 128, 0.3, gen, torch.bfloat16, "cuda")
    W.values.requires_grad_()
    x = randn(16, 128, gen=gen, dtype=torch.bfloat16, device="cuda").requires_grad_()
    out = sk.linear(x, W)
    assert _csr_scatter._TILED.get(W.values) is None
    out.float().sum().backward()
    dense = W.to_dense().double()
    ones = torch.ones(16, 64, dtype=torch.float64, device="cuda")
    assert_close(x.grad, ones @ dense, ones.abs() @ dense.abs(), torch.bfloat16)
    with torch.no_grad():  # inference with the same weight takes the kernel
        got = sk.linear(x.detach(), W)
    assert _csr_scatter._TILED.get(W.values) is not None
    assert_close(got, _want(W, x.detach()), spmm_bound(dense, x.detach().t()).t(),
                 torch.bfloat16)  # fmt: skip


@pytest.mark.gpu
def test_forced_on_values_not_prepared(gen):
    """backend="scatter" builds the copy itself, at any token count."""
    W = random_csr(70, 90, 0.5, gen, torch.float16, "cuda")
    B = randn(90, 3, gen=gen, dtype=torch.float16, device="cuda")
    got = spmm_csr_raw(W.row_offsets, W.column_indices, W.values.clone(), B, None,
                                   None, "none", backend="scatter")  # fmt: skip
    assert_close(got, W.to_dense().double() @ B.double(), spmm_bound(W.to_dense(), B),
                 torch.float16)  # fmt: skip


@pytest.mark.gpu
def test_inference_mode_weights(gen):
    """A weight made under inference_mode (no version counter) takes the other kernels, or
    this one when forced, with its copy built for the call; both products are right."""
    with torch.inference_mode():
        W = random_csr(130, 200, 0.3, gen, torch.bfloat16, "cuda")
        x = randn(16, 200, gen=gen, dtype=torch.bfloat16, device="cuda")
        bound = spmm_bound(W.to_dense(), x.t()).t()
        for backend in (None, "scatter"):
            got = sk.linear(x, W, backend=backend)
            assert_close(got, _want(W, x), bound, torch.bfloat16)
        assert _csr_scatter._TILED.get(W.values) is None


@pytest.mark.gpu
def test_nothing_stored(gen):
    """A weight with no stored entry is not tiled; its product is zeros plus the bias."""
    W = random_csr(70, 90, 0.0, gen, torch.bfloat16, "cuda")
    x = randn(16, 90, gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(70, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = sk.linear(x, W, bias)
    assert _csr_scatter._TILED.get(W.values) is None
    torch.testing.assert_close(got, bias.expand(16, 70))


@pytest.mark.gpu
def test_a_cuda_graph_after_an_eager_call(gen):
    """The tiled copy is built by the eager call, outside the capture; the graph replays the
    scatter kernel on new inputs."""
    W = random_csr(130, 200, 0.3, gen, torch.bfloat16, "cuda")
    x = randn(16, 200, gen=gen, dtype=torch.bfloat16, device="cuda")
    sk.linear(x, W)
    assert _csr_scatter._TILED.get(W.values) is not None
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        sk.linear(x, W)  # warm-up on the capture's stream
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = sk.linear(x, W)
    x.copy_(randn(16, 200, gen=gen, dtype=torch.bfloat16, device="cuda"))
    out.fill_(float("nan"))
    graph.replay()
    assert_close(out, _want(W, x), spmm_bound(W.to_dense(), x.t()).t(), torch.bfloat16)


def test_reasons_take_a_symbolic_density():
    """A compiled backward's density can be a SymFloat (its transposed pattern's size made
    dynamic); the reasons once formatted it with a spec a SymFloat refuses (TypeError inside
    inductor: test_compiled_llama_step_matches_eager_on_gpu at 70%, 80 and 512 tokens)."""
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    nnz = env.create_symintnode(env.create_symbol(3000, ConstantSource("nnz")), hint=3000)
    density = nnz / 10000
    assert isinstance(density, torch.SymFloat)
    facts = dict(n=80, density=density, rows=100, k=100, batch=1, b_dim=2, values_dim=1)
    found = _csr_scatter.reasons(
        _dispatch.Problem(torch.device("cuda"), torch.bfloat16, facts), False
    )
    assert any("at density" in reason and "scatter" in reason for reason in found)
