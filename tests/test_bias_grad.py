"""bias_grad: the product's gradient summed over tokens and batch, against float64 sums; on
the GPU the 16-bit GEMV against torch's sums in the same dtype."""

import pytest
import torch

from _helpers import randn
from sparsekernels.ops._bias_grad import bias_grad


@pytest.mark.parametrize("shape", [(7, 5), (1, 1), (4, 0), (3, 7, 5), (2, 3, 7, 5)])
def test_sums_over_tokens_and_batch(shape, gen):
    g = randn(*shape, gen=gen)
    want = g.sum(dim=-1).reshape(-1, shape[-2]).sum(0) if g.numel() else g.new_zeros(shape[-2])
    torch.testing.assert_close(bias_grad(g), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(bias_grad(g.mT.contiguous().mT), want, rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens,cols", [(8192, 1536), (1000, 77), (1, 64), (0, 64)])
def test_gpu_gemv_matches_the_sums(tokens, cols, dtype, gen):
    """A linear's (cols, tokens) gradient view of a (tokens, cols) tensor, as spmm sees it."""
    grad = randn(tokens, cols, gen=gen, dtype=dtype, device="cuda")
    got = bias_grad(grad.t())
    want = grad.double().sum(0)
    assert got.dtype == dtype and got.shape == (cols,)
    scale = grad.double().abs().sum(0).max().clamp_min(1.0)
    assert ((got.double() - want).abs().max() / scale) < 1e-2


@pytest.mark.gpu
def test_gpu_ones_are_kept_and_captured_calls_make_their_own(gen):
    """Repeat calls reuse one ones vector (fresh gradients each call, never zeros); a call
    inside a CUDA graph capture makes its own and the graph's replays stay right."""
    from sparsekernels.ops import _bias_grad

    for _ in range(2):
        grad = randn(300, 40, gen=gen, dtype=torch.bfloat16, device="cuda")
        got = bias_grad(grad.t())
        torch.testing.assert_close(got.double(), grad.double().sum(0), rtol=2e-2, atol=1e-1)
    key = (300, torch.bfloat16, torch.device("cuda", torch.cuda.current_device()))
    kept = _bias_grad._ONES.get(key)
    assert kept is not None and bool((kept == 1).all())
    static = randn(300, 40, gen=gen, dtype=torch.bfloat16, device="cuda")
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        bias_grad(static.t())  # (warm-up outside the capture, as torch's docs do it)
        with torch.cuda.graph(graph):
            out = bias_grad(static.t())
    torch.cuda.current_stream().wait_stream(stream)
    for _ in range(2):
        static.copy_(randn(300, 40, gen=gen, dtype=torch.bfloat16, device="cuda"))
        graph.replay()
        torch.testing.assert_close(out.double(), static.double().sum(0), rtol=2e-2, atol=1e-1)
    assert _bias_grad._ONES.get(key) is kept


def test_traced_calls_keep_no_ones():
    """While torch.compile traces (fake CUDA tensors, here without a GPU), the ones are made in
    the trace and never kept: a kept fake one met by a later trace (the backward's, or another
    graph's) is a tensor that trace never made, and inductor raised on it (a GPU test,
    test_layers_compile_with_fullgraph_on_cuda, at 1 token 2:8)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from sparsekernels.ops import _bias_grad

    kept = dict(_bias_grad._ONES)
    with FakeTensorMode():
        g = torch.empty(3, 5, device="cuda", dtype=torch.bfloat16)
        assert _bias_grad.bias_grad(g).shape == (3,)
    assert kept == _bias_grad._ONES
