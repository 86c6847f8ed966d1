"""GPU routes against hazards a reading of their launch code found (fiftieth session): a bias
with a stride, two CSR weights sharing one column tensor, weights moved or swapped through
`.data`, and tensors on a GPU other than the current one. Every product against float64."""

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, random_csr, spmm_bound
from sparsekernels.kernels import csr_lines_tuning


def _want(W, x, bias=None):
    dense = W.to_dense().double()
    want = x.double() @ dense.t() + (0 if bias is None else bias.double())
    bound = spmm_bound(x, W.to_dense().t()) + (0 if bias is None else bias.double().abs())
    return want, bound


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 4, 16, 48])
def test_a_strided_bias_on_every_csr_route(tokens, gen):
    """The scatter kernel's epilogue read its bias with unit stride (8-64 tokens)."""
    W = random_csr(4096, 4096, 0.3, gen, torch.bfloat16, "cuda")
    x = torch.randn(tokens, 4096, generator=gen).to("cuda", torch.bfloat16)
    wide = torch.randn(4096, 3, generator=gen).to("cuda", torch.bfloat16)
    bias = wide[:, 1]  # stride 3
    want, bound = _want(W, x, bias)
    for _ in range(3):  # (first call, its plan, a replay)
        assert_close(sk.linear(x, W, bias), want, bound, torch.bfloat16)


@pytest.mark.gpu
def test_two_weights_sharing_their_columns(gen, monkeypatch):
    """The line layout was found by the column tensor alone: another weight with the same
    columns but other row offsets took the first one's layout."""
    monkeypatch.setattr(csr_lines_tuning, "CSR_LINES_MIN_NNZ", 0)
    monkeypatch.setattr(csr_lines_tuning, "CSR_LINES_MIN_ROWS", 0)
    columns = torch.arange(0, 4096, 3, device="cuda", dtype=torch.int16)  # 1366 a row
    values = torch.randn(2 * columns.numel(), generator=gen).to("cuda", torch.bfloat16)
    both = torch.cat([columns, columns])
    first = sk.CSRMatrix(torch.tensor([0, 1366, 2732], device="cuda"), both, values, (2, 4096))
    quarters = torch.tensor([0, 683, 1366, 2049, 2732], device="cuda")
    second = sk.CSRMatrix(quarters, both, values, (4, 4096))  # the same columns, other rows
    x = torch.randn(1, 4096, generator=gen).to("cuda", torch.bfloat16)
    for W in (first, second, first):
        assert_close(sk.linear(x, W), *_want(W, x), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("kwargs", [{"sparsity": 0.7}, {"pattern": "2:8"}, {"pattern": "2:4"}])
@pytest.mark.parametrize("tokens", [1, 16, 600])
def test_values_swapped_or_converted_are_seen(kwargs, tokens, gen):
    """Kept copies (packed values, the scatter kernel's tiles, cuSPARSELt's compressed
    weight) and recorded launches follow `.data` swaps and `.half()`."""
    dense = torch.nn.Linear(512, 304, device="cuda", dtype=torch.bfloat16)
    layer = sk.nn.SparseLinear.from_dense(dense, **kwargs)
    x = torch.randn(tokens, 512, generator=gen).to("cuda", torch.bfloat16)
    with torch.no_grad():
        for _ in range(3):
            layer(x)  # (copies built, plan recorded)
        layer.values.data = torch.randn_like(layer.values) * 0.05
        assert_close(layer(x), *_want(layer.weight, x, layer.bias), torch.bfloat16)
        layer.half()
        xh = x.half()
        for _ in range(2):
            assert_close(layer(xh), *_want(layer.weight, xh, layer.bias), torch.float16)


@pytest.mark.gpu
def test_tensors_on_another_gpu_than_the_current_one(gen):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    torch.cuda.set_device(0)
    for W in (random_csr(4096, 4096, 0.3, gen, torch.bfloat16, "cuda:1"),
              sk.NMMatrix.from_dense(torch.randn(512, 512), 2, 8,
                                     mask=sk.prune.nm_mask(torch.randn(512, 512), 2, 8))
              .to(device="cuda:1", dtype=torch.bfloat16)):  # fmt: skip
        for tokens in (1, 16, 600):
            x = torch.randn(tokens, W.shape[1], generator=gen).to("cuda:1", torch.bfloat16)
            for _ in range(3):
                assert_close(sk.linear(x, W), *_want(W, x), torch.bfloat16)
