"""The sparse-tensor-core N:M kernel (mma.sp through inline PTX, Gluon, sm_80+): compiled on
the H200 against float64 references with poisoned outputs. On the CPU only its argument
checks run (Gluon has no interpreter; test_compile_hopper.py compiles it for sm_90 here)."""

import pytest
import torch

from _helpers import assert_close, randn, random_nm, spmm_bound
from sparsekernels.kernels.spmm_nm_decode import packed_bits
from sparsekernels.kernels.spmm_nm_mma_sp import spmm_nm_mma_sp, supports
from sparsekernels.ops._triton_nm import packed_words

TILES = [(2, 4, 2), (1, 2, 1), (2, 1, 4), (1, 8, 2)]  # (m16 tiles a warp, k32 blocks, n8 tiles)


def _launch_poisoned(W, B, tile=(2, 4, 2), bias=None, activation="none", split=1, fused=True,
                     **extra):  # fmt: skip
    bits = packed_bits(W.m, 1)
    out = torch.full((W.shape[0], B.shape[1]), float("nan"), dtype=B.dtype, device=B.device)
    m_tiles, blocks, n_tiles = tile
    spmm_nm_mma_sp(
        values=W.values, words=packed_words(W.indices, bits), b=B, bias=bias, out=out,
        vector=W.vector, activation=activation, m_tiles=m_tiles, blocks=blocks,
        n_tiles=n_tiles, split=split, fused=fused, **extra,
    )  # fmt: skip
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("tokens", [1, 5, 16, 17])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("vector", [1, 3])
def test_every_element_written(tile, tokens, dtype, vector, gen):
    """A partial last row tile; walks whose last step is partial (masked, K off the k32
    block too), of full steps only, and of one group; x^T as linear passes it and a
    row-major B (copied K contiguous); rows sharing offsets in vectors."""
    step = 8 * tile[1]
    for groups in (3 * step + 5, 2 * step, 1):
        W = random_nm(2 * vector + 67, groups * 4, 2, 4, gen, vector, 1, dtype, "cuda")
        x = randn(tokens, groups * 4, gen=gen, dtype=dtype, device="cuda")
        for B in (x.t(), x.t().contiguous()):
            got = _launch_poisoned(W, B, tile)
            assert_close(
                got, W.to_dense().double() @ B.double(), spmm_bound(W.to_dense(), B), dtype
            )


@pytest.mark.gpu
@pytest.mark.parametrize("ordered", [True, False])
def test_metadata_variants(ordered, gen):
    """mma.sp with and without ::ordered_metadata (the offsets rise within a group)."""
    W = random_nm(300, 40 * 32, 2, 4, gen, 1, 1, torch.bfloat16, "cuda")
    x = randn(30, 40 * 32, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = _launch_poisoned(W, x.t(), ordered=ordered)
    want = W.to_dense().double() @ x.t().double()
    assert_close(got, want, spmm_bound(W.to_dense(), x.t()), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("split", [1, 3, 64])
@pytest.mark.parametrize("fused", [True, False])
def test_bias_activation_and_split(split, fused, gen):
    """Split-K sums each range into the float32 workspace, then bias and activation in the
    last range of a tile to arrive (fused) or a second kernel; at 64 more ranges are asked
    for than steps (only non-empty ones launch)."""
    W = random_nm(137, 13 * 128, 2, 4, gen, 1, 1, torch.bfloat16, "cuda")
    B = randn(13 * 128, 5, gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(137, gen=gen, dtype=torch.bfloat16, device="cuda")
    want = torch.nn.functional.gelu(W.to_dense().double() @ B.double() + bias.double()[:, None])
    bound = spmm_bound(W.to_dense(), B) + bias.double().abs()[:, None]
    got = _launch_poisoned(W, B, bias=bias, activation="gelu", split=split, fused=fused)
    assert_close(got, want, bound, torch.bfloat16)


@pytest.mark.gpu
def test_llm_shape(gen):
    """A weight as tall as an LLM layer's (4096 deep), rows off the tile, K off the step."""
    W = random_nm(1000 + 5, 4096 + 8 * 4, 2, 4, gen, 1, 1, torch.bfloat16, "cuda")
    x = randn(16, 4096 + 8 * 4, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = _launch_poisoned(W, x.t(), split=4)
    want = W.to_dense().double() @ x.t().double()
    assert_close(got, want, spmm_bound(W.to_dense(), x.t()), torch.bfloat16)


def test_supports():
    assert not supports(2, 4, 1, torch.bfloat16, 4096, torch.device("cpu"))  # no interpreter
    if torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0):
        gpu = torch.device("cuda")
        assert supports(2, 4, 1, torch.bfloat16, 4096, gpu)
        assert supports(2, 4, 1, torch.float16, 4096, gpu)
        assert not supports(2, 8, 1, torch.bfloat16, 4096, gpu)
        assert not supports(1, 4, 1, torch.bfloat16, 4096, gpu)
        assert not supports(2, 4, 2, torch.bfloat16, 4096, gpu)  # block-wise
        assert not supports(2, 4, 1, torch.float32, 4096, gpu)
