"""linear's few-token N:M routes where the decode kernel's 8-row step spilled (0.02-0.6x dense,
benchmarks/sweeps/nm_route_cliffs.py): each case through linear compiled on the GPU, the kernel
it takes and its product against float64; and the fp32 size rule."""

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, randn, random_nm, spmm_bound

BF16 = torch.bfloat16


def _linear_checked(W, tokens, dtype):
    gen = torch.Generator().manual_seed(0)
    x = randn(tokens, W.shape[1], gen=gen, dtype=dtype, device="cuda")
    bias = randn(W.shape[0], gen=gen, dtype=dtype, device="cuda")
    got = sk.linear(x, W, bias)
    want = x.double() @ W.to_dense().double().t() + bias.double()
    assert_close(got, want, spmm_bound(x, W.to_dense().t()) + bias.double().abs(), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("n", "m", "vector", "block", "tokens", "dtype"),
    [(4, 8, 8, 4, 12, BF16), (4, 16, 8, 4, 16, BF16), (4, 8, 16, 4, 9, BF16),
     (4, 8, 8, 4, 4, BF16), (4, 8, 8, 1, 12, BF16), (4, 8, 16, 1, 16, BF16),
     (4, 8, 16, 1, 8, BF16), (4, 8, 16, 1, 12, torch.float16), (4, 8, 8, 4, 8, torch.float16)],
)  # fmt: skip
def test_few_token_vectors_unpack_on_gpu(n, m, vector, block, tokens, dtype, gen, monkeypatch):
    """Vector- and block-wise 4:8 / 4:16 at 4-16 tokens in bf16 and fp16 take the unpack
    kernel (4096 rows and a vector more: a partial row tile, split-K in 3 ranges); 64-row
    vectors from 5 tokens take the 16-token tensor-core tile instead."""
    from sparsekernels.kernels import spmm_nm_unpack

    calls, launch = [], spmm_nm_unpack.spmm_nm_unpack
    monkeypatch.setattr(
        spmm_nm_unpack, "spmm_nm_unpack", lambda **kw: calls.append(kw["split"]) or launch(**kw)
    )
    rows = 4096 + 64 if vector == 64 else 4096 + 16
    W = random_nm(rows, 2048 + m, n, m, gen, vector, block, dtype, "cuda")
    _linear_checked(W, tokens, dtype)
    assert calls == [3]


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("n", "m", "vector", "block", "tokens", "dtype"),
    [(4, 8, 8, 4, 24, torch.float16), (4, 16, 8, 4, 33, BF16), (4, 8, 16, 4, 64, BF16),
     (4, 8, 8, 1, 17, BF16), (4, 8, 16, 1, 40, torch.float16)],
)  # fmt: skip
def test_wider_vectors_unpack_on_gpu(n, m, vector, block, tokens, dtype, gen, monkeypatch):
    """Past 16 tokens the same vectors take the unpack kernel to 64 (the dense backend or the
    vector-wise tensor-core kernel ran them 1.3-3.2x slower), compiled, against float64."""
    from sparsekernels.kernels import spmm_nm_unpack

    calls, launch = [], spmm_nm_unpack.spmm_nm_unpack
    monkeypatch.setattr(
        spmm_nm_unpack, "spmm_nm_unpack", lambda **kw: calls.append(kw["block_n"]) or launch(**kw)
    )
    W = random_nm(4096 + 16, 2048 + m, n, m, gen, vector, block, dtype, "cuda")
    _linear_checked(W, tokens, dtype)
    assert len(calls) == 1


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("dtype", "n", "m", "vector", "tokens"),
    [(torch.float32, 2, 8, 8, 12), (torch.float32, 4, 8, 64, 4), (torch.float16, 3, 8, 16, 12),
     (BF16, 3, 8, 8, 12)],
)  # fmt: skip
def test_vectors_decode_on_four_warps_on_gpu(dtype, n, m, vector, tokens, gen, monkeypatch):
    """Where no faster kernel takes them, vector-wise rows past 8 tokens (16-bit) or 2 (fp32)
    take the decode kernel's 4-row tile on four warps, compiled."""
    from sparsekernels.kernels import spmm_nm_decode

    launches, launch = [], spmm_nm_decode.spmm_nm_decode
    monkeypatch.setattr(
        spmm_nm_decode, "spmm_nm_decode", lambda **kw: launches.append(kw) or launch(**kw)
    )
    W = random_nm(4096, 2048 + m, n, m, gen, vector, 1, dtype, "cuda")
    _linear_checked(W, tokens, dtype)
    assert [(k["block_m"], k["num_warps"]) for k in launches] == [(4, 4)]


