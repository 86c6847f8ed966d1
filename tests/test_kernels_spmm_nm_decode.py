"""The N:M decode kernel (N <= 16, bit-packed offsets): in the interpreter on CPU (small shapes)
and compiled on CUDA (gpu), against float64 references with poisoned outputs."""

import pytest
import torch

import sparsekernels as sk
from _helpers import (
    ALL_DTYPES,
    KERNEL_DEVICES,
    assert_close,
    randn,
    random_nm,
    skip_interpreter_on_gpu_machine,
    spmm_bound,
)
from sparsekernels.kernels.spmm_nm_decode import packed_bits, spmm_nm_decode
from sparsekernels.kernels.transpose import padded_b
from sparsekernels.ops._layout import padded_rows

# (n, m, vector, block): element-wise, 1:2 (1-bit offsets), odd n, vector-wise, block-wise,
# and a wide group (8-bit offsets).
PATTERNS = [(2, 8, 1, 1), (1, 2, 1, 1), (3, 8, 1, 1), (2, 4, 4, 1), (4, 16, 1, 2), (1, 32, 2, 1)]
# (block_m, block_w, num_warps): one row, rows sharing a choice, more rows than a vector, a
# step wider than the row on two warps (few-row weights at one token).
CONFIGS = [(1, 1, 1), (2, 4, 1), (16, 2, 2), (4, 32, 2)]


def _launch_poisoned(
    W,
    B,
    config,
    bias=None,
    activation="none",
    cols=None,
    split=1,
    keep_sums=False,
    prefetch=False,
    hints=("", ""),
    gather_shared=False,
):
    cols = B.shape[1] if cols is None else cols  # a padded B has more columns than the product
    out = torch.full((W.shape[0], cols), float("nan"), dtype=B.dtype, device=B.device)
    bits = packed_bits(W.m, W.block)
    block_m, block_w, num_warps = config
    spmm_nm_decode(
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
        block_w=block_w,
        num_warps=num_warps,
        num_stages=2,
        split=split,
        keep_sums=keep_sums,
        prefetch=prefetch,
        stream_cache=hints[0],
        gather_eviction=hints[1],
        gather_shared=gather_shared,
    )
    return out


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("pattern", [(2, 8, 1, 1), (3, 8, 1, 1), (4, 16, 1, 2), (2, 4, 4, 1)])
@pytest.mark.parametrize("config", [(1, 1, 1), (2, 4, 1), (4, 2, 2)])
def test_keep_sums(device, pattern, config, gen):
    """Each slot's sums kept to the end of the walk (element-wise rows at N > 1; rows sharing a
    choice and one token ignore it): every layout of B, N not a power of two, split walks,
    bias and activation, against float64."""
    skip_interpreter_on_gpu_machine(device)
    n, m, vector, block = pattern
    rows, cols = 2 * vector + 13, 7 * m  # partial tiles; slots not a multiple of a word
    W = random_nm(rows, cols, n, m, gen, vector, block, torch.float32, device)
    bias = randn(rows, gen=gen, dtype=torch.float32, device=device)
    for N, split in [(2, 1), (5, 2), (16, 3), (1, 1)]:
        x = randn(N, cols, gen=gen, dtype=torch.float32, device=device)
        dense = W.to_dense().double()
        for B in (x.t(), padded_rows(x.t())):
            got = _launch_poisoned(W, B, config, bias, "relu", N, split, keep_sums=True)
            want = torch.relu(dense @ B[:, :N].double() + bias.double()[:, None])
            bound = spmm_bound(W.to_dense(), B[:, :N]) + bias.abs()[:, None]
            assert_close(got, want, bound, torch.float32)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("N", [1, 5, 16])
