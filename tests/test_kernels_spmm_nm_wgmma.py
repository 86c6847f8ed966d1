"""The wgmma N:M kernel (the dense tile built in the tensor cores' operand registers, Gluon,
Hopper only): compiled on the H200 against float64 references with poisoned outputs. On the
CPU only its argument checks run (Gluon has no interpreter; test_compile_hopper.py compiles
it for sm_90 here)."""

import pytest
import torch

from _helpers import assert_close, randn, random_nm, spmm_bound
from sparsekernels.kernels.spmm_nm_decode import packed_bits
from sparsekernels.kernels.spmm_nm_wgmma import spmm_nm_wgmma, supports
from sparsekernels.ops._triton_nm import packed_words

# (n, m, vector, block_g): one word of offsets a lane (1:8, 1:4 at their block_g) or two
# (2:8, 2:4), rows sharing offsets
PATTERNS = [(2, 8, 1, 32), (2, 8, 1, 16), (1, 8, 1, 32), (2, 4, 1, 32), (1, 4, 1, 64),
            (2, 8, 3, 32), (1, 4, 2, 128)]  # fmt: skip


def _launch_poisoned(W, B, block_g, bias=None, activation="none", split=1, block_m=64,
                     block_n=16, fused=True):  # fmt: skip
    bits = packed_bits(W.m, 1)
    out = torch.full((W.shape[0], B.shape[1]), float("nan"), dtype=B.dtype, device=B.device)
    spmm_nm_wgmma(
        values=W.values, words=packed_words(W.indices, bits), bits=bits, b=B, bias=bias,
        out=out, n=W.n, m=W.m, vector=W.vector, activation=activation, block_m=block_m,
        block_g=block_g, block_n=block_n, split=split, fused=fused,
    )  # fmt: skip
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("tokens", [1, 5, 16, 17])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_element_written(pattern, tokens, dtype, gen):
    """A partial last row tile, a walk whose last step is partial (masked) and one of full
    steps only, x^T as linear passes it and a row-major B; two column tiles at 17 tokens."""
    n, m, vector, block_g = pattern
    for groups in (3 * block_g + 5, 2 * block_g, 3):
        W = random_nm(2 * vector + 67, groups * m, n, m, gen, vector, 1, dtype, "cuda")
        x = randn(tokens, groups * m, gen=gen, dtype=dtype, device="cuda")
        for B in (x.t(), x.t().contiguous()):
            got = _launch_poisoned(W, B, block_g)
            assert_close(
                got, W.to_dense().double() @ B.double(), spmm_bound(W.to_dense(), B), dtype
            )


@pytest.mark.gpu
@pytest.mark.parametrize("split", [1, 3])
def test_padded_b_columns_are_read_never_stored(split, gen):
    """B may be wider than the product (ops/_layout.aligned_rows' copies of a row-major B):
    its columns past N are read and never reach the output, whatever they hold (here random
    values; the copies hold zeros). 24 tokens in a 32-wide B."""
    W = random_nm(70, 40 * 8, 2, 8, gen, 1, 1, torch.bfloat16, "cuda")
    B = randn(40 * 8, 24, gen=gen, dtype=torch.bfloat16, device="cuda")
    wide = torch.cat([B, randn(40 * 8, 8, gen=gen, dtype=torch.bfloat16, device="cuda")], 1)
    bits = packed_bits(8, 1)
    out = torch.full((70, 24), float("nan"), dtype=torch.bfloat16, device="cuda")
    spmm_nm_wgmma(values=W.values, words=packed_words(W.indices, bits), bits=bits, b=wide,
                  bias=None, out=out, n=2, m=8, vector=1, activation="none", block_m=64,
                  block_g=16, block_n=16, split=split)  # fmt: skip
    assert_close(out, W.to_dense().double() @ B.double(), spmm_bound(W.to_dense(), B),
                 torch.bfloat16)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize(("block_m", "block_n"), [(64, 8), (128, 16), (64, 32), (128, 64)])
def test_tiles(block_m, block_n, gen):
    """Both warpgroup row tiles, wide column tiles and one of 8 tokens (wgmma's narrowest)."""
    W = random_nm(300, 40 * 8, 2, 8, gen, 1, 1, torch.bfloat16, "cuda")
    x = randn(70, 40 * 8, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = _launch_poisoned(W, x.t(), 32, block_m=block_m, block_n=block_n)
    want = W.to_dense().double() @ x.t().double()
    assert_close(got, want, spmm_bound(W.to_dense(), x.t()), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "m", "block_g"), [(2, 8, 32), (1, 8, 32), (2, 4, 32)])