@pytest.mark.gpu
@pytest.mark.parametrize(("rows", "tokens"), [(4096, 1), (4096 + 64, 8), (1088, 4)])
def test_wide_blocks_decode_on_four_rows_on_gpu(rows, tokens, gen, monkeypatch):
    """bf16 64:128 with blocks of 64 columns at 1-8 tokens on fewer than 8192 rows takes the
    decode kernel's 4-row one-warp tile, compiled, against float64."""
    from sparsekernels.kernels import spmm_nm_decode

    launches, launch = [], spmm_nm_decode.spmm_nm_decode
    monkeypatch.setattr(
        spmm_nm_decode, "spmm_nm_decode", lambda **kw: launches.append(kw) or launch(**kw)
    )
    W = random_nm(rows, 2048 + 128, 64, 128, gen, 64, 64, BF16, "cuda")
    _linear_checked(W, tokens, BF16)
    assert [(k["block_m"], k["num_warps"]) for k in launches] == [(4, 1)]


@pytest.mark.gpu
@pytest.mark.parametrize(("rows", "tokens"), [(8192, 8), (8192, 12), (4096, 16)])
def test_fp32_few_token_tiles_on_gpu(rows, tokens, gen, monkeypatch):
    """fp32 4:8 v = 64 at 8-16 tokens takes the tensor-core kernel's few-token tiles (tall
    weights below 16 tokens, any at 16), ieee dots, against float64."""
    from sparsekernels.kernels import spmm_nm

    launches, launch = [], spmm_nm.spmm_nm
    monkeypatch.setattr(spmm_nm, "spmm_nm", lambda **kw: launches.append(kw) or launch(**kw))
    W = random_nm(rows, 2048 + 8, 4, 8, gen, 64, 1, torch.float32, "cuda")
    _linear_checked(W, tokens, torch.float32)
    assert [(k["use_dot"], k["block_n"]) for k in launches] == [(True, 16)]