@pytest.mark.parametrize("config", CONFIGS)
def test_every_element_written(device, pattern, N, config, gen):
    skip_interpreter_on_gpu_machine(device)
    n, m, vector, block = pattern
    dtype = torch.float32
    rows = 2 * vector + vector // 2 + 17  # a partial last vector group and a partial tile
    cols = 5 * m  # slots not a multiple of a word
    W = random_nm(rows, cols, n, m, gen, vector, block, dtype, device)
    x = randn(N, cols, gen=gen, dtype=dtype, device=device)
    # linear passes x^T; row-contiguous B is faster; padded B (zero columns up to a power of
    # two) is the fastest layout and must give the same product over the first N columns.
    for B in (x.t(), x.t().contiguous(), padded_rows(x.t())):
        got = _launch_poisoned(W, B, config, cols=N)
        want = W.to_dense().double() @ B[:, :N].double()
        assert_close(got, want, spmm_bound(W.to_dense(), B[:, :N]), dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("pattern", [(2, 8, 1, 1), (2, 4, 4, 1), (4, 16, 1, 2)])
@pytest.mark.parametrize("N", [1, 5])
def test_int64_offsets_into_b(device, pattern, N, gen, monkeypatch):
    """The int64 gather (B past 2^31 elements), forced on a small B, in each walk."""
    from sparsekernels.kernels import spmm_nm_decode as kernel

    skip_interpreter_on_gpu_machine(device)
    monkeypatch.setattr(kernel, "INT32_LIMIT", 0)
    n, m, vector, block = pattern
    W = random_nm(2 * vector + 9, 5 * m, n, m, gen, vector, block, torch.float32, device)
    x = randn(N, 5 * m, gen=gen, dtype=torch.float32, device=device)
    for config in ((1, 1, 1), (4, 4, 1)):  # own rows; rows sharing a choice (vector-wise)
        for B in (x.t(), padded_rows(x.t())):
            got = _launch_poisoned(W, B, config, cols=N)
            want = W.to_dense().double() @ B[:, :N].double()
            assert_close(got, want, spmm_bound(W.to_dense(), B[:, :N]), torch.float32)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("N", [2, 3, 8, 12])
def test_padded_b_layout(device, N, gen):
    """padded_rows: (K, next power of two) row-major, zeros past N, recognised by padded_b."""
    skip_interpreter_on_gpu_machine(device)
    x = randn(N, 40, gen=gen, device=device)
    B = padded_rows(x.t())
    width = 1 << (N - 1).bit_length()
    assert B.shape == (40, width) and B.is_contiguous() and padded_b(B, N)
    assert torch.equal(B[:, :N], x.t()) and not B[:, N:].any()
    assert torch.equal(padded_rows(B[:, :N]), B)  # a strided slice is copied again, not trusted
    assert not padded_b(x.t(), N) and padded_rows(x[:1].t()).shape == (40, 1)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_dtypes_bias_activation(device, dtype, gen):
    skip_interpreter_on_gpu_machine(device)
    W = random_nm(70, 64, 2, 8, gen, 1, 1, dtype, device)
    B = randn(64, 3, gen=gen, dtype=dtype, device=device)
    bias = randn(70, gen=gen, dtype=dtype, device=device)
    got = _launch_poisoned(W, B, (2, 2, 1), bias, "gelu")
    want = torch.nn.functional.gelu(W.to_dense().double() @ B.double() + bias.double()[:, None])
    bound = spmm_bound(W.to_dense(), B) + bias.double().abs()[:, None]
    assert_close(got, want, bound, dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("pattern", [(2, 8, 1, 1), (1, 8, 8, 1), (3, 8, 1, 1)])
@pytest.mark.parametrize("N", [1, 5])
@pytest.mark.parametrize("split", [2, 3, 100])
def test_split_walks(device, dtype, pattern, N, split, gen):
    """Split-K: each range of steps writes its partial sum (float64 for float64 weights) and
    split_k adds them in order, then bias and activation. Own-choice rows and rows sharing a
    choice (v = 8), an odd n, a last range shorter than the rest, and more ranges asked for
    than steps (only non-empty ones launch); the same bits every run."""
    skip_interpreter_on_gpu_machine(device)
    n, m, vector, block = pattern
    W = random_nm(19, 23 * m, n, m, gen, vector, block, dtype, device)
    B = randn(23 * m, N, gen=gen, dtype=dtype, device=device)
    bias = randn(19, gen=gen, dtype=dtype, device=device)
    want = torch.relu(W.to_dense().double() @ B.double() + bias.double()[:, None])
    bound = spmm_bound(W.to_dense(), B) + bias.double().abs()[:, None]
    config = (8, 1, 1)  # one word a step: 23 * n / (32 / bits) words, several steps
    got = _launch_poisoned(W, B, config, bias, "relu", split=split)
    assert_close(got, want, bound, dtype)
    assert torch.equal(got, _launch_poisoned(W, B, config, bias, "relu", split=split))
    with pytest.raises(ValueError, match="split"):
        _launch_poisoned(W, B, config, split=0)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("pattern", [(2, 8, 1, 1), (1, 2, 1, 1), (3, 8, 1, 1), (4, 16, 1, 2)])
@pytest.mark.parametrize("N", [1, 5, 16])
@pytest.mark.parametrize(("config", "split"), [((1, 1, 1), 1), ((4, 2, 2), 1), ((8, 1, 1), 3)])
def test_prefetch_walk(device, pattern, N, config, split, gen):
    """The own-row walk loading the next step before this step's gather: the same sums as
    the plain walk (one word a step and several, rows past M, a last step past the row's
    end, split ranges that end mid-row), float32 against float64, every element written."""
    skip_interpreter_on_gpu_machine(device)
    n, m, vector, block = pattern
    W = random_nm(13, 37 * m, n, m, gen, vector, block, torch.float32, device)
    B = randn(37 * m, N, gen=gen, dtype=torch.float32, device=device)
    bias = randn(13, gen=gen, dtype=torch.float32, device=device)
    got = _launch_poisoned(W, B, config, bias, "relu", split=split, prefetch=True)
    want = torch.relu(W.to_dense().double() @ B.double() + bias.double()[:, None])
    bound = spmm_bound(W.to_dense(), B) + bias.double().abs()[:, None]
    assert_close(got, want, bound, torch.float32)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("pattern", [(2, 8, 1, 1), (1, 8, 1, 1), (2, 4, 1, 1), (1, 2, 2, 1)])
@pytest.mark.parametrize(
    ("config", "split"), [((4, 2, 2), 1), ((1, 1, 1), 1), ((2, 4, 1), 3), ((8, 4, 4), 1)]
)
@pytest.mark.parametrize("prefetch", [False, True])
def test_shared_gather(device, pattern, config, split, prefetch, gen):
    """One token gathered from x's span staged in shared memory: the same sums, float32 against
    float64, every element written (rows past M, a last step past the row's end, split ranges,
    vector 2 on tiles of 4 rows, the route's 8-row tile over 13 rows)."""
    skip_interpreter_on_gpu_machine(device)
    n, m, vector, block = pattern
    W = random_nm(13, 37 * m, n, m, gen, vector, block, torch.float32, device)
    B = randn(37 * m, 1, gen=gen, dtype=torch.float32, device=device)
    bias = randn(13, gen=gen, dtype=torch.float32, device=device)
    got = _launch_poisoned(W, B, config, bias, "relu", split=split, prefetch=prefetch,
                           gather_shared=True)  # fmt: skip
    want = torch.relu(W.to_dense().double() @ B.double() + bias.double()[:, None])
    bound = spmm_bound(W.to_dense(), B) + bias.double().abs()[:, None]
    assert_close(got, want, bound, torch.float32)


def test_shared_gather_cases():
    """Where the launcher turns the shared gather on: one token, own-row element-wise tiles,
    n and m powers of two with whole groups in a word."""
    from sparsekernels.kernels.spmm_nm_decode import span_gather_fits as fits

    assert fits(2, 8, 1, 1, 1, 4) and fits(1, 8, 1, 1, 1, 4) and fits(2, 4, 1, 1, 1, 4)
    assert not fits(2, 8, 1, 8, 1, 4)  # 8 tokens
    assert not fits(3, 8, 1, 1, 1, 4)  # n not a power of two
    assert not fits(16, 32, 1, 1, 1, 4)  # a word holds 4 slots, a group 16
    assert not fits(2, 8, 1, 1, 64, 8)  # rows sharing their choice: the shared walk
    assert not fits(2, 8, 2, 1, 1, 4)  # block-wise


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("N", [1, 8])
@pytest.mark.parametrize("prefetch", [False, True])
def test_cache_hints(device, N, prefetch, gen):
    """The weight's loads past L1 and the gather kept in cache (the sweep's "/c" forms): the
    same products, every element written (rows past M, a last step past the row's end)."""
    skip_interpreter_on_gpu_machine(device)
    W = random_nm(13, 37 * 8, 2, 8, gen, 1, 1, torch.float32, device)
    B = randn(37 * 8, N, gen=gen, dtype=torch.float32, device=device)
    got = _launch_poisoned(W, B, (4, 2, 2), prefetch=prefetch, hints=(".cg", "evict_last"))
    want = W.to_dense().double() @ B.double()
    assert_close(got, want, spmm_bound(W.to_dense(), B), torch.float32)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_k_of_one_group_and_single_row(device, gen):
    skip_interpreter_on_gpu_machine(device)
    W = random_nm(1, 8, 2, 8, gen, 1, 1, torch.float64, device)
    B = randn(8, 1, gen=gen, device=device)
    got = _launch_poisoned(W, B, (1, 1, 1))
    assert_close(got, W.to_dense() @ B, spmm_bound(W.to_dense(), B), torch.float64)


def test_linear_takes_the_decode_kernel_and_caches_packing(gen):
    from sparsekernels.ops import _triton_nm

    W = random_nm(24, 32, 2, 8, gen, 1, 1, torch.float64)
    x = randn(3, 32, gen=gen)
    got = sk.linear(x, W, backend="triton")
    assert_close(got, x @ W.to_dense().t(), spmm_bound(x, W.to_dense().t()), torch.float64)
    words = _triton_nm.packed_words(W.indices, 4)
    assert _triton_nm.packed_words(W.indices, 4) is words  # packed once per weight
    W.indices.add_(0)  # any in-place edit bumps the version
    assert _triton_nm.packed_words(W.indices, 4) is not words  # an in-place edit repacks


ROUTES = [
    (2, 8, 12, True),
    (2, 8, 16, True),
    (2, 8, 17, False),
    (2, 4, 17, False),
    (1, 8, 32, True),
    (1, 8, 33, False),
]


@pytest.mark.parametrize(("n", "m", "tokens", "decodes"), ROUTES)
def test_token_count_picks_decode_or_gather(n, m, tokens, decodes, gen, monkeypatch):
    """Patterns leave the decode kernel after 16 tokens, 1:8 and sparser after 32
    (tuning.decode_max_n); both paths give the product."""
    from sparsekernels.kernels import spmm_nm_decode

    calls = []
    launch = spmm_nm_decode.spmm_nm_decode
    monkeypatch.setattr(
        spmm_nm_decode, "spmm_nm_decode", lambda **kw: calls.append(1) or launch(**kw)
    )
    W = random_nm(8, 32, n, m, gen, 1, 1, torch.float64)
    x = randn(tokens, 32, gen=gen)
    got = sk.linear(x, W, backend="triton")
    assert_close(got, x @ W.to_dense().t(), spmm_bound(x, W.to_dense().t()), torch.float64)
    assert bool(calls) == decodes


@pytest.mark.gpu
def test_llm_shape_on_gpu(gen):
    W = random_nm(4096 + 3, 4096, 2, 8, gen, 1, 1, torch.bfloat16, "cuda")
    x = randn(16, 4096, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = sk.linear(x, W)
    want = x.double() @ W.to_dense().double().t()
    assert_close(got, want, spmm_bound(x, W.to_dense().t()), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [5, 8])
@pytest.mark.parametrize(("n", "m"), [(2, 8), (1, 8)])
def test_tall_tiles_on_gpu(tokens, n, m, gen, monkeypatch):
    """linear's tall tiles (5-8 tokens, rows of 8192+ columns) compiled on the H200: a row
    count that is not a multiple of 32, split-K and bias, against float64."""
    from sparsekernels.kernels import (
        nm_mma_sp_tuning,
        nm_unpack_tuning,
        nm_wgmma_tuning,
        spmm_nm_decode,
    )

    monkeypatch.setattr(nm_unpack_tuning, "UNPACK_TOKENS", {})  # (2:8 at 8 tokens unpacks)
    monkeypatch.setattr(nm_wgmma_tuning, "WGMMA_WINDOWS", {})  # (and on Hopper, wgmma)
    monkeypatch.setattr(nm_mma_sp_tuning, "MMA_SP_WINDOWS", {})  # (and on sm_80+, mma.sp)
    launches = []
    launch = spmm_nm_decode.spmm_nm_decode
    monkeypatch.setattr(
        spmm_nm_decode, "spmm_nm_decode", lambda **kw: launches.append(kw) or launch(**kw)
    )
    W = random_nm(1000 + 5, 8192 + 64, n, m, gen, 1, 1, torch.bfloat16, "cuda")
    x = randn(tokens, 8192 + 64, gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(1005, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = sk.linear(x, W, bias)
    want = x.double() @ W.to_dense().double().t() + bias.double()
    bound = spmm_bound(x, W.to_dense().t()) + bias.double().abs()
    assert_close(got, want, bound, torch.bfloat16)
    assert launches[0]["block_m"] == 32 and launches[0]["split"] > 1


def test_decode_split_rule(monkeypatch):
    """Only long rows split; the ranges double while each keeps its minimum of steps and the
    grid stays within its cap."""
    from sparsekernels.kernels import nm_decode_tuning

    split = nm_decode_tuning.spmm_nm_decode_split
    assert split(4096, 4, 14) == 1  # under DECODE_SPLIT_MIN_STEPS
    assert split(4096, 4, 28) == 4  # 2:4 on 4096 x 14336: 7 steps a range
    assert split(4096, 2, 28) == 4  # 2048 programs x 4 = the cap
    assert split(4096, 4, 200) == 8  # 1024 programs x 8 = the cap
    assert split(65536, 4, 200) == 1  # 16384 programs: over the cap
    monkeypatch.setattr(nm_decode_tuning, "DECODE_SPLIT_MIN_STEPS", 4)
    assert split(4096, 4, 12) == 2


def test_decode_config_rule():
    """Few-row weights at one token step over a row's slots up to 1024 (two warps from 1024);
    many rows, more tokens and vector-wise tiles keep 256-slot steps."""
    from sparsekernels.kernels.nm_decode_tuning import SpmmNmDecodeConfig, spmm_nm_decode_config

    assert spmm_nm_decode_config(1, 1, 4096, 3584) == SpmmNmDecodeConfig(4, 1024, 2)  # 2:8
    assert spmm_nm_decode_config(1, 1, 4096, 512) == SpmmNmDecodeConfig(4, 512, 1)  # 1:8, 4096
    assert spmm_nm_decode_config(1, 1, 4096, 40) == SpmmNmDecodeConfig(4, 256, 1)
    assert spmm_nm_decode_config(1, 1, 14336, 1024) == SpmmNmDecodeConfig(4, 256, 1)
    assert spmm_nm_decode_config(1, 1) == SpmmNmDecodeConfig(4, 256, 1)  # rows unknown
    assert spmm_nm_decode_config(4, 1, 4096, 3584) == SpmmNmDecodeConfig(2, 256, 1)
    assert spmm_nm_decode_config(1, 64, 4096, 3584) == SpmmNmDecodeConfig(8, 256, 1)
    # Element-wise half-dense weights at one token: shared-memory gathers where the kernel has
    # them (n and m powers of two, whole groups in a word), else 512-slot one-warp steps.
    shared = SpmmNmDecodeConfig(8, 512, 4, gather_shared=True)
    half_dense = SpmmNmDecodeConfig(4, 512, 1)
    assert spmm_nm_decode_config(1, 1, 4096, 7168, 2, 4) == shared
    assert spmm_nm_decode_config(1, 1, 14336, 2048, 4, 8) == shared
    assert spmm_nm_decode_config(1, 1, 4096, 8192, 1, 2) == shared
    assert spmm_nm_decode_config(1, 1, 4096, 8192, 16, 32) == half_dense  # 4 offsets a word
    assert spmm_nm_decode_config(1, 1, 4096, 8192, 3, 6) == half_dense  # m not a power of two
    wide = [spmm_nm_decode_config(1, 1, 1, s, 1, 2) for s in (2**30 - 1, 2**30)]  # K 2^31: int32
    assert wide == [shared, half_dense]
    assert spmm_nm_decode_config(1, 1, 4096, 3584, 2, 8) == SpmmNmDecodeConfig(4, 1024, 2)
    assert spmm_nm_decode_config(2, 1, 4096, 7168, 2, 4) == SpmmNmDecodeConfig(2, 256, 1)
    for config in (
        spmm_nm_decode_config(1, 4, 4096, 7168, 2, 4),  # vector-wise
        spmm_nm_decode_config(1, 1, 4096, 7168, 2, 4, block=4),  # block-wise
    ):
        assert config not in (half_dense, shared)


def test_decode_vector_tile_rule():
    """Vector-wise rows (v % 8 == 0) take 8-row tiles to 8 padded columns of B in 16 bits (one
    warp to 4 tokens, two at 5-8, where one spilled) and to 2 in fp32 (one warp); past them,
    where the 8-row step spilled (614-2161 us at 12 tokens), 4 rows on four warps. v = 4 keeps
    its 2-row tiles."""
    from sparsekernels.kernels.nm_decode_tuning import (
        DECODE_FOUR_WARPS,
        SpmmNmDecodeConfig,
        spmm_nm_decode_config,
    )

    eight = SpmmNmDecodeConfig(8, 256, 1)
    for vector in (8, 16, 64):

        def config(tokens, itemsize=2, vector=vector):
            # (8192 rows: on 4096 or fewer, 4:8 takes wider steps at 1-4 tokens, route_cliffs)
            return spmm_nm_decode_config(tokens, vector, 8192, 2048, 4, 8, itemsize=itemsize)

        eight_on_two = SpmmNmDecodeConfig(8, 256, 2)
        assert [config(t) for t in (1, 2, 4, 5, 8)] == [eight] * 3 + [eight_on_two] * 2
        assert [config(t) for t in (9, 12, 16)] == [DECODE_FOUR_WARPS] * 3
        assert [config(t, 4) for t in (1, 2, 3, 8, 16)] == [eight] * 2 + [DECODE_FOUR_WARPS] * 3
    assert (DECODE_FOUR_WARPS.block_m, DECODE_FOUR_WARPS.num_warps) == (4, 4)
    # blocks of 64 columns: 4 rows on one warp to 8 columns (the tensor-core tiles from 9)
    wide = [spmm_nm_decode_config(t, 64, 4096, 2048, 64, 128, 64) for t in (1, 8, 9)]
    assert wide == [SpmmNmDecodeConfig(4, 256, 1)] * 2 + [DECODE_FOUR_WARPS]
    assert spmm_nm_decode_config(12, 4, 4096, 2048, 4, 8) == SpmmNmDecodeConfig(2, 256, 1)


def test_decode_wide_warps_rule():
    """fp32 element-wise and v = 4 rows past 8 tokens, where the 2-row one-warp step spilled
    (3-9x slower at 24 tokens): two warps to 16 padded columns, four to 32; one warp at 2-8
    tokens and in 16 bits."""
    from sparsekernels.kernels.nm_decode_tuning import SpmmNmDecodeConfig, spmm_nm_decode_config

    for vector in (1, 4):

        def warps(tokens, itemsize, vector=vector):
            config = spmm_nm_decode_config(tokens, vector, 4096, 512, 1, 8, itemsize=itemsize)
            assert (config.block_m, config.block_slots) == (2, 256)
            return config.num_warps

        assert [warps(t, 4) for t in (2, 5, 8, 9, 12, 16, 17, 24, 32)] == [1] * 3 + [2] * 3 + [
            4
        ] * 3
        assert [warps(t, 8) for t in (8, 16, 32)] == [1, 2, 4]  # fp64 as fp32 (untimed)
        assert [warps(t, 2) for t in (9, 16, 24, 32)] == [1] * 4
    assert spmm_nm_decode_config(24, 8, 4096, 512, 1, 8, itemsize=4) != SpmmNmDecodeConfig(
        2, 256, 4
    )


@pytest.mark.parametrize("tokens", [12, 24])
def test_linear_decodes_fp32_on_more_warps(tokens, gen, monkeypatch):
    """fp32 1:8 through linear at 12 and 24 tokens takes the decode kernel's 2-row tile on two
    and four warps (an odd row count; a partial last step; bias), each element against
    float64."""
    from sparsekernels.kernels import spmm_nm_decode

    launches = []
    launch = spmm_nm_decode.spmm_nm_decode
    monkeypatch.setattr(
        spmm_nm_decode, "spmm_nm_decode", lambda **kw: launches.append(kw) or launch(**kw)
    )
    W = random_nm(37, 41 * 8, 1, 8, gen, 1, 1, torch.float32)
    x = randn(tokens, 41 * 8, gen=gen, dtype=torch.float32)
    bias = randn(37, gen=gen, dtype=torch.float32)
    got = sk.linear(x, W, bias, backend="triton")
    want = x.double() @ W.to_dense().double().t() + bias.double()
    assert_close(got, want, spmm_bound(x, W.to_dense().t()) + bias.double().abs(), torch.float32)
    assert [(k["block_m"], k["num_warps"]) for k in launches] == [(2, 2 if tokens < 17 else 4)]


@pytest.mark.parametrize(("dtype", "n", "m", "vector"), [(torch.float32, 2, 8, 8),
                                                        (torch.float16, 3, 8, 16)])  # fmt: skip
def test_linear_decodes_vectors_on_four_warps(dtype, n, m, vector, gen, monkeypatch):
    """At 12 tokens vector-wise rows take the decode kernel's 4-row tile on four warps through
    linear (two programs a vector; a partial last step; bias), each element against float64."""
    from sparsekernels.kernels import spmm_nm_decode

    launches = []
    launch = spmm_nm_decode.spmm_nm_decode
    monkeypatch.setattr(
        spmm_nm_decode, "spmm_nm_decode", lambda **kw: launches.append(kw) or launch(**kw)
    )
    W = random_nm(5 * vector, 33 * m, n, m, gen, vector, 1, dtype)
    x = randn(12, 33 * m, gen=gen, dtype=dtype)
    bias = randn(5 * vector, gen=gen, dtype=dtype)
    got = sk.linear(x, W, bias, backend="triton")
    want = x.double() @ W.to_dense().double().t() + bias.double()
    assert_close(got, want, spmm_bound(x, W.to_dense().t()) + bias.double().abs(), dtype)
    assert [(k["block_m"], k["num_warps"]) for k in launches] == [(4, 4)]


def test_decode_tall_tile_rule():
    """Tall tiles at 5-8 tokens into a column-major output for element-wise weights of 75%
    sparsity and more with rows of 8192 columns or more; not into a row-major output, not at 4
    or 9 tokens, not at 2:4, not on 4096-column rows, not vector- or block-wise, not with the
    pattern unknown. Their split brings the grid toward 2048 programs, 4 steps a range at
    least."""
    from sparsekernels.kernels import nm_decode_tuning
    from sparsekernels.kernels.nm_decode_tuning import spmm_nm_decode_config

    def config(tokens, row_slots, n=2, m=8, vector=1, block=1, column_major_out=True):
        return spmm_nm_decode_config(
            tokens, vector, 4096, row_slots, n, m, block, column_major_out=column_major_out
        )

    tall = nm_decode_tuning.DECODE_TALL
    for tokens in (5, 8):
        for n, m in ((2, 8), (1, 8), (1, 4), (4, 32)):
            assert config(tokens, 14336 * n // m, n, m) == tall, (tokens, n, m)
    assert config(8, 2048) == tall  # K = 8192
    short = nm_decode_tuning.DECODE_SHORT_ROWS
    assert config(8, 2047) == short  # shorter rows: prefetching 2-row tiles
    assert config(5, 512, 1, 8) == short  # 1:8, K = 4096
    assert short.prefetch and short.block_m == 2
    assert not config(8, 1024, 2, 8, column_major_out=False).prefetch  # row-major: plain
    assert not config(8, 2048, 2, 4).prefetch  # 2:4: plain
    assert not config(12, 1024).prefetch
    assert config(8, 3584, column_major_out=False) != tall
    assert config(4, 3584) != tall
    assert config(9, 3584) != tall
    assert config(8, 7168, 2, 4) != tall
    assert config(8, 3584, vector=4) != tall
    assert config(8, 3584, block=2) != tall
    assert spmm_nm_decode_config(8, 1, 4096, 3584, column_major_out=True) != tall
    # 4096 rows: 128 programs of 32, 16 ranges; 14336 rows: 448 programs, 4 ranges
    split = nm_decode_tuning.spmm_nm_decode_split
    assert split(4096, 32, 224, tall.split_programs) == 16
    assert split(14336, 32, 64, tall.split_programs) == 4
    assert split(4096, 32, 9, tall.split_programs) == 2  # 4 steps a range
    assert split(4096, 32, 3, tall.split_programs) == 1
    assert split(1 << 20, 32, 999, tall.split_programs) == 1


def test_linear_passes_the_configs_prefetch(gen, monkeypatch):
    """A decode configuration asking for the prefetching walk gets it through linear."""
    from sparsekernels.kernels import nm_decode_tuning, spmm_nm_decode

    monkeypatch.setattr(nm_decode_tuning, "DECODE_FEW_ROW_PROGRAMS", 0)
    monkeypatch.setattr(nm_decode_tuning, "SELECT_TILES", {})  # fp32 2:8 takes the select kernel
    config = nm_decode_tuning.SpmmNmDecodeConfig(4, 32, 1, prefetch=True)
    monkeypatch.setattr(nm_decode_tuning, "spmm_nm_decode_config", lambda *a, **k: config)
    launches = []
    launch = spmm_nm_decode.spmm_nm_decode
    monkeypatch.setattr(
        spmm_nm_decode, "spmm_nm_decode", lambda **kw: launches.append(kw) or launch(**kw)
    )
    W = random_nm(9, 256, 2, 8, gen, 1, 1, torch.float32)
    x = randn(1, 256, gen=gen, dtype=torch.float32)
    got = sk.linear(x, W, backend="triton")
    assert_close(got, x.double() @ W.to_dense().double().t(), spmm_bound(x, W.to_dense().t()),
                 torch.float32)  # fmt: skip
    assert launches and launches[0]["prefetch"] is True


@pytest.mark.parametrize("tokens", [5, 8])
def test_linear_takes_tall_tiles(tokens, gen, monkeypatch):
    """linear at 5-8 tokens on a 1:8 weight with 8200-column rows runs the tall tiles, split:
    rows not a multiple of 32, a last step past the row's end, bias; each element against
    float64. spmm of a row-major B keeps the 2-row tiles."""
    from sparsekernels.kernels import spmm_nm_decode

    launches = []
    launch = spmm_nm_decode.spmm_nm_decode
    monkeypatch.setattr(
        spmm_nm_decode, "spmm_nm_decode", lambda **kw: launches.append(kw) or launch(**kw)
    )
    W = random_nm(37, 8200, 1, 8, gen, 1, 1, torch.float32)  # 1025 slots: 65 steps of 16
    x = randn(tokens, 8200, gen=gen, dtype=torch.float32)
    bias = randn(37, gen=gen, dtype=torch.float32)
    got = sk.linear(x, W, bias, backend="triton")
    want = x.double() @ W.to_dense().double().t() + bias.double()
    assert_close(got, want, spmm_bound(x, W.to_dense().t()) + bias.double().abs(), torch.float32)
    assert [(k["block_m"], k["block_w"], k["split"]) for k in launches] == [(32, 2, 16)]
    sk.spmm(W, x.t().contiguous(), backend="triton")
    assert launches[1]["block_m"] == 2


@pytest.mark.parametrize("tokens", [1, 6])
def test_linear_decodes_with_split(tokens, gen, monkeypatch, request):
    """linear's decode route with split-K on (few rows, long K): the product and bias."""
    from sparsekernels.kernels import nm_decode_tuning, spmm_nm_decode

    monkeypatch.setattr(nm_decode_tuning, "DECODE_SPLIT_PROGRAMS", 1 << 20)
    monkeypatch.setattr(nm_decode_tuning, "DECODE_SPLIT_MIN_STEPS", 2)
    monkeypatch.setattr(nm_decode_tuning, "DECODE_SPLIT_RANGE_STEPS", 2)
    monkeypatch.setattr(nm_decode_tuning, "DECODE_FEW_ROW_PROGRAMS", 0)  # keep 256-slot steps
    nm_decode_tuning.spmm_nm_decode_config.cache_clear()
    request.addfinalizer(
        nm_decode_tuning.spmm_nm_decode_config.cache_clear
    )  # drop the patched answers
    splits = []
    launch = spmm_nm_decode.spmm_nm_decode
    monkeypatch.setattr(
        spmm_nm_decode, "spmm_nm_decode", lambda **kw: splits.append(kw["split"]) or launch(**kw)
    )
    W = random_nm(6, 8192, 1, 8, gen, 1, 1, torch.float32)  # 4 steps of 256 slots a row
    x = randn(tokens, 8192, gen=gen, dtype=torch.float32)
    bias = randn(6, gen=gen, dtype=torch.float32)
    got = sk.linear(x, W, bias, backend="triton")
    want = x.double() @ W.to_dense().double().t() + bias.double()
    assert_close(got, want, spmm_bound(x, W.to_dense().t()) + bias.double().abs(), torch.float32)
    assert splits and splits[0] > 1


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize(("pattern", "N"), [((64, 128, 64, 64), 4), ((64, 128, 1, 64), 3),
                                           ((16, 32, 4, 16), 5)])  # fmt: skip
def test_linear_decodes_wide_blocks_in_256_slot_words(device, pattern, N, gen, monkeypatch):
    """Blocks of 16+ columns with 1-bit offsets made one word 512-2048 slots, the decode walk's
    smallest step (64:128 b=64 spilled to 1.1 ms at 8 tokens): the launcher widens the offsets
    until a word covers 256 slots, and linear's product stays right (float64, bias)."""
    from sparsekernels.kernels import nm_decode_tuning, spmm_nm_decode

    skip_interpreter_on_gpu_machine(device)
    n, m, vector, block = pattern
    assert packed_bits(m, block) == 1
    assert 32 // nm_decode_tuning.decode_bits(m, block) * block == 256
    launch, words = spmm_nm_decode.spmm_nm_decode, []
    monkeypatch.setattr(
        spmm_nm_decode,
        "spmm_nm_decode",
        lambda **kw: words.append(32 // kw["bits"] * block) or launch(**kw),
    )
    dtype = torch.float32  # (fp32 keeps the decode kernel below 8 tokens on any weight)
    W = random_nm(2 * vector + 64, 5 * m, n, m, gen, vector, block, dtype, device)  # (partial)
    x = randn(N, W.shape[1], gen=gen, dtype=dtype, device=device)
    bias = randn(W.shape[0], gen=gen, dtype=dtype, device=device)
    got = sk.linear(x, W, bias, backend="triton")
    assert words == [256]
    want = x.double() @ W.to_dense().double().t() + bias.double()
    assert_close(got, want, spmm_bound(x, W.to_dense().t()) + bias.double().abs(), dtype)
