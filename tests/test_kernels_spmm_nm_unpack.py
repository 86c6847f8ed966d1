"""The unpack N:M kernel (each step's groups unpacked into one dense tile for one tl.dot): in the
interpreter on CPU (small shapes, float16: the interpreter's bfloat16 tl.dot is broken) and
compiled on CUDA (gpu, bfloat16), against float64 references with poisoned outputs."""

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
from sparsekernels.kernels.spmm_nm_decode import packed_bits
from sparsekernels.kernels.spmm_nm_unpack import spmm_nm_unpack, supports
from sparsekernels.ops._triton_nm import packed_words

# (n, m, vector): the byte-permute form (n <= 2, m <= 8) with a byte of offsets a group (2:8),
# two (1:8, 2:4), four (1:4) and eight (1:2) groups a byte; the compare-select form with 16-bit
# (4:8), byte (2:16), int32 (8:16) and several-word (16:32) groups; rows sharing offsets.
PATTERNS = [
    (2, 8, 1),
    (1, 8, 1),
    (2, 4, 1),
    (1, 4, 1),
    (1, 2, 1),
    (4, 8, 1),
    (2, 16, 1),
    (8, 16, 1),
    (16, 32, 1),
    (2, 8, 3),
]


def _launch_poisoned(
    W, B, block_g=8, bias=None, activation="none", split=1, block_m=16, fused=True, pairs=None
):
    bits = packed_bits(W.m, W.block)
    out = torch.full((W.shape[0], B.shape[1]), float("nan"), dtype=B.dtype, device=B.device)
    spmm_nm_unpack(
        values=W.values,
        words=packed_words(W.indices, bits),
        bits=bits,
        b=B,
        bias=bias,
        out=out,
        n=W.n,
        m=W.m,
        vector=W.vector,
        activation=activation,
        block_m=block_m,
        block_g=block_g,
        block_n=16,
        num_warps=4,
        num_stages=2,
        split=split,
        fused=fused,
        block=W.block,
        pairs=pairs,
    )
    return out


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("tokens", [1, 3, 17])
def test_every_element_written(device, pattern, tokens, gen):
    """A partial last row tile, a walk whose last step is partial (masked) and one of full
    steps only, x^T as linear passes it and a row-major B; two column tiles at 17 tokens."""
    skip_interpreter_on_gpu_machine(device)
    n, m, vector = pattern
    block_g = 16 if m == 2 else 8 if m <= 16 else 4  # (1:2: two bytes of offsets a step)
    dtype = torch.bfloat16 if device == "cuda" else torch.float16
    for groups in (3 * block_g + 5, 2 * block_g):
        W = random_nm(2 * vector + 19, groups * m, n, m, gen, vector, 1, dtype, device)
        x = randn(tokens, groups * m, gen=gen, dtype=dtype, device=device)
        for B in (x.t(), x.t().contiguous()):
            got = _launch_poisoned(W, B, block_g)
            assert_close(
                got, W.to_dense().double() @ B.double(), spmm_bound(W.to_dense(), B), dtype
            )