@pytest.mark.gpu
@pytest.mark.parametrize(("vector", "tokens", "warps"), [(1, 12, 2), (4, 24, 4), (1, 32, 4)])
def test_fp32_decode_on_more_warps_on_gpu(vector, tokens, warps, gen, monkeypatch):
    """fp32 1:8 at 9-32 tokens takes the decode kernel's 2-row tile on two warps to 16 padded
    columns and four to 32 (one warp spilled and ran 3-9x slower), compiled, against float64
    (an odd row count, a partial last step)."""
    from sparsekernels.kernels import spmm_nm_decode

    launches, launch = [], spmm_nm_decode.spmm_nm_decode
    monkeypatch.setattr(
        spmm_nm_decode, "spmm_nm_decode", lambda **kw: launches.append(kw) or launch(**kw)
    )
    W = random_nm(4096 + 4 * vector + (vector == 1), 2048 + 8, 1, 8, gen, vector, 1,
                  torch.float32, "cuda")  # fmt: skip
    _linear_checked(W, tokens, torch.float32)
    assert [(k["block_m"], k["num_warps"]) for k in launches] == [(2, warps)]


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("n", "m", "vector", "tokens", "dtype", "warps"),
    [(2, 16, 8, 5, BF16, 2), (1, 32, 8, 8, BF16, 2), (8, 32, 32, 7, torch.float16, 2),
     (2, 16, 8, 4, BF16, 1)],
)  # fmt: skip
def test_vectors_decode_eight_rows_on_two_warps_on_gpu(n, m, vector, tokens, dtype, warps, gen,
                                                       monkeypatch):  # fmt: skip
    """16-bit vector-wise rows at 5-8 tokens take the decode kernel's 8-row tile on two warps
    (one spilled and ran up to 1.5x slower), to 4 tokens on one, compiled, against float64
    (a partial last row tile and step)."""
    from sparsekernels.kernels import spmm_nm_decode

    launches, launch = [], spmm_nm_decode.spmm_nm_decode
    monkeypatch.setattr(
        spmm_nm_decode, "spmm_nm_decode", lambda **kw: launches.append(kw) or launch(**kw)
    )
    W = random_nm(4096 + vector, 2048 + m, n, m, gen, vector, 1, dtype, "cuda")
    _linear_checked(W, tokens, dtype)
    assert [(k["block_m"], k["num_warps"]) for k in launches] == [(8, warps)]


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("n", "m", "vector", "tokens", "dtype", "slots"),
    [(4, 8, 8, 1, BF16, 1024), (16, 32, 64, 2, torch.float16, 1024), (4, 8, 64, 3, BF16, 512),
     (4, 8, 8, 4, BF16, 512)],
)  # fmt: skip
def test_half_dense_few_rows_decode_wide_steps_on_gpu(n, m, vector, tokens, dtype, slots, gen,
                                                      monkeypatch):  # fmt: skip
    """16-bit half-dense vector-wise rows on at most 4096 rows at 1-4 tokens take the 8-row
    tile over 1024 / 512 slots a step on four warps, compiled, against float64 (a partial last
    row tile and step)."""
    from sparsekernels.kernels import spmm_nm_decode

    launches, launch = [], spmm_nm_decode.spmm_nm_decode
    monkeypatch.setattr(
        spmm_nm_decode, "spmm_nm_decode", lambda **kw: launches.append(kw) or launch(**kw)
    )
    W = random_nm(4096 - vector, 2048 + m, n, m, gen, vector, 1, dtype, "cuda")
    _linear_checked(W, tokens, dtype)
    got = [(k["block_m"], k["num_warps"]) for k in launches]
    assert got == [(8, 4)]


def test_half_dense_few_rows_wide_steps_rule():
    """The wide steps only for half-dense 16-bit weights on at most 4096 rows of fewer than 24
    steps of 256 slots at 1-4 tokens."""
    from sparsekernels.kernels.nm_decode_tuning import spmm_nm_decode_config as config

    assert config(1, 8, 4096, 1024, 4, 8) == (wide := config(2, 64, 4096, 1024, 16, 32))
    assert (wide.block_m, wide.block_slots, wide.num_warps) == (8, 1024, 4)
    assert config(4, 8, 64, 1024, 4, 8).block_slots == 512
    assert config(8, 8, 4096, 1024, 4, 8).block_slots == 256  # 8 tokens
    assert config(1, 8, 14336, 1024, 4, 8).block_slots == 256  # many rows
    assert config(1, 8, 4096, 7168, 4, 8).block_slots == 256  # long rows (split-K's)
    assert config(1, 8, 4096, 512, 2, 8).block_slots == 256  # 2:8
    assert config(1, 8, 4096, 1024, 4, 8, itemsize=4).block_slots == 256  # fp32


def test_fp32_sizes_only_at_8_to_16_tokens():
    """fp32 gives spmm_nm_config the weight's size at 8-16 tokens only (its few-token tiles
    lost at 1-4 tokens), and not where the small weights' tiles (untimed in fp32) would take
    the product; 16-bit values always."""
    from sparsekernels.ops._triton_nm import _size_for_tiles

    fp32 = torch.float32
    assert [_size_for_tiles(8192, 4096, t, 64, fp32) for t in (1, 4, 7, 17)] == [(None, None)] * 4
    assert [_size_for_tiles(8192, 4096, t, 64, fp32) for t in (8, 12, 16)] == [(8192, 4096)] * 3
    assert _size_for_tiles(384, 1536, 16, 64, fp32) == (None, None)  # the small weights' tiles
    assert _size_for_tiles(384, 1536, 16, 64, BF16) == (384, 1536)
    assert _size_for_tiles(8192, 4096, 12, 64, torch.float64) == (None, None)
