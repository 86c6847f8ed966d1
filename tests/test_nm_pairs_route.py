"""linear's route through the condensed-K pairs kernel (kernels/spmm_nm_pairs.py): 8-row
vectors at m = 16 / 32 and 17-48 tokens in bf16 and fp16 (kernels/nm_pairs_tuning), in the
interpreter on a small weight with the rule widened to it, and compiled on the GPU at the shapes
it holds for, with gradients, against float64."""

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, randn, random_nm, spmm_bound
from sparsekernels.kernels.nm_pairs_tuning import spmm_nm_pairs_config

BF16 = torch.bfloat16


def _tile(tokens, n, m, rows, k, vector=8, dtype=BF16, block=1):
    config = spmm_nm_pairs_config(tokens, n, m, vector, block, dtype, rows, k)
    return None if config is None else (config.pairs, config.block_s, config.split)


def test_pairs_rule():
    """The patterns, tokens, dtype and vectors timed; the blocked step everywhere, its tile by
    slots and tokens."""
    assert [_tile(t, 4, 32, 14336, 4096) for t in (16, 17, 48, 49)] == [
        None,
        (2, 64, 1),
        (2, 64, 1),
        None,
    ]
    assert _tile(24, 1, 32, 4096, 4096) == (2, 64, 1)
    assert _tile(40, 1, 32, 4096, 4096) == (2, 64, 1)
    assert _tile(24, 4, 16, 4096, 4096) == (2, 64, 1)  # 1024 slots
    assert _tile(40, 4, 16, 4096, 4096) == (2, 64, 1)  # faster than densifying now
    assert _tile(24, 4, 32, 4096, 14336) == (2, 128, 1)  # 1792 slots, to 32 tokens
    assert _tile(40, 4, 32, 4096, 14336) == (4, 64, 2)  # past 32 tokens: K split in two
    assert _tile(24, 1, 16, 4096, 14336) == (2, 64, 1)  # 896 slots
    assert _tile(40, 4, 16, 4096, 14336) == (4, 64, 2)
    assert _tile(24, 2, 16, 4096, 4096) == (2, 64, 1)  # faster than its 2:8 copy now
    assert _tile(24, 2, 16, 14336, 4096) == (2, 64, 1)
    assert _tile(24, 4, 32, 14336, 4096, vector=16) is None  # untimed
    assert _tile(24, 4, 32, 14336, 4096, vector=1) is None
    assert _tile(24, 4, 32, 14336, 4096, dtype=torch.float16) == (2, 64, 1)
    assert _tile(24, 4, 32, 14336, 4096, dtype=torch.float32) is None
    assert _tile(24, 4, 32, 14336, 4096, block=2) is None
    assert _tile(24, 2, 8, 14336, 4096) is None
    config = spmm_nm_pairs_config(24, 4, 32, 8, 1, BF16, 14336, 4096)
    assert (config.block_n, config.num_warps, config.num_stages, config.blocked) == (32, 2, 5, True)
    wide = spmm_nm_pairs_config(24, 4, 32, 8, 1, BF16, 4096, 14336)
    assert (wide.num_warps, wide.blocked) == (4, True)
    assert spmm_nm_pairs_config(33, 4, 32, 8, 1, BF16, 14336, 4096).block_n == 64


def test_dense_preference_leaves_the_pairs_kernel_its_products():
    """4:16 densified at 17-48 tokens; where the pairs kernel measured faster (8-row vectors)
    it stays sparse."""
    from sparsekernels.ops._dense import nm_prefers_dense
    from sparsekernels.ops.spmm import nm_problem

    def prefers(tokens, rows, k, vector):
        values = torch.empty(rows, k // 4, dtype=BF16)
        b = torch.empty(k, tokens, dtype=BF16)
        return nm_prefers_dense(nm_problem(values, b, 4, 16, vector, 1, False))

    assert not prefers(24, 14336, 4096, 8)
    assert not prefers(40, 4096, 4096, 8)
    assert prefers(40, 4096, 4096, 1)


def _spy_on_pairs(monkeypatch):
    from sparsekernels.ops import _triton_nm

    seen, launch = [], _triton_nm.pairs.spmm_nm_pairs
    monkeypatch.setattr(
        _triton_nm.pairs, "spmm_nm_pairs", lambda **kw: seen.append(kw["pairs"]) or launch(**kw)
    )
    return seen


@pytest.mark.parametrize(("n", "m", "tokens"), [(4, 32, 17), (1, 16, 40)])
def test_triton_route_takes_the_pairs_kernel(n, m, tokens, gen, monkeypatch):
    """The Triton backend on a small weight: a partial vector pair, bias and GELU in the
    epilogue, the blocked step, against float64; at 16 tokens the route before."""
    seen = _spy_on_pairs(monkeypatch)
    W = random_nm(72 + 8, m * 5, n, m, gen, 8, 1, BF16)
    bias = randn(W.shape[0], gen=gen, dtype=BF16)
    for n_tokens in (tokens, 16):
        x = randn(n_tokens, W.shape[1], gen=gen, dtype=BF16)
        got = sk.spmm(W, x.t(), bias, "gelu", backend="triton")  # (x^T: linear's B)
        dense = W.to_dense().double()
        want = torch.nn.functional.gelu(dense @ x.double().t() + bias.double()[:, None])
        bound = spmm_bound(W.to_dense(), x.t()) + bias.double().abs()[:, None]
        assert_close(got, want, bound, BF16)
    assert seen == [2]


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("n", "m", "rows", "k", "tokens", "dtype"),
    [(4, 32, 8200, 1024, 24, BF16), (1, 32, 4104, 2048, 40, BF16), (4, 16, 4104, 6144, 17, BF16),
     (2, 16, 8200, 1024, 48, BF16), (4, 16, 4104, 6144, 40, BF16), (2, 16, 4104, 2048, 24, BF16),
     (4, 32, 8200, 1024, 40, torch.float16), (1, 16, 4104, 6144, 24, torch.float16)],
)  # fmt: skip
def test_linear_takes_the_pairs_kernel_on_gpu(n, m, rows, k, tokens, dtype, gen, monkeypatch):
    """Through linear's whole route on the GPU (each tile: 2 pairs on 2 warps, 2 pairs x 128
    slots, 4 pairs with K split in two; 2:16 on a 4096-row weight),
    compiled, against float64; the gradients of x and the kept values as the masked dense
    product's."""
    seen = _spy_on_pairs(monkeypatch)
    W = random_nm(rows, k, n, m, gen, 8, 1, dtype, "cuda")
    x = randn(tokens, k, gen=gen, dtype=dtype, device="cuda")
    dense = W.to_dense()
    got = sk.linear(x, W)
    assert_close(got, x.double() @ dense.double().t(), spmm_bound(x, dense.t()), dtype)
    assert len(seen) == 1
    values = W.values.clone().requires_grad_()
    x.requires_grad_()
    grad = randn(tokens, rows, gen=gen, dtype=dtype, device="cuda")
    sk.linear(x, W.with_values(values)).backward(grad)
    x64, values64 = x.detach().double().requires_grad_(), values.detach().double()
    values64.requires_grad_()
    (x64 @ W.with_values(values64).to_dense().t()).backward(grad.double())
    assert_close(x.grad, x64.grad, spmm_bound(grad, dense), dtype)
    bound = spmm_bound(grad.t(), x).gather(1, W.column_indices())
    assert_close(values.grad, values64.grad, bound, dtype)