# (n, m, vector, block): block-wise, a kept run of `block` columns per offset: one offset of 1
# bit a group (4:8 b=4, eight groups a byte), of 2 bits (4:16 b=4), two offsets a group
# (8:16 b=4, 16:32 b=8), a 3-bit offset in 4 bits (4:32 b=4), 2-column runs (2:4 b=2, one
# value a slot pair), rows sharing a choice and not (vectors of 4 and 3 rows).
BLOCK_PATTERNS = [
    (4, 8, 4, 4),
    (4, 16, 4, 4),
    (8, 16, 1, 4),
    (16, 32, 3, 8),
    (4, 32, 4, 4),
    (2, 4, 1, 2),
    (4, 8, 1, 2),
    (8, 16, 1, 2),  # 16-bit offsets a group
    (16, 32, 2, 2),  # 32-bit
]


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("pattern", BLOCK_PATTERNS)
@pytest.mark.parametrize("tokens", [1, 17])
@pytest.mark.parametrize("pairs", [None, False])
def test_block_wise_every_element_written(device, pattern, tokens, pairs, gen):
    """Block-wise weights: each offset names a run of `block` columns whose values are
    consecutive slots, the tile built from int32 pairs of values (by default, even blocks) or
    from 16-bit values. A partial last row tile, a partial last step (masked), x^T as linear
    passes it and a row-major B, two column tiles at 17 tokens."""
    skip_interpreter_on_gpu_machine(device)
    n, m, vector, block = pattern
    block_g = 16 if m // block == 2 else 8  # (1-bit offsets: two bytes a step at 16 groups)
    dtype = torch.bfloat16 if device == "cuda" else torch.float16
    groups = 2 * block_g + 5
    W = random_nm(2 * vector + 19, groups * m, n, m, gen, vector, block, dtype, device)
    x = randn(tokens, groups * m, gen=gen, dtype=dtype, device=device)
    for B in (x.t(), x.t().contiguous()):
        got = _launch_poisoned(W, B, block_g, pairs=pairs)
        want = W.to_dense().double() @ B.double()
        assert_close(got, want, spmm_bound(W.to_dense(), B), dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_block_wise_values_off_4_byte_alignment(device, gen):
    """Values whose rows start off a 4-byte boundary (a view one element in) cannot be read
    as pairs: by default the kernel reads them 16 bits at a time, and asking for pairs is a
    ValueError."""
    skip_interpreter_on_gpu_machine(device)
    dtype = torch.bfloat16 if device == "cuda" else torch.float16
    W = random_nm(21, 16 * 8, 4, 8, gen, 4, 4, dtype, device)
    shifted = torch.empty(W.values.numel() + 1, dtype=dtype, device=device)[1:]
    shifted.copy_(W.values.reshape(-1))
    W.values = shifted.view(W.values.shape)
    x = randn(5, 16 * 8, gen=gen, dtype=dtype, device=device)
    got = _launch_poisoned(W, x.t(), 16)
    assert_close(got, W.to_dense().double() @ x.t().double(), spmm_bound(W.to_dense(), x.t()),
                 dtype)  # fmt: skip
    with pytest.raises(ValueError, match="pairs need"):
        _launch_poisoned(W, x.t(), 16, pairs=True)


def test_block_wise_a_moved_block_is_caught(gen):
    """The tolerance would see one block misplaced: row 5's values moved one block over in
    every group change that row only, and the kernel's product is not that."""
    W = random_nm(20, 128, 4, 16, gen, 1, 4, torch.float16)
    x = randn(128, 4, gen=gen, dtype=torch.float16)
    got = _launch_poisoned(W, x)
    wrong = W.to_dense().double().clone()
    wrong[5] = wrong[5].roll(4)
    with pytest.raises(AssertionError):
        assert_close(got, wrong @ x.double(), spmm_bound(W.to_dense(), x), torch.float16)
    assert_close(got, W.to_dense().double() @ x.double(), spmm_bound(W.to_dense(), x),
                 torch.float16)  # fmt: skip


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("fused", [True, False])
def test_block_wise_split(device, fused, gen):
    """Block-wise (4:16 b=4, pairs) in 3 ranges of groups with bias and GELU, summed by the last
    range of a tile or a second kernel: the same bits either way, against float64."""
    skip_interpreter_on_gpu_machine(device)
    dtype = torch.bfloat16 if device == "cuda" else torch.float16
    W = random_nm(37, 7 * 8 * 16, 4, 16, gen, 4, 4, dtype, device)
    B = randn(7 * 8 * 16, 5, gen=gen, dtype=dtype, device=device)
    bias = randn(37, gen=gen, dtype=dtype, device=device)
    want = torch.nn.functional.gelu(W.to_dense().double() @ B.double() + bias.double()[:, None])
    bound = spmm_bound(W.to_dense(), B) + bias.double().abs()[:, None]
    got = _launch_poisoned(W, B, 8, bias, "gelu", 3, fused=fused)
    assert_close(got, want, bound, dtype)
    assert torch.equal(got, _launch_poisoned(W, B, 8, bias, "gelu", 3, fused=not fused))


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("pattern", [(2, 8, 1), (4, 8, 1), (1, 4, 2)])
@pytest.mark.parametrize("split", [1, 3, 64])
@pytest.mark.parametrize("fused", [True, False])
def test_bias_activation_and_split(device, pattern, split, fused, gen):
    """Split-K sums each range into the float32 workspace, then bias and activation in the
    last range of a tile to finish (fused) or a second kernel; at 64 more ranges are asked
    for than steps (only non-empty ones launch). Both sum the planes in one order: the same
    bits."""
    skip_interpreter_on_gpu_machine(device)
    n, m, vector = pattern
    dtype = torch.bfloat16 if device == "cuda" else torch.float16
    W = random_nm(37, 13 * 8 * m, n, m, gen, vector, 1, dtype, device)
    B = randn(13 * 8 * m, 5, gen=gen, dtype=dtype, device=device)
    bias = randn(37, gen=gen, dtype=dtype, device=device)
    want = torch.nn.functional.gelu(W.to_dense().double() @ B.double() + bias.double()[:, None])
    bound = spmm_bound(W.to_dense(), B) + bias.double().abs()[:, None]
    got = _launch_poisoned(W, B, 8, bias, "gelu", split, fused=fused)
    assert_close(got, want, bound, dtype)
    assert torch.equal(got, _launch_poisoned(W, B, 8, bias, "gelu", split, fused=not fused))


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize(("pattern", "split"), [((2, 8, 1, 1), 1), ((4, 8, 4, 4), 3)])
def test_padded_b_columns_are_read_never_stored(device, pattern, split, gen):
    """B may be wider than the product (ops/_layout.aligned_rows' copies of a row-major B):
    its columns past N are read, which keeps the loads wide, and never reach the output,
    whatever they hold (here random values; the copies hold zeros). 24 tokens in a 32-wide B,
    element-wise and block-wise, one K range and three summed."""
    skip_interpreter_on_gpu_machine(device)
    n, m, vector, block = pattern
    dtype = torch.bfloat16 if device == "cuda" else torch.float16
    W = random_nm(37, 21 * m, n, m, gen, vector, block, dtype, device)
    B = randn(21 * m, 24, gen=gen, dtype=dtype, device=device)
    wide = torch.cat([B, randn(21 * m, 8, gen=gen, dtype=dtype, device=device)], dim=1)
    bits = packed_bits(m, block)
    out = torch.full((37, 24), float("nan"), dtype=dtype, device=device)
    spmm_nm_unpack(values=W.values, words=packed_words(W.indices, bits), bits=bits, b=wide,
                   bias=None, out=out, n=n, m=m, vector=vector, activation="none", block_m=16,
                   block_g=16, block_n=16, num_warps=4, num_stages=2, split=split,
                   block=block)  # fmt: skip
    assert_close(out, W.to_dense().double() @ B.double(), spmm_bound(W.to_dense(), B), dtype)
    with pytest.raises(ValueError, match="at least out's 24 columns"):
        spmm_nm_unpack(values=W.values, words=packed_words(W.indices, bits), bits=bits,
                       b=B[:, :20], bias=None, out=out, n=n, m=m, vector=vector,
                       activation="none", block_m=16, block_g=16, block_n=16, num_warps=4,
                       num_stages=2, block=block)  # fmt: skip


def test_a_bad_row_is_caught(gen):
    """The tolerance would see one row of the product wrong: a value moved to another
    position in its group changes that row only."""
    W = random_nm(20, 64, 2, 8, gen, 1, 1, torch.float16)
    x = randn(64, 4, gen=gen, dtype=torch.float16)
    got = _launch_poisoned(W, x)
    want = W.to_dense().double() @ x.double()
    wrong = W.to_dense().double().clone()
    wrong[7] = wrong[7].roll(1)  # every kept value of row 7 one column over
    with pytest.raises(AssertionError):
        assert_close(got, wrong @ x.double(), spmm_bound(W.to_dense(), x), torch.float16)
    assert_close(got, want, spmm_bound(W.to_dense(), x), torch.float16)


def test_supports_and_bad_tiles(gen):
    assert supports(2, 8, 1, torch.bfloat16, 4096) and supports(16, 32, 1, torch.float16, 64)
    assert supports(4, 8, 4, torch.bfloat16, 4096) and supports(2, 8, 2, torch.bfloat16, 64)
    assert not supports(64, 128, 64, torch.bfloat16, 4096)  # m past 32
    assert not supports(2, 8, 4, torch.bfloat16, 4096)  # (not a pattern: block past n)
    assert not supports(3, 8, 1, torch.bfloat16, 4096)  # n not a power of two
    assert not supports(1, 64, 1, torch.bfloat16, 4096)  # m past 32
    assert not supports(2, 8, 1, torch.float32, 4096) and not supports(
        2, 8, 1, torch.bfloat16, 2**31
    )
    W = random_nm(16, 64, 1, 16, gen, 1, 1, torch.float16)
    x = randn(64, 2, gen=gen, dtype=torch.float16)
    with pytest.raises(ValueError, match="at least 16"):
        _launch_poisoned(W, x, block_m=8)
    with pytest.raises(ValueError, match="whole bytes"):
        _launch_poisoned(W, x, block_g=1)  # 1:16 packs two groups a byte
    W = random_nm(16, 64, 1, 2, gen, 1, 1, torch.float16)
    with pytest.raises(ValueError, match="two at least"):
        _launch_poisoned(W, x, block_g=8)  # 1:2: one byte a step
    W = random_nm(16, 64, 4, 8, gen, 4, 4, torch.float16)
    with pytest.raises(ValueError, match="block 4"):
        _launch_poisoned(W, x, block_g=8)  # 4:8 b=4: 1 bit a group, one byte a step
    with pytest.raises(ValueError, match="does not take"):
        _launch_poisoned(W, x.float(), block_g=16)


def test_route_takes_the_measured_window(monkeypatch):
    """bf16 element-wise 2:4 from 4 tokens, 2:8 from 8 and 1:8 from 13, to 64; few-row weights
    split (4096 rows: four ranges) on 64-token column tiles past 16 tokens, tall ones do not
    split and take 32 or 64 tokens a tile; vector-wise rows at 17-64 tokens (v >= 16 to 24,
    then 33-64 below 8192 rows; 2:8 and 1:8 only past 32); nothing else."""
    from sparsekernels.kernels.nm_unpack_tuning import spmm_nm_unpack_config as config

    bf16 = torch.bfloat16
    c = config(4, 2, 4, 1, 1, bf16, 4096)
    assert (c.split, c.block_n, c.num_stages) == (4, 16, 3)
    assert config(16, 2, 4, 1, 1, bf16, 14336).split == 1
    assert config(8, 2, 8, 1, 1, bf16, 28672).split == 1 and config(16, 1, 8, 1, 1, bf16, 4096)
    c = config(17, 2, 8, 1, 1, bf16, 4096)
    assert (c.split, c.block_n, c.num_stages) == (4, 64, 2)
    assert config(32, 2, 8, 1, 1, bf16, 14336).block_n == 32
    assert config(33, 2, 8, 1, 1, bf16, 14336).block_n == 64
    assert config(64, 1, 8, 1, 1, bf16, 14336).block_n == 64
    assert config(32, 1, 8, 4, 1, bf16, 14336).block_n == 32  # vectors
    assert config(24, 1, 8, 64, 1, bf16, 14336).block_n == 32
    assert config(25, 1, 8, 64, 1, bf16, 14336) is None  # v >= 16: condensed K from 25
    assert config(33, 2, 8, 4, 1, bf16, 14336).block_n == 64  # v < 16 to 64 tokens
    assert config(64, 1, 8, 4, 1, bf16, 4096).split == 4
    assert config(33, 2, 8, 64, 1, bf16, 14336) is None  # v >= 16 on tall weights past 32
    assert config(64, 1, 8, 64, 1, bf16, 8192) is None
    assert config(33, 1, 8, 64, 1, bf16, 8191).split == 2  # ... and below 8192 rows
    assert config(64, 2, 8, 64, 1, bf16, 4096).block_n == 64
    assert config(32, 2, 8, 64, 1, bf16, 4096) is None  # (25-32: the wgmma kernel's)
    assert config(33, 2, 4, 4, 1, bf16, 4096) is None  # 2:4 vectors not timed past 32
    assert config(65, 2, 8, 4, 1, bf16, 4096) is None
    assert config(24, 2, 8, 4, 1, bf16, 2048) is None  # (vectors timed from 4096 rows)
    assert config(48, 2, 8, 4, 1, bf16, 2048) is None
    # block-wise 4:8 and 4:16, v = b = 4, at 4-64 tokens: 16 groups a step, 16-token column
    # tiles split to 256 programs, or past 16 tokens on 8192+ rows one 64-token tile
    c = config(4, 4, 8, 4, 4, bf16, 4096)
    assert (c.block_g, c.split, c.block_n, c.num_stages) == (16, 4, 16, 3)
    assert config(32, 4, 16, 4, 4, bf16, 4096).split == 2
    assert config(64, 4, 8, 4, 4, bf16, 4096).split == 1
    c = config(16, 4, 16, 4, 4, bf16, 14336)
    assert (c.split, c.block_n) == (1, 16)
    c = config(17, 4, 8, 4, 4, bf16, 14336)
    assert (c.block_g, c.split, c.block_n, c.num_stages) == (16, 1, 64, 2)
    for args in [
        (3, 4, 8, 4, 4, bf16),  # (1-3 tokens: the decode kernel's, not timed against)
        (65, 4, 8, 4, 4, bf16),
        (16, 4, 8, 4, 4, torch.float16),
        (65, 4, 8, 8, 4, bf16),  # other vectors, blocks, patterns and tokens not timed
        (16, 4, 8, 32, 4, bf16),
        (16, 4, 8, 1, 4, bf16),
        (16, 4, 8, 4, 2, bf16),
        (16, 8, 16, 4, 4, bf16),
    ]:
        assert config(*args, 4096) is None, args
    assert config(16, 4, 8, 4, 4, bf16, 4095) is None  # (timed from 4096 rows)
    for args in [
        (3, 2, 4, 1, 1, bf16),
        (65, 2, 4, 1, 1, bf16),
        (7, 2, 8, 1, 1, bf16),
        (12, 1, 8, 1, 1, bf16),
        (16, 2, 8, 2, 1, bf16),  # vectors below 17 tokens
        (20, 2, 8, 4, 1, torch.float16),
        (16, 2, 8, 1, 1, torch.float16),  # not timed
        (16, 4, 8, 1, 1, bf16),
    ]:
        assert config(*args, 4096) is None, args


def test_route_takes_few_token_vectors():
    """4:8 in vectors of 8+ rows at 8-16 tokens on 4096+ rows (not where v = 64 takes the
    few-token tensor-core tiles: 8192+ rows, or 5-16 tokens), v = 8 and 16 to 64 tokens;
    block-wise 4:8 and 4:16 in 8-row vectors (b = 4) at 4-64 tokens, 4:8 in 16-row ones at
    8-64; bf16 and fp16."""
    from sparsekernels.kernels.nm_unpack_tuning import spmm_nm_unpack_config as config

    bf16 = torch.bfloat16
    for vector in (8, 16, 32):
        c = config(12, 4, 8, vector, 1, bf16, 4096)
        assert (c.block_g, c.block_n, c.split, c.num_stages) == (32, 16, 4, 3)
        assert config(8, 4, 8, vector, 1, bf16, 4096) is not None
        for tokens in (4, 7, 65):
            assert config(tokens, 4, 8, vector, 1, bf16, 4096) is None, (vector, tokens)
        wide = config(17, 4, 8, vector, 1, bf16, 4096)
        assert (wide is not None) == (vector < 32), vector  # (v >= 32 past 16: untimed)
        assert config(12, 4, 8, vector, 1, bf16, 2048) is None  # (untimed below 4096 rows)
        assert config(12, 4, 8, vector, 1, torch.float16, 4096) == c  # (fp16 timed there too)
        assert config(12, 4, 8, vector, 1, torch.float32, 4096) is None
    assert config(16, 4, 8, 16, 1, bf16, 14336).split == 1
    c = config(24, 4, 8, 16, 1, bf16, 14336)
    assert (c.block_g, c.block_n, c.split) == (32, 32, 1)
    assert config(64, 4, 8, 8, 1, torch.float16, 4096).block_n == 64
    assert config(16, 4, 8, 64, 1, bf16, 4096) is None  # the few-token tensor-core tiles
    assert config(8, 4, 8, 64, 1, bf16, 4096) is None  # (theirs from 5 tokens)
    assert config(8, 4, 8, 32, 1, bf16, 4096) == config(8, 4, 8, 8, 1, bf16, 4096)
    assert config(12, 4, 8, 64, 1, bf16, 14336) is None  # (tall: theirs)
    assert config(12, 4, 8, 4, 1, bf16, 4096) is None  # v = 4 keeps its route
    assert config(12, 4, 16, 8, 1, bf16, 4096) is None  # 4:16 element-wise: untimed
    for n, m, vector, fewest in ((4, 8, 8, 4), (4, 16, 8, 4), (4, 8, 16, 8)):
        c = config(fewest, n, m, vector, 4, bf16, 14336)
        assert (c.block_g, c.block_n, c.split) == (16, 16, 1)
        assert config(16, n, m, vector, 4, bf16, 4096).split == 4
        assert config(fewest - 1, n, m, vector, 4, bf16, 4096) is None
        c = config(17, n, m, vector, 4, bf16, 14336)
        assert (c.block_g, c.block_n, c.split) == (16, 64, 1)
        assert config(64, n, m, vector, 4, torch.float16, 4096).block_n == 16  # (4 tiles)
        assert config(65, n, m, vector, 4, bf16, 4096) is None  # (untimed past 64)
    assert config(8, 4, 16, 16, 4, bf16, 4096) is None
    assert config(8, 4, 8, 8, 4, torch.float16, 4096) == config(8, 4, 8, 8, 4, bf16, 4096)
    assert config(8, 4, 8, 4, 4, torch.float16, 4096) is None  # (v = 4: bf16-timed only)
    assert config(40, 4, 8, 4, 4, bf16, 14336).block_n == 64  # v = b = 4 as before


@pytest.mark.parametrize(
    ("n", "m", "tokens", "vector"),
    [(2, 8, 9, 1), (2, 4, 4, 1), (1, 8, 16, 1), (2, 4, 40, 1), (1, 8, 20, 4), (2, 8, 24, 8),
     (4, 8, 12, 8)],
)  # fmt: skip
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_linear_routes_through_unpack(n, m, tokens, vector, dtype, gen, monkeypatch):
    """linear takes the kernel in its window (bf16; made to include float16 here too), with
    bias, and gives the product in x's layout. In the interpreter the kernel's dot runs in
    float32 (the interpreter's bfloat16 tl.dot is wrong), the same products."""
    import sparsekernels as sk
    from sparsekernels.kernels import nm_unpack_tuning, spmm_nm_unpack

    monkeypatch.setattr(nm_unpack_tuning, "UNPACK_DTYPES", (torch.bfloat16, torch.float16))
    monkeypatch.setattr(nm_unpack_tuning.nm_wgmma_tuning, "VECTOR_MIN_ROWS", 1)  # (vectors)
    monkeypatch.setattr(nm_unpack_tuning, "UNPACK_FEW_VECTOR_MIN_ROWS", 1)
    calls = []
    launch = spmm_nm_unpack.spmm_nm_unpack
    monkeypatch.setattr(
        spmm_nm_unpack, "spmm_nm_unpack", lambda **kw: calls.append(kw["split"]) or launch(**kw)
    )
    W = random_nm(40, 96, n, m, gen, vector, 1, dtype)
    x = randn(tokens, 96, gen=gen, dtype=dtype)
    bias = randn(40, gen=gen, dtype=dtype)
    got = sk.linear(x, W, bias, backend="triton")
    want = x.double() @ W.to_dense().double().t() + bias.double()
    assert calls == [4] and got.is_contiguous()
    assert_close(got, want, spmm_bound(x, W.to_dense().t()) + bias.double().abs(), dtype)


@pytest.mark.parametrize(
    ("n", "m", "tokens", "vector"),
    [(4, 8, 4, 4), (4, 16, 16, 4), (4, 8, 40, 4), (4, 8, 12, 8), (4, 16, 4, 8), (4, 8, 9, 16)],
)
def test_linear_routes_block_wise_through_unpack(n, m, tokens, vector, gen, monkeypatch):
    """linear takes the kernel for block-wise b = 4 in 4-, 8- and 16-row vectors (made to
    include float16 here), with bias: a 64-token column tile past 16 tokens on tall weights,
    16-token tiles split on others."""
    import sparsekernels as sk
    from sparsekernels.kernels import nm_unpack_tuning, spmm_nm_unpack

    monkeypatch.setattr(nm_unpack_tuning, "UNPACK_DTYPES", (torch.float16,))
    monkeypatch.setattr(nm_unpack_tuning, "UNPACK_BLOCK_WIDE_MIN_ROWS", 64)  # (a small weight)
    monkeypatch.setattr(nm_unpack_tuning, "UNPACK_BLOCK_MIN_ROWS", 64)
    calls = []
    launch = spmm_nm_unpack.spmm_nm_unpack
    monkeypatch.setattr(
        spmm_nm_unpack,
        "spmm_nm_unpack",
        lambda **kw: calls.append((kw["block"], kw["block_n"])) or launch(**kw),
    )
    W = random_nm(80, 256, n, m, gen, vector, 4, torch.float16)  # (a partial row tile)
    x = randn(tokens, 256, gen=gen, dtype=torch.float16)
    bias = randn(80, gen=gen, dtype=torch.float16)
    got = sk.linear(x, W, bias, backend="triton")
    want = x.double() @ W.to_dense().double().t() + bias.double()
    assert calls == [(4, 64 if tokens > 16 else 16)] and got.is_contiguous()
    assert_close(got, want, spmm_bound(x, W.to_dense().t()) + bias.double().abs(), torch.float16)


@pytest.mark.parametrize("tokens", [9, 24, 33])
@pytest.mark.parametrize("align_row_major", [False, True])
def test_spmm_reads_a_row_major_b_16_column_aligned(tokens, align_row_major, gen, monkeypatch):
    """spmm with a row-major B (a user's, or SparseConv2d's pixels) of a width that is no
    multiple of 16 hands the kernel B as it is, or with _layout.ALIGN_ROW_MAJOR_B copied to a
    multiple of 16 (its loads stay wide); the product is N wide, in B's order."""
    import sparsekernels as sk
    from sparsekernels.kernels import nm_unpack_tuning, spmm_nm_unpack
    from sparsekernels.ops import _layout

    monkeypatch.setattr(_layout, "ALIGN_ROW_MAJOR_B", align_row_major)
    monkeypatch.setattr(nm_unpack_tuning, "UNPACK_DTYPES", (torch.bfloat16, torch.float16))
    widths = []
    launch = spmm_nm_unpack.spmm_nm_unpack
    monkeypatch.setattr(
        spmm_nm_unpack,
        "spmm_nm_unpack",
        lambda **kw: widths.append((kw["b"].shape[1], kw["b"].stride())) or launch(**kw),
    )
    W = random_nm(40, 96, 2, 8, gen, 1, 1, torch.float16)
    B = randn(96, tokens, gen=gen, dtype=torch.float16)
    got = sk.spmm(W, B, backend="triton")
    width = -(-tokens // 16) * 16 if align_row_major else tokens
    assert widths == [(width, (width, 1))] and got.shape == (40, tokens) and got.is_contiguous()
    assert_close(got, W.to_dense().double() @ B.double(), spmm_bound(W.to_dense(), B),
                 torch.float16)  # fmt: skip


def test_block_wise_window_is_not_densified():
    """Past 16 tokens the dense backend (densify, then cuBLAS) took block-wise v = b = 4
    ahead of the Triton route: where the unpack kernel's window runs (112.7 against 46.9 us
    at 32 tokens; v = 8: 109.7 against 46.7) it leaves the product to Triton; outside it (65
    tokens, fp16 for v = 4, W^T @ B) it densifies as before."""
    from sparsekernels.ops import _dispatch
    from sparsekernels.ops._dense import nm_prefers_dense

    def dense(tokens, pattern=(4, 8, 4, 4), dtype=torch.bfloat16, rows=14336, transpose=False):
        facts = dict(n=tokens, pattern=pattern, transpose=transpose, shape=(rows, 4096))
        return nm_prefers_dense(_dispatch.Problem(torch.device("cuda"), dtype, facts))

    for tokens in (17, 32, 64):
        assert not dense(tokens) and not dense(tokens, rows=4096)
        assert not dense(tokens, pattern=(4, 16, 4, 4))
    assert dense(65) and dense(32, dtype=torch.float16) and dense(32, transpose=True)
    assert not dense(32, pattern=(4, 8, 8, 4)) and not dense(24, (4, 16, 8, 4), torch.float16)
    assert dense(65, pattern=(4, 8, 8, 4))  # (past 64 tokens)
    assert dense(32, rows=4095)  # (timed from 4096 rows)


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "m"), [(2, 8), (1, 8), (2, 4), (4, 8)])
@pytest.mark.parametrize("tokens", [1, 8, 16])
@pytest.mark.parametrize("split", [1, 4])
def test_llm_tiles_on_gpu(n, m, tokens, split, gen):
    """The routed tiles (64 rows x 32 groups, 4 warps, 3 stages) compiled on the H200, bf16, a
    row count off the tile and K off the step."""
    W = random_nm(1000 + 5, 4096 + 8 * m, n, m, gen, 1, 1, torch.bfloat16, "cuda")
    x = randn(tokens, 4096 + 8 * m, gen=gen, dtype=torch.bfloat16, device="cuda")
    bits = packed_bits(m, 1)
    out = torch.full((1005, tokens), float("nan"), dtype=torch.bfloat16, device="cuda")
    spmm_nm_unpack(
        values=W.values, words=packed_words(W.indices, bits), bits=bits, b=x.t(), bias=None,
        out=out, n=n, m=m, vector=1, activation="none", block_m=64, block_g=32, block_n=16,
        num_warps=4, num_stages=3, split=split,
    )  # fmt: skip
    want = W.to_dense().double() @ x.t().double()
    assert_close(out, want, spmm_bound(W.to_dense(), x.t()), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("n", "m", "tokens", "vector"),
    [(2, 8, 8, 1), (2, 4, 4, 1), (1, 8, 16, 1), (2, 8, 16, 1), (2, 8, 33, 1), (1, 8, 64, 1),
     (2, 8, 40, 4), (1, 8, 64, 64)],
)  # fmt: skip
@pytest.mark.parametrize("rows", [4096, 14336 + 3])
def test_linear_route_on_gpu(n, m, tokens, vector, rows, gen, monkeypatch):
    """linear's route through the kernel on a few-row (split, 64-token tiles past 16 tokens)
    and a tall weight, bf16, with bias; vector-wise rows past 32 tokens take it for v < 16,
    and for v >= 16 below 8192 rows only."""
    import sparsekernels as sk
    from sparsekernels.kernels import spmm_nm_unpack

    calls, launch = [], spmm_nm_unpack.spmm_nm_unpack
    monkeypatch.setattr(
        spmm_nm_unpack, "spmm_nm_unpack", lambda **kw: calls.append(1) or launch(**kw)
    )
    rows += -rows % vector  # (whole vectors; 14340 rows at v = 4: a partial row tile)
    W = random_nm(rows, 2048, n, m, gen, vector, 1, torch.bfloat16, "cuda")
    x = randn(tokens, 2048, gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(rows, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = sk.linear(x, W, bias)
    if vector > 1:
        assert calls == ([1] if vector < 16 or rows < 8192 else [])
    want = x.double() @ W.to_dense().double().t() + bias.double()
    assert_close(got, want, spmm_bound(x, W.to_dense().t()) + bias.double().abs(), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "m"), [(4, 8), (4, 16)])
@pytest.mark.parametrize("tokens", [4, 16, 40])
@pytest.mark.parametrize("rows", [4096, 14336 + 4])
def test_linear_route_block_wise_on_gpu(n, m, tokens, rows, gen, monkeypatch):
    """Block-wise v = b = 4 through linear on a few-row (split) and a tall weight (64-token
    tiles past 16 tokens; a partial row tile), bf16, with bias."""
    import sparsekernels as sk
    from sparsekernels.kernels import spmm_nm_unpack

    calls, launch = [], spmm_nm_unpack.spmm_nm_unpack
    monkeypatch.setattr(
        spmm_nm_unpack, "spmm_nm_unpack", lambda **kw: calls.append(1) or launch(**kw)
    )
    W = random_nm(rows, 2048 + m, n, m, gen, 4, 4, torch.bfloat16, "cuda")
    x = randn(tokens, 2048 + m, gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(rows, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = sk.linear(x, W, bias)
    assert calls == [1]
    want = x.double() @ W.to_dense().double().t() + bias.double()
    assert_close(got, want, spmm_bound(x, W.to_dense().t()) + bias.double().abs(), torch.bfloat16)
