"""The tensor-core N:M kernel (m tl.dot calls a step, one per position of a group, on the
compressed tile): in the interpreter on CPU (small shapes, float32 and float16) and compiled on
CUDA (gpu), against float64 references with poisoned outputs."""

import pytest
import torch

from _helpers import assert_close, randn, random_nm, spmm_bound
from sparsekernels.kernels.spmm_nm_decode import packed_bits
from sparsekernels.kernels.spmm_nm_expand import spmm_nm_expand, supports

DEVICES = [
    pytest.param("cpu", id="interpreter"),
    pytest.param("cuda", id="cuda", marks=pytest.mark.gpu),
]
# (n, m, vector, block): element-wise, 1:2, block-wise, vector-wise, a wide group, a block as
# wide as n, and an m that is not a power of two.
PATTERNS = [
    (2, 8, 1, 1),
    (1, 2, 1, 1),
    (4, 16, 1, 2),
    (2, 4, 4, 1),
    (1, 32, 1, 1),
    (4, 8, 2, 4),
    (2, 6, 1, 1),
]


def _skip_interpreter_on_gpu_machine(device):
    if device == "cpu" and torch.cuda.is_available():
        pytest.skip("the interpreter runs only on machines without CUDA")


def _launch_poisoned(W, B, tiles=(16, 16, 16), bias=None, activation="none"):
    """tiles: (rows, compressed slots, tokens) a step."""
    block_m, block_s, block_n = tiles
    out = torch.full((W.shape[0], B.shape[1]), float("nan"), dtype=B.dtype, device=B.device)
    bits = packed_bits(W.m, W.block)
    spmm_nm_expand(
        values=W.values,
        words=W.packed_indices(bits),
        bits=bits,
        b=B,
        bias=bias,
        out=out,
        n=W.n,
        m=W.m,
        vector=W.vector,
        block=W.block,
        activation=activation,
        block_m=block_m,
        block_g=max(1, block_s // W.n),
        block_n=block_n,
        num_warps=4,
        num_stages=2,
    )
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("N", [1, 3, 16, 20])
def test_every_element_written(device, pattern, N, gen):
    _skip_interpreter_on_gpu_machine(device)
    n, m, vector, block = pattern
    rows = 2 * vector + 17  # a partial last tile of rows
    cols = 5 * m  # groups not a multiple of the tile's
    W = random_nm(rows, cols, n, m, gen, vector, block, torch.float32, device)
    x = randn(N, cols, gen=gen, dtype=torch.float32, device=device)
    for B in (x.t(), x.t().contiguous()):  # linear's x^T and a row-major B
        got = _launch_poisoned(W, B)
        assert_close(got, W.to_dense().double() @ B.double(), spmm_bound(W.to_dense(), B), B.dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_bias_activation_and_wider_tiles(device, dtype, gen):
    _skip_interpreter_on_gpu_machine(device)
    W = random_nm(70, 128, 2, 8, gen, 1, 1, dtype, device)
    B = randn(128, 24, gen=gen, dtype=dtype, device=device)
    bias = randn(70, gen=gen, dtype=dtype, device=device)
    got = _launch_poisoned(W, B, (32, 64, 16), bias, "gelu")
    want = torch.nn.functional.gelu(W.to_dense().double() @ B.double() + bias.double()[:, None])
    bound = spmm_bound(W.to_dense(), B) + bias.double().abs()[:, None]
    assert_close(got, want, bound, dtype)


def test_supports_and_tile_floor(gen):
    assert supports(2, 8, 4096, torch.bfloat16) and not supports(3, 8, 4096, torch.bfloat16)
    assert supports(2, 6, 4096, torch.float16)  # any m: one dot per position
    assert not supports(2, 8, 2**31, torch.bfloat16) and not supports(2, 8, 64, torch.float64)
    W = random_nm(16, 16, 2, 8, gen, 1, 1, torch.float32)
    with pytest.raises(ValueError, match="at least 16"):
        _launch_poisoned(W, randn(16, 4, gen=gen, dtype=torch.float32), (16, 8, 16))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("pattern", [(1, 8, 1, 1), (2, 8, 1, 1), (2, 4, 1, 1), (16, 32, 64, 1)])
def test_llm_shape_on_gpu(dtype, pattern, gen):
    n, m, vector, block = pattern
    W = random_nm(4096, 1024, n, m, gen, vector, block, dtype, "cuda")
    B = randn(1024, 16, gen=gen, dtype=dtype, device="cuda")
    got = _launch_poisoned(W, B, (64, 64, 16))
    assert_close(got, W.to_dense().double() @ B.double(), spmm_bound(W.to_dense(), B), dtype)


@pytest.mark.parametrize(("tokens", "expands"), [(4, False), (12, True), (40, True)])
def test_linear_routes_by_expand_min_n(tokens, expands, gen, monkeypatch):
    """With tuning.EXPAND_MIN_N set, linear takes this kernel from that many tokens on (off by
    default until an H200 sweep sets it); every route gives the product."""
    import sparsekernels as sk
    from sparsekernels.kernels import spmm_nm_expand, tuning

    assert tuning.EXPAND_MIN_N is None  # off until measured
    monkeypatch.setattr(tuning, "EXPAND_MIN_N", 8)
    calls = []
    launch = spmm_nm_expand.spmm_nm_expand
    monkeypatch.setattr(
        spmm_nm_expand, "spmm_nm_expand", lambda **kw: calls.append(1) or launch(**kw)
    )
    W = random_nm(24, 64, 2, 8, gen, 1, 1, torch.float32)
    x = randn(tokens, 64, gen=gen, dtype=torch.float32)
    got = sk.linear(x, W, backend="triton")
    assert got.is_contiguous()
    assert_close(got, x.double() @ W.to_dense().double().t(), spmm_bound(x, W.to_dense().t()),
                 torch.float32)  # fmt: skip
    assert bool(calls) == expands