@pytest.mark.parametrize("split", [1, 3, 64])
@pytest.mark.parametrize("fused", [True, False])
def test_bias_activation_and_split(n, m, block_g, split, fused, gen):
    """Split-K sums each range into the float32 workspace, then bias and activation in the
    last range of a tile to arrive (fused) or a second kernel; at 64 more ranges are asked
    for than steps (only non-empty ones launch)."""
    W = random_nm(137, 13 * 32 * m, n, m, gen, 1, 1, torch.bfloat16, "cuda")
    B = randn(13 * 32 * m, 5, gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(137, gen=gen, dtype=torch.bfloat16, device="cuda")
    want = torch.nn.functional.gelu(W.to_dense().double() @ B.double() + bias.double()[:, None])
    bound = spmm_bound(W.to_dense(), B) + bias.double().abs()[:, None]
    got = _launch_poisoned(W, B, block_g, bias, "gelu", split, fused=fused)
    assert_close(got, want, bound, torch.bfloat16)


@pytest.mark.gpu
def test_fused_split_is_deterministic(gen):
    """The last range to arrive sums the planes in plane order whichever it is: the same bits
    as the second kernel's sum, every run, many tiles racing; the counters are left at zero
    for the next launch, and a launch on another stream gets its own."""
    from sparsekernels.kernels import split_k

    W = random_nm(64 * 40 + 3, 4096, 2, 8, gen, 1, 1, torch.bfloat16, "cuda")
    x = randn(40, 4096, gen=gen, dtype=torch.bfloat16, device="cuda")
    first = _launch_poisoned(W, x.t(), 32, split=5, fused=False)
    for _ in range(5):
        assert torch.equal(_launch_poisoned(W, x.t(), 32, split=5), first)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        other = _launch_poisoned(W, x.t(), 32, split=5)
    stream.synchronize()
    assert torch.equal(other, first)
    assert len(split_k._COUNTERS) >= 2
    assert all(int(c.abs().sum()) == 0 for c in split_k._COUNTERS.values())
    assert_close(first, W.to_dense().double() @ x.t().double(),
                 spmm_bound(W.to_dense(), x.t()), torch.bfloat16)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "m"), [(2, 8), (1, 8), (2, 4)])
def test_llm_shape(n, m, gen):
    """A weight as tall as an LLM layer's (4096 deep), rows off the tile, K off the step."""
    W = random_nm(1000 + 5, 4096 + 8 * m, n, m, gen, 1, 1, torch.bfloat16, "cuda")
    x = randn(16, 4096 + 8 * m, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = _launch_poisoned(W, x.t(), 32, split=4)
    want = W.to_dense().double() @ x.t().double()
    assert_close(got, want, spmm_bound(W.to_dense(), x.t()), torch.bfloat16)


def test_supports_and_bad_tiles(gen):
    cpu = torch.device("cpu")
    assert not supports(2, 8, 1, torch.bfloat16, 4096, cpu)  # Gluon: no interpreter
    if torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0):
        gpu = torch.device("cuda")
        assert supports(2, 8, 1, torch.bfloat16, 4096, gpu)
        assert supports(1, 4, 1, torch.float16, 4096, gpu)
        assert not supports(4, 8, 1, torch.bfloat16, 4096, gpu)  # n past 2
        assert not supports(2, 16, 1, torch.bfloat16, 4096, gpu)  # m past 8
        assert not supports(2, 8, 2, torch.bfloat16, 4096, gpu)  # block-wise
        assert not supports(2, 8, 1, torch.float32, 4096, gpu)
    W = random_nm(16, 256, 2, 8, gen, 1, 1, torch.bfloat16)
    x = randn(256, 2, gen=gen, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="block_m must be 64 or 128"):
        _launch_poisoned(W, x, 32, block_m=32)
    with pytest.raises(ValueError, match="block_n"):
        _launch_poisoned(W, x, 32, block_n=12)
    with pytest.raises(ValueError, match="32 or 64 bits of offsets"):
        _launch_poisoned(W, x, 8)  # 2:8: 16 bits a lane
    bits = packed_bits(8, 1)
    out = torch.empty(16, 3, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="at least out's 3 columns"):
        spmm_nm_wgmma(values=W.values, words=packed_words(W.indices, bits), bits=bits, b=x,
                      bias=None, out=out, n=2, m=8, vector=1, activation="none", block_m=64,
                      block_g=32, block_n=16)  # fmt: skip


