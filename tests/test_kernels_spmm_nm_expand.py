"""The tensor-core N:M kernel (m tl.dot calls a step, one per position of a group, on the
compressed tile): in the interpreter on CPU (small shapes; bf16 upcast there) and compiled on
CUDA (gpu), against float64 references with poisoned outputs."""

import itertools

import pytest
import torch

from _helpers import (
    KERNEL_DEVICES,
    assert_close,
    randn,
    random_nm,
    skip_interpreter_on_gpu_machine,
    spmm_bound,
)
from sparsekernels.kernels.spmm_nm_expand import spmm_nm_expand, supports

# (n, m, vector, block): element-wise, 1:2, block-wise, vector-wise, a wide group, a block as
# wide as n, an m that is not a power of two, and an n that is not (groups straddle steps).
PATTERNS = [
    (2, 8, 1, 1),
    (3, 8, 1, 1),
    (1, 2, 1, 1),
    (4, 16, 1, 2),
    (2, 4, 4, 1),
    (1, 32, 1, 1),
    (4, 8, 2, 4),
    (2, 6, 1, 1),
]


def _launch_poisoned(
    W, B, tiles=(16, 16, 16), bias=None, activation="none", grouped=False, split=1
):
    """tiles: (rows, compressed slots, tokens) a step; grouped: fold each group's slots; split:
    ranges of slots summed by the second kernel."""
    block_m, block_s, block_n = tiles
    out = torch.full((W.shape[0], B.shape[1]), float("nan"), dtype=B.dtype, device=B.device)
    spmm_nm_expand(
        values=W.values,
        indices=W.indices,
        b=B,
        bias=bias,
        out=out,
        n=W.n,
        m=W.m,
        vector=W.vector,
        block=W.block,
        activation=activation,
        block_m=block_m,
        block_s=block_s,
        block_n=block_n,
        num_warps=4,
        num_stages=2,
        grouped=grouped,
        split=split,
    )
    return out


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("N", [1, 3, 16, 20])
def test_every_element_written(device, pattern, N, gen):
    skip_interpreter_on_gpu_machine(device)
    n, m, vector, block = pattern
    rows = 2 * vector + 17  # a partial last tile of rows
    cols = 5 * m  # groups not a multiple of the tile's
    W = random_nm(rows, cols, n, m, gen, vector, block, torch.float32, device)
    x = randn(N, cols, gen=gen, dtype=torch.float32, device=device)
    # one slot a dot row, and for n a power of two each group's slots folded into one
    forms = [False, True] if n & (n - 1) == 0 else [False]
    for B, grouped in itertools.product((x.t(), x.t().contiguous()), forms):
        got = _launch_poisoned(W, B, grouped=grouped)  # linear's x^T and a row-major B
        assert_close(got, W.to_dense().double() @ B.double(), spmm_bound(W.to_dense(), B), B.dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_bias_activation_and_wider_tiles(device, dtype, gen):
    skip_interpreter_on_gpu_machine(device)
    W = random_nm(70, 128, 2, 8, gen, 1, 1, dtype, device)
    B = randn(128, 24, gen=gen, dtype=dtype, device=device)
    bias = randn(70, gen=gen, dtype=dtype, device=device)
    want = torch.nn.functional.gelu(W.to_dense().double() @ B.double() + bias.double()[:, None])
    bound = spmm_bound(W.to_dense(), B) + bias.double().abs()[:, None]
    for grouped in (False, True):
        got = _launch_poisoned(W, B, (32, 64, 16), bias, "gelu", grouped)
        assert_close(got, want, bound, dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("pattern", [(1, 8, 1, 1), (2, 4, 1, 1), (3, 8, 2, 1)])
@pytest.mark.parametrize("split", [2, 3, 64])
def test_split_slots(device, pattern, split, gen):
    """Split-K: each range of slots sums into the float32 workspace and the second kernel adds
    them in order, then bias and activation; ragged rows and tokens, a last range shorter than
    the rest (and, at 64, more ranges asked for than steps: only non-empty ones launch)."""
    skip_interpreter_on_gpu_machine(device)
    n, m, vector, block = pattern
    W = random_nm(37, 21 * m, n, m, gen, vector, block, torch.float32, device)
    B = randn(21 * m, 19, gen=gen, dtype=torch.float32, device=device)
    bias = randn(37, gen=gen, dtype=torch.float32, device=device)
    want = torch.relu(W.to_dense().double() @ B.double() + bias.double()[:, None])
    bound = spmm_bound(W.to_dense(), B) + bias.double().abs()[:, None]
    for grouped in [False, True] if n & (n - 1) == 0 else [False]:
        got = _launch_poisoned(W, B, bias=bias, activation="relu", grouped=grouped, split=split)
        assert_close(got, want, bound, torch.float32)
        again = _launch_poisoned(W, B, bias=bias, activation="relu", grouped=grouped, split=split)
        assert torch.equal(got, again)  # a fixed sum order


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("split", [1, 3])
def test_padded_b_columns_are_read_never_stored(device, split, gen):
    """B may be wider than the product (ops/_layout.rows_padded_to_16's copies): its columns
    past N are read, which keeps the loads wide, and never reach the output, whatever they
    hold (here random values; the copies hold zeros). 24 tokens in a 32-wide B."""
    skip_interpreter_on_gpu_machine(device)
    W = random_nm(37, 10 * 8, 2, 8, gen, 1, 1, torch.float32, device)
    B = randn(80, 24, gen=gen, dtype=torch.float32, device=device)
    wide = torch.cat([B, randn(80, 8, gen=gen, dtype=torch.float32, device=device)], dim=1)
    want = W.to_dense().double() @ B.double()
    for grouped in (False, True):
        out = torch.full((37, 24), float("nan"), dtype=torch.float32, device=device)
        spmm_nm_expand(values=W.values, indices=W.indices, b=wide, bias=None, out=out, n=2,
                       m=8, vector=1, block=1, activation="none", block_m=16, block_s=16,
                       block_n=16, num_warps=4, num_stages=2, grouped=grouped,
                       split=split)  # fmt: skip
        assert_close(out, want, spmm_bound(W.to_dense(), B), torch.float32)


@pytest.mark.parametrize("align_row_major", [False, True])
def test_rows_padded_to_16_where_a_copy_is_made(align_row_major, gen, monkeypatch):
    """linear's x^T (column-major) is copied row-major to a width of a multiple of 16 with
    zero columns past N. A row-major B is kept as it is; with ALIGN_ROW_MAJOR_B only where its
    width, row stride and address are 16-aligned (else copied as x^T is)."""
    from sparsekernels.ops import _layout
    from sparsekernels.ops._layout import rows_padded_to_16

    monkeypatch.setattr(_layout, "ALIGN_ROW_MAJOR_B", align_row_major)
    x = randn(24, 40, gen=gen)
    padded = rows_padded_to_16(x.t())
    assert padded.shape == (40, 32) and padded.is_contiguous()
    assert torch.equal(padded[:, :24], x.t()) and not padded[:, 24:].any()
    assert rows_padded_to_16(randn(40, 32, gen=gen).t()).shape == (32, 48)
    row_major = x.t().contiguous()
    if align_row_major:
        copied = rows_padded_to_16(row_major)
        assert copied.shape == (40, 32) and copied.is_contiguous()
        assert torch.equal(copied[:, :24], row_major) and not copied[:, 24:].any()
    else:
        assert rows_padded_to_16(row_major) is row_major
    aligned = randn(40, 32, gen=gen)
    assert rows_padded_to_16(aligned) is aligned
    strided = randn(40, 48, gen=gen)[:, :32]  # (row stride 48: aligned too)
    assert rows_padded_to_16(strided) is strided
    shifted = randn(40, 33, gen=gen)[:, 1:]  # (4 bytes off: its rows' vectors would straddle)
    assert (rows_padded_to_16(shifted) is shifted) is not align_row_major
    assert torch.equal(rows_padded_to_16(shifted)[:, :32], shifted)


def test_aligned_rows_are_16_wide_at_decode_sizes(gen):
    """The tensor-core tiles' B at 2-16 tokens: 16 columns, zero past N (at 2-8 a width of
    next_power_of_2(N) left their loads unaligned), from linear's x^T or a row-major B; one
    column kept as it is; 16 row-major columns kept too."""
    from sparsekernels.ops._layout import aligned_rows

    for tokens in (2, 5, 8, 13):
        x = randn(tokens, 40, gen=gen)
        for b in (x.t(), x.t().contiguous()):
            padded = aligned_rows(b)
            assert padded.shape == (40, 16) and padded.is_contiguous()
            assert torch.equal(padded[:, :tokens], b) and not padded[:, tokens:].any()
    one = randn(1, 40, gen=gen).t()
    assert aligned_rows(one) is one
    sixteen = randn(40, 16, gen=gen)
    assert aligned_rows(sixteen) is sixteen


def test_supports_and_tile_floor(gen):
    assert supports(4096, torch.bfloat16) and supports(4096, torch.float32)
    assert not supports(2**31, torch.bfloat16) and not supports(64, torch.float64)
    W = random_nm(16, 16, 2, 8, gen, 1, 1, torch.float32)
    with pytest.raises(ValueError, match="at least 16"):
        _launch_poisoned(W, randn(16, 4, gen=gen, dtype=torch.float32), (16, 8, 16))
    W = random_nm(16, 24, 3, 8, gen, 1, 1, torch.float32)
    with pytest.raises(ValueError, match="power of two"):
        _launch_poisoned(W, randn(24, 4, gen=gen, dtype=torch.float32), grouped=True)
    with pytest.raises(ValueError, match="split"):
        _launch_poisoned(W, randn(24, 4, gen=gen, dtype=torch.float32), split=0)
    out = torch.empty(16, 5)
    with pytest.raises(ValueError, match="b needs at least out's 5 columns, got 4"):
        spmm_nm_expand(values=W.values, indices=W.indices, b=randn(24, 4, gen=gen), bias=None,
                       out=out, n=3, m=8, vector=1, block=1, activation="none", block_m=16,
                       block_s=16, block_n=16, num_warps=4, num_stages=2)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("pattern", [(1, 8, 1, 1), (2, 8, 1, 1), (2, 4, 1, 1), (16, 32, 64, 1)])
def test_llm_shape_on_gpu(dtype, pattern, gen):
    n, m, vector, block = pattern
    W = random_nm(4096, 1024, n, m, gen, vector, block, dtype, "cuda")
    B = randn(1024, 16, gen=gen, dtype=dtype, device="cuda")
    # the grouped form of 16:32 takes minutes to compile: the route keeps it to n <= 4
    for grouped, split in itertools.product((False, True) if n <= 4 else (False,), (1, 4)):
        got = _launch_poisoned(W, B, (64, 64, 16), grouped=grouped, split=split)
        assert_close(got, W.to_dense().double() @ B.double(), spmm_bound(W.to_dense(), B), dtype)


def test_expand_takes_sparse_half_precision_past_decode():
    """The measured window: 1:8 and sparser, element-wise or v < 16, half precision, 13-128
    tokens; 2:4, 2:8 and 4:8 (mostly the grouped form) to 64 tokens; v >= 16 has its own
    tensor-core kernel, and 4:16 or 3:8 are not measured."""
    from sparsekernels.kernels import tuning

    takes = tuning.spmm_nm_expand_takes
    assert takes(16, 1, 8, 1, True) and takes(128, 1, 16, 4, True) and takes(13, 1, 32, 1, True)
    assert not takes(12, 1, 8, 1, True) and not takes(129, 1, 8, 1, True)
    assert takes(16, 2, 8, 1, True) and takes(64, 2, 4, 2, True) and takes(128, 2, 16, 1, True)
    assert not takes(65, 2, 4, 1, True) and not takes(12, 2, 8, 1, True)
    assert takes(32, 4, 8, 1, True) and not takes(65, 4, 8, 1, True)
    assert not takes(32, 4, 16, 1, True) and not takes(32, 3, 8, 1, True)
    assert not takes(32, 1, 8, 16, True) and not takes(32, 2, 8, 64, True)
    assert not takes(32, 1, 8, 1, False) and not takes(32, 2, 4, 1, False)
    # small element-wise weights at 1:4 and sparser keep the decode kernel to 16 tokens
    small, large = 4096 * 4096, 14336 * 4096
    assert not takes(16, 2, 8, 1, True, small) and not takes(13, 1, 8, 1, True, small)
    assert takes(17, 1, 8, 1, True, small) and takes(16, 2, 8, 1, True, large)
    assert takes(16, 2, 4, 1, True, small) and takes(16, 1, 8, 4, True, small)
    # block-wise patterns skip the grouped form (4:8 b=4: 7-8x slower there on an H100)
    assert not takes(16, 4, 8, 4, True, block=4) and not takes(32, 2, 4, 1, True, block=2)
    assert takes(32, 1, 8, 1, True, block=4)  # (the slot form)
    # the dense backend steps aside where the kernel takes the product, and only there
    assert not tuning.spmm_nm_prefers_dense(64, (1, 8), 1, True)
    assert not tuning.spmm_nm_prefers_dense(64, (2, 8), 1, True)
    assert tuning.spmm_nm_prefers_dense(96, (2, 8), 1, True)
    assert not tuning.spmm_nm_prefers_dense(64, (4, 8), 1, True)
    assert tuning.spmm_nm_prefers_dense(64, (4, 16), 1, True)
    assert tuning.spmm_nm_prefers_dense(256, (1, 8), 1, True)
    assert tuning.spmm_nm_prefers_dense(64, (1, 8), 1, True, transpose=True)
    assert tuning.spmm_nm_prefers_dense(32, (4, 8), 4, True, block=4)  # (not grouped)
    assert not tuning.spmm_nm_prefers_dense(16, (4, 8), 4, True, block=4)  # (decode)


@pytest.mark.parametrize(
    ("pattern", "tokens", "expands"),
    [
        ((1, 8), 16, False),  # a small weight: the decode kernel to 16 tokens
        ((1, 8), 17, True),
        ((1, 8), 40, True),
        ((1, 8), 8, False),
        ((2, 8), 16, False),
        ((2, 8), 24, True),
        ((2, 4), 16, True),
        ((2, 4), 80, False),
        ((4, 8), 16, True),
        ((4, 16), 16, False),
    ],
)
def test_linear_routes_to_expand(pattern, tokens, expands, gen, monkeypatch):
    """linear in half precision takes this kernel in its window (bf16 too: on the CPU the
    launcher upcasts it, the interpreter's bf16 tl.dot being wrong); every route gives the
    product."""
    import sparsekernels as sk
    from sparsekernels.kernels import spmm_nm_expand

    calls = []
    launch = spmm_nm_expand.spmm_nm_expand
    monkeypatch.setattr(
        spmm_nm_expand, "spmm_nm_expand", lambda **kw: calls.append(1) or launch(**kw)
    )
    for dtype in (torch.float16, torch.bfloat16):
        W = random_nm(24, 64, *pattern, gen, 1, 1, dtype)
        x = randn(tokens, 64, gen=gen, dtype=dtype)
        got = sk.linear(x, W, backend="triton")
        assert got.is_contiguous()
        assert_close(got, x.double() @ W.to_dense().double().t(), spmm_bound(x, W.to_dense().t()),
                     dtype)  # fmt: skip
    assert bool(calls) == expands


@pytest.mark.parametrize(
    ("n", "m"), [(1, 4), (1, 8), (2, 4), (2, 8), (4, 8), (2, 16), (1, 32), (4, 32), (1, 64)]
)
@pytest.mark.parametrize("tokens", [13, 16, 32, 64, 128])
@pytest.mark.parametrize("rows", [1, 4096, 14336])
@pytest.mark.parametrize("element_bytes", [2, 4])
@pytest.mark.parametrize("grouped", [False, True])
def test_expand_config_fits_shared_memory(n, m, tokens, rows, element_bytes, grouped, monkeypatch):
    """Each stage holds the value and offset tiles and m tiles of B (one row per group when n
    folds): the configuration shrinks until its stages fit (1:16 at 64 tokens once asked for
    292 KiB of 227) and keeps tl.dot's 16-deep floor (16 groups when grouped)."""
    from sparsekernels.kernels import tuning

    monkeypatch.setattr(tuning, "EXPAND_GROUPED", grouped)
    tuning.spmm_nm_expand_config.cache_clear()
    c = tuning.spmm_nm_expand_config(tokens, n, m, rows, 4096 * n // m, element_bytes)
    tuning.spmm_nm_expand_config.cache_clear()
    slot_form = n == 2 and tokens <= 16  # measured faster there
    assert c.grouped == (grouped and (n, m) in tuning.EXPAND_GROUPED_PATTERNS and not slot_form)
    depth = c.block_s // n if c.grouped else c.block_s
    stage = c.block_m * c.block_s * (element_bytes + 1) + m * depth * c.block_n * element_bytes
    assert c.num_stages * stage <= tuning.EXPAND_SHARED_BYTES or c.num_stages == 1
    assert min(c.block_m, depth, c.block_n) >= 16
    assert c.block_n >= min(64, tokens) or stage * 2 > tuning.EXPAND_SHARED_BYTES


def test_expand_config_splits_few_rows():
    """Split-K where the row tiles leave multiprocessors idle: the most ranges that keep the
    programs within a wave (two at 128 tokens and in the grouped form) and 4 steps a range, as
    the H200 sweep measured; the measured tiles stay."""
    from sparsekernels.kernels import tuning

    config = tuning.spmm_nm_expand_config
    c = config(16, 1, 8, 14336, 512, 2)
    assert (c.block_m, c.split) == (64, 1)  # 224 programs
    assert config(64, 1, 8, 14336, 512, 2).split == 1  # 112 programs: splitting was slower
    c = config(16, 1, 8, 4096, 1792, 2)  # the down projection: 64 programs of 28 steps
    assert (c.block_m, c.split) == (64, 2)
    c = config(32, 1, 8, 4096, 1792, 2)  # 32 programs of 128 rows
    assert (c.block_m, c.split) == (128, 4)
    assert config(128, 1, 8, 4096, 1792, 2).split == 4  # 64 programs, two waves
    c = config(64, 2, 8, 4096, 3584, 2)  # grouped: 64 programs, two waves
    assert c.grouped and (c.block_m, c.split) == (64, 4)
    assert not config(16, 2, 8, 4096, 3584, 2).grouped  # the slot form at 16 tokens
    assert config(16, 1, 8, 4096, 64, 2).split == 1  # one step: nothing to split
    assert config(16, 1, 8, 100, 10**6, 2).split == 64  # 128 programs: capped by the grid


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("n", "m", "vector", "tokens", "dtype"),
    [(2, 16, 8, 24, torch.float16), (1, 16, 1, 17, torch.bfloat16),
     (4, 32, 8, 31, torch.float16), (2, 16, 1, 40, torch.float16)],
)  # fmt: skip
def test_linear_pads_b_for_the_expand_kernel_on_gpu(n, m, vector, tokens, dtype, gen,
                                                    monkeypatch):  # fmt: skip
    """Past 16 tokens linear hands this kernel x^T copied 16-column aligned (a 24-token B
    masked on N loaded 2 bytes a thread, unpipelined, and ran 1.7-2x slower than at 32),
    compiled, against float64. (fp16 where bf16 takes a 2:8 copy; the pairs kernel, which
    takes 8-row vectors at m = 16 / 32 and 17-48 tokens in both since the sixty-eighth, is
    turned off here: its own tests cover those shapes.)"""
    import sparsekernels as sk
    from sparsekernels.kernels import nm_pairs_tuning, spmm_nm_expand

    monkeypatch.setattr(nm_pairs_tuning, "PAIRS_ROUTE_PATTERNS", set())
    widths, launch = [], spmm_nm_expand.spmm_nm_expand
    monkeypatch.setattr(
        spmm_nm_expand,
        "spmm_nm_expand",
        lambda **kw: widths.append((kw["b"].shape[1], kw["b"].stride(0))) or launch(**kw),
    )
    W = random_nm(4096 + vector, 2048 + m, n, m, gen, vector, 1, dtype, "cuda")
    x = randn(tokens, W.shape[1], gen=gen, dtype=dtype, device="cuda")
    got = sk.linear(x, W)
    width = -(-tokens // 16) * 16
    assert widths == [(width, width)]
    want = x.double() @ W.to_dense().double().t()
    assert_close(got, want, spmm_bound(x, W.to_dense().t()), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("rows", "pattern"), [(4096, (1, 8)), (1000, (1, 16)), (333, (2, 16)), (300, (2, 4))]
)
@pytest.mark.parametrize("tokens", [13, 17, 64, 128])
def test_linear_route_on_gpu(rows, pattern, tokens, gen, monkeypatch):
    """linear's automatic route through this kernel in bf16: few-row weights (split-K), m = 16
    at 64 tokens (which once asked for more shared memory than the H200 has), and n = 2 (the
    grouped form). At 13 tokens the small 1:8 and 1:16 weights go to the decode kernel instead
    (tuning.EXPAND_SMALL_WEIGHT); at 17 they come back; 2:16 at 17-48 takes its 2:8 copy."""
    import sparsekernels as sk
    from sparsekernels.kernels import spmm_nm_expand, tuning
    from sparsekernels.kernels.nm_alias_tuning import nm_stored_as
    from sparsekernels.kernels.nm_mma_sp_tuning import spmm_nm_mma_sp_config
    from sparsekernels.kernels.nm_unpack_tuning import spmm_nm_unpack_config

    W = random_nm(rows, 2048, *pattern, gen, 1, 1, torch.bfloat16, "cuda")
    x = randn(tokens, 2048, gen=gen, dtype=torch.bfloat16, device="cuda")
    calls = []
    launch = spmm_nm_expand.spmm_nm_expand
    monkeypatch.setattr(
        spmm_nm_expand, "spmm_nm_expand", lambda **kw: calls.append(1) or launch(**kw)
    )
    got = sk.linear(x, W)
    grouped_only = pattern[0] / pattern[1] > 1 / 8
    # small element-wise weights of 1:4 and sparser go to the decode kernel to 16 tokens
    small = rows * 2048 <= tuning.EXPAND_SMALL_WEIGHT and pattern[0] * 4 <= pattern[1]
    want_kernel = (tokens <= 64 or not grouped_only) and not (small and tokens <= 16)
    unpacks = spmm_nm_unpack_config(tokens, *pattern, 1, 1, torch.bfloat16, rows) is not None
    want_kernel = want_kernel and not unpacks  # 2:4 to 16 tokens: the unpack kernel
    sparse_cores = spmm_nm_mma_sp_config(tokens, *pattern, 1, 1, torch.bfloat16, rows, 2048, 132)
    want_kernel = want_kernel and sparse_cores is None  # 2:4 to 32 tokens: mma.sp
    stored = nm_stored_as(tokens, *pattern, 1, 1, torch.bfloat16)
    want_kernel = want_kernel and stored is None  # 2:16 at 17-48 tokens: its 2:8 copy
    assert bool(calls) == want_kernel, "the route missed the kernel or took a small weight"
    want = x.double() @ W.to_dense().double().t()
    assert_close(got, want, spmm_bound(x, W.to_dense().t()), torch.bfloat16)