def test_route_takes_the_measured_window():
    """The measured windows (2:8 at 4-32 tokens, 1:8 at 8-32, 2:4 at 4-32; bf16, fp16 for 2:8)
    on the narrowest column tile that holds the tokens, split to fill one wave of programs
    (132 SMs), each range 4 steps at least; 1:8 and 2:4 past their 8-token window only where
    that splits; vector-wise rows at 17-32 tokens in bf16. Nothing else (1-3 tokens,
    vectors elsewhere, other patterns, fp16 past 2:8)."""
    from sparsekernels.kernels.nm_wgmma_tuning import spmm_nm_wgmma_config

    bf16 = torch.bfloat16

    def tile(tokens, n, m, rows, k, dtype=bf16, vector=1):
        c = spmm_nm_wgmma_config(tokens, n, m, vector, 1, dtype, rows, k, 132)
        return None if c is None else (c.block_m, c.block_g, c.block_n, c.split)

    assert tile(8, 2, 8, 4096, 14336) == (64, 32, 8, 6)  # 396 programs: 3 an SM
    assert tile(4, 2, 8, 14336, 4096) == (64, 32, 8, 1)
    assert tile(16, 2, 8, 4096, 4096) == (64, 32, 16, 4)  # 16 steps: 4 a range
    assert tile(32, 2, 8, 4096, 14336) == (64, 32, 32, 4)  # 2 an SM on 32-token tiles
    assert tile(17, 2, 8, 14336, 4096) == (64, 32, 32, 1)
    assert tile(8, 2, 4, 4096, 14336) == (64, 32, 8, 8)  # 4 an SM, capped at 8
    assert tile(5, 2, 4, 14336, 4096) == (64, 32, 8, 2)
    assert tile(12, 2, 4, 4096, 14336) == (64, 32, 16, 6)
    assert tile(8, 1, 8, 14336, 4096) == (64, 32, 8, 1)
    assert tile(24, 1, 8, 4096, 4096) == (64, 32, 32, 4)
    assert tile(8, 2, 8, 4096, 14336, torch.float16) == (64, 32, 8, 6)
    assert tile(3, 2, 8, 64, 8 * 32) is None  # one step: one range
    assert tile(17, 2, 8, 4096, 14336, bf16, 4) == (64, 32, 32, 4)  # vectors at 17-32
    assert tile(32, 1, 8, 4096, 4096, bf16, 64) == (64, 32, 32, 4)
    for args in [
        (3, 2, 8, 4096, 14336),
        (33, 2, 8, 4096, 14336),
        (4, 1, 8, 4096, 14336),
        (16, 2, 4, 14336, 4096),  # one range: the unpack kernel
        (32, 1, 8, 14336, 4096),
        (16, 1, 8, 4096, 14336, torch.float16),  # not timed
        (16, 2, 8, 4096, 14336, bf16, 2),  # vectors below 17 tokens
        (33, 2, 8, 4096, 14336, bf16, 4),  # past 32
        (24, 2, 8, 4096, 14336, torch.float16, 4),  # in fp16
        (24, 1, 8, 14336, 4096, bf16, 64),  # one range: the unpack kernel
        (24, 2, 8, 2048, 4096, bf16, 4),  # vectors were timed from 4096 rows
        (16, 4, 8, 4096, 14336),
    ]:
        assert tile(*args) is None, args


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("n", "m", "tokens", "vector"),
    [(2, 8, 17, 1), (2, 8, 24, 1), (2, 8, 29, 1), (1, 8, 13, 1), (2, 8, 21, 4), (1, 8, 32, 8)],
)
def test_linear_routes_through_wgmma(n, m, tokens, vector, gen, monkeypatch):
    """linear takes the kernel in its window on the H200, with bias, split on a few-row
    weight, and gives the product in x's layout (2:4 in bf16 goes to the sparse tensor
    cores first: test_kernels_spmm_nm_mma_sp.py); vector-wise rows at 17-32 tokens."""
    import sparsekernels as sk
    from sparsekernels.kernels import nm_wgmma_tuning, spmm_nm_wgmma

    monkeypatch.setattr(nm_wgmma_tuning, "VECTOR_MIN_ROWS", 1000)  # (vector rows on 1000)
    calls = []
    launch = spmm_nm_wgmma.spmm_nm_wgmma
    monkeypatch.setattr(
        spmm_nm_wgmma, "spmm_nm_wgmma", lambda **kw: calls.append(kw["split"]) or launch(**kw)
    )
    W = random_nm(1000, 2048 + 8 * m, n, m, gen, vector, 1, torch.bfloat16, "cuda")
    x = randn(tokens, 2048 + 8 * m, gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(1000, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = sk.linear(x, W, bias)
    want = x.double() @ W.to_dense().double().t() + bias.double()
    # 9 steps of 32 groups at m = 8 (two ranges of 4 at least), 17 at m = 4 (four)
    assert calls == [2 if m == 8 else 4] and got.is_contiguous()
    bound = spmm_bound(x, W.to_dense().t()) + bias.double().abs()
    assert_close(got, want, bound, torch.bfloat16)
