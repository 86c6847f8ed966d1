"""The sparse-tensor-core N:M kernel (mma.sp through inline PTX, Gluon, sm_80+): compiled on
the H200 against float64 references with poisoned outputs. On the CPU only its argument
checks run (Gluon has no interpreter; test_compile_hopper.py compiles it for sm_90 here)."""

import pytest
import torch

from _helpers import assert_close, randn, random_nm, spmm_bound
from sparsekernels.kernels.nm_mma_sp_operands import class_words, metadata_words, permuted_b
from sparsekernels.kernels.spmm_nm_mma_sp import spmm_nm_mma_sp, supports

TILES = [(1, 8, 2), (1, 4, 1), (2, 4, 4), (2, 8, 1)]  # (m16 tiles a warp, k32 blocks, n8 tiles)


def _launch_poisoned(W, B, tile=(1, 8, 2), bias=None, activation="none", split=1, fused=True,
                     **extra):  # fmt: skip
    out = torch.full((W.shape[0], B.shape[1]), float("nan"), dtype=B.dtype, device=B.device)
    m_tiles, blocks, n_tiles = tile
    rows, vector = W.shape[0], W.vector
    classes = class_words(W.indices, rows, vector, W.n) if W.m == 8 else None
    spmm_nm_mma_sp(
        values=W.values, metadata=metadata_words(W.indices, rows, vector, W.n, W.m), b=B,
        n=W.n, m=W.m, classes=classes, bias=bias, out=out, activation=activation, m_tiles=m_tiles,
        blocks=blocks, n_tiles=n_tiles, split=split, fused=fused, **extra,
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
@pytest.mark.parametrize("n", [2, 1])
@pytest.mark.parametrize("tile", [(1, 8, 1), (1, 8, 2), (2, 8, 1), (2, 8, 2), (2, 8, 4)])
@pytest.mark.parametrize("tokens", [1, 5, 16, 17])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("vector", [1, 3])
@pytest.mark.parametrize("natural_b", [False, True])
def test_m8_every_element_written(n, tile, tokens, dtype, vector, natural_b, gen):
    """2:8 and 1:8 as two 2:4 halves a group (each value once, by its class): a partial last
    row tile; walks whose last step is partial (masked), of full steps only and of one group
    (1:8: two, K a multiple of 16); x^T and a row-major B; rows sharing offsets; B permuted
    before the launch or in the kernel."""
    for groups in (3 * 32 + 3 + 3 * (n == 1), 2 * 32, 3 - n):  # (1:8: whole words, even)
        W = random_nm(2 * vector + 67, groups * 8, n, 8, gen, vector, 1, dtype, "cuda")
        x = randn(tokens, groups * 8, gen=gen, dtype=dtype, device="cuda")
        for B in (x.t(), x.t().contiguous()):
            got = _launch_poisoned(W, B, tile, split=2, natural_b=natural_b)
            assert_close(
                got, W.to_dense().double() @ B.double(), spmm_bound(W.to_dense(), B), dtype
            )


@pytest.mark.gpu
@pytest.mark.parametrize("n", [2, 1])
@pytest.mark.parametrize("split", [1, 3])
def test_m8_bias_activation_and_split(n, split, gen):
    """2:8 and 1:8 on an LLM-deep weight: bias and GELU after the split ranges' sum."""
    W = random_nm(1000 + 5, 4096 + 8 * 8, n, 8, gen, 1, 1, torch.bfloat16, "cuda")
    x = randn(9, 4096 + 8 * 8, gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(1005, gen=gen, dtype=torch.bfloat16, device="cuda")
    want = torch.nn.functional.gelu(x.double() @ W.to_dense().double().t() + bias.double())
    got = _launch_poisoned(W, x.t(), bias=bias, activation="gelu", split=split)
    bound = spmm_bound(x, W.to_dense().t()) + bias.double().abs()
    assert_close(got.t(), want, bound, torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "m"), [(2, 4), (2, 8)])
@pytest.mark.parametrize("natural_b", [False, True])
def test_operands_off_their_alignment(n, m, natural_b, gen):
    """x^T and the values one element past an aligned address (contiguous, so a copy must not
    be skipped as contiguous() would): the kernel copies them rather than read words across."""
    W = random_nm(70, 32 * 8, n, m, gen, 1, 1, torch.bfloat16, "cuda")
    flat = randn(5 * 256 + 1, gen=gen, dtype=torch.bfloat16, device="cuda")
    x = flat[1:].view(5, 256)
    values_buffer = torch.empty(W.values.numel() + 1, dtype=W.values.dtype, device="cuda")
    values = values_buffer[1:].view_as(W.values)
    values.copy_(W.values)
    out = torch.full((70, 5), float("nan"), dtype=torch.bfloat16, device="cuda")
    classes = class_words(W.indices, 70, 1, n) if m == 8 else None
    spmm_nm_mma_sp(
        values=values, metadata=metadata_words(W.indices, 70, 1, n, m), b=x.t(), n=n, m=m,
        classes=classes, bias=None, out=out, activation="none", natural_b=natural_b,
    )  # fmt: skip
    dense = W.to_dense()
    assert_close(out, dense.double() @ x.t().double(), spmm_bound(dense, x.t()), torch.bfloat16)


def test_bad_patterns_are_said(gen):
    """Said before any device work: 2:8 without class_words or with 4 k32 blocks a step, B's
    16-byte stores without B permuted in the kernel, a pattern the kernel has no form for,
    1:8 values that do not fill whole words."""
    W = random_nm(16, 256, 2, 8, gen, 1, 1, torch.bfloat16)
    x = randn(256, 2, gen=gen, dtype=torch.bfloat16)
    out = torch.empty(16, 2, dtype=torch.bfloat16)
    metadata = metadata_words(W.indices, 16, 1, 2, 8)
    with pytest.raises(ValueError, match="classes"):
        spmm_nm_mma_sp(values=W.values, metadata=metadata, b=x, m=8, bias=None, out=out,
                       activation="none")  # fmt: skip
    with pytest.raises(ValueError, match="blocks must be 4 or 8"):
        spmm_nm_mma_sp(values=W.values, metadata=metadata, b=x, m=8, bias=None, out=out,
                       activation="none", blocks=4, classes=metadata)  # fmt: skip
    with pytest.raises(ValueError, match="wide_b_stores"):
        spmm_nm_mma_sp(values=W.values, metadata=metadata, b=x, m=8, bias=None, out=out,
                       activation="none", classes=metadata, wide_b_stores=True)  # fmt: skip
    with pytest.raises(ValueError, match="n:m must be"):
        spmm_nm_mma_sp(values=W.values, metadata=metadata, b=x, n=4, m=8, bias=None, out=out,
                       activation="none", classes=metadata)  # fmt: skip
    W = random_nm(16, 8 * 3, 1, 8, gen, 1, 1, torch.bfloat16)  # three groups: 6 bytes a row
    x = randn(24, 2, gen=gen, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="whole 4-byte words"):
        spmm_nm_mma_sp(values=W.values, metadata=metadata, b=x, n=1, m=8, bias=None, out=out,
                       activation="none", classes=metadata)  # fmt: skip


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
@pytest.mark.parametrize(
    ("n", "m", "tile"),
    [(2, 4, t) for t in ((1, 8, 1), (1, 4, 2), (2, 8, 4), (1, 8, 2))]
    + [(n, 8, t) for n in (2, 1) for t in ((1, 8, 1), (1, 8, 2), (2, 8, 4))],
)
@pytest.mark.parametrize("wide", [False, True])
def test_b_permuted_in_the_kernel(n, m, tile, wide, gen):
    """B read as it lies and permuted on its way to shared memory (wide: loaded for 16-byte
    shared stores): tokens off the n8 tile, a masked last step, x^T as linear passes it and
    a row-major B (copied K contiguous)."""
    step = 32 // m * tile[1]  # groups
    for groups, tokens in ((3 * step + 6, 13), (step, 8), (2, 1)):
        W = random_nm(99, groups * m, n, m, gen, 1, 1, torch.bfloat16, "cuda")
        x = randn(tokens, groups * m, gen=gen, dtype=torch.bfloat16, device="cuda")
        for B in (x.t(), x.t().contiguous()):
            got = _launch_poisoned(W, B, tile, split=2, natural_b=True, wide_b_stores=wide)
            want = W.to_dense().double() @ B.double()
            assert_close(got, want, spmm_bound(W.to_dense(), B), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "m"), [(2, 4), (2, 8), (1, 8)])
@pytest.mark.parametrize(("natural_b", "wide"), [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("tile", [(1, 8, 1), (2, 8, 1)])
def test_prefetch_a_step_ahead(n, m, natural_b, wide, tile, gen):
    """Each step's loads issued a step ahead, the steps in pairs: ranges of one step, of two,
    of an odd number past a whole pair (5: the pairs' loop, then one step) and of only a
    masked tail (split 1, 2, 3 and 64 over 5 steps and a partial one), bias and GELU."""
    groups = 5 * 32 + 6  # 5 full steps of k256 and a partial one (m = 4: 2.5 steps and a tail)
    W = random_nm(77, groups * 8, n, m, gen, 1, 1, torch.bfloat16, "cuda")
    x = randn(11, groups * 8, gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(77, gen=gen, dtype=torch.bfloat16, device="cuda")
    want = torch.nn.functional.gelu(W.to_dense().double() @ x.t().double() + bias[:, None])
    bound = spmm_bound(W.to_dense(), x.t()) + bias.double().abs()[:, None]
    for split in (1, 2, 3, 64):
        got = _launch_poisoned(W, x.t(), tile, bias=bias, activation="gelu", split=split,
                               natural_b=natural_b, wide_b_stores=wide, prefetch=True)  # fmt: skip
        assert_close(got, want, bound, torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "m"), [(2, 4), (2, 8), (1, 8)])
@pytest.mark.parametrize(
    ("tile", "b_form"),
    [((1, 8, 1), "permuted"), ((1, 8, 2), "permuted"), ((2, 8, 4), "permuted")]
    + [((1, 8, 1), "natural"), ((1, 8, 1), "wide"), ((1, 8, 2), "wide")]
    + [((2, 8, 1), "natural"), ((2, 8, 2), "permuted")],
)
@pytest.mark.parametrize("rows", [77, 1024])
def test_out_by_rows(n, m, tile, b_form, rows, gen):
    """A column-major out (linear's W x^T) stored by runs of rows, the split-K planes laid
    out so: rows off the tile and a multiple of 16 (vector stores), tokens off the column
    tile, one range, fused ranges, one of only a masked tail, and unfused (the option
    ignored); B permuted before the launch or in the kernel (the route's forms)."""
    groups = 3 * 32 + 6
    W = random_nm(rows, groups * 8, n, m, gen, 1, 1, torch.bfloat16, "cuda")
    x = randn(13, groups * 8, gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(rows, gen=gen, dtype=torch.bfloat16, device="cuda")
    want = W.to_dense().double() @ x.t().double() + bias.double()[:, None]
    bound = spmm_bound(W.to_dense(), x.t()) + bias.double().abs()[:, None]
    classes = class_words(W.indices, rows, 1, n) if m == 8 else None
    metadata = metadata_words(W.indices, rows, 1, n, m)
    m_tiles, blocks, n_tiles = tile
    for split, fused in ((1, True), (3, True), (64, True), (3, False)):
        out = torch.full((13, rows), float("nan"), dtype=torch.bfloat16, device="cuda").t()
        spmm_nm_mma_sp(
            values=W.values, metadata=metadata, b=x.t(), n=n, m=m, classes=classes, bias=bias,
            out=out, activation="none", m_tiles=m_tiles, blocks=blocks, n_tiles=n_tiles,
            split=split, fused=fused, out_m_fastest=True, natural_b=b_form != "permuted",
            wide_b_stores=b_form == "wide",
        )  # fmt: skip
        assert_close(out, want, bound, torch.bfloat16)


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


def _logical_b(b_words: torch.Tensor) -> torch.Tensor:
    """permuted_b's registers back at their logical (token, K) places: register j of lane
    (g, q) holds rows 8 j + 2 q, + 1 of its k32 block at token g of its n8 tile."""
    tiles, blocks = b_words.shape[:2]
    pairs = b_words.view(torch.bfloat16).view(tiles, blocks, 8, 4, 4, 2)  # nt, kb, g, q, j, e
    return pairs.permute(0, 2, 1, 4, 3, 5).reshape(tiles * 8, blocks * 32)


def _a_register(words, classes, row, kb, c, n, m):
    """The kernel's A register for chunk c of block kb (nm_mma_sp_registers.half_registers): lane
    q = c % 4's loaded group of the span, whole (2:4) or its half c // 4 by its class."""
    span_blocks = {(2, 4): 2, (2, 8): 4, (1, 8): 8}[(n, m)]
    span, kl = divmod(kb, span_blocks)
    q, rh = c % 4, c // 4
    if m == 4:
        return int(words[row, 16 * span + 4 * q + 2 * kl + rh])
    if n == 1:  # the lane's words 4 q .. 4 q + 3 of the span, two groups each (low first)
        word = int(words[row, 16 * span + 4 * q + kl // 2]) & 0xFFFFFFFF
        value = word >> (16 * (kl % 2)) & 0xFFFF
        class_word = int(classes[row // 16, span, row % 8, q]) & 0xFFFFFFFF
        cls = class_word >> (8 * (row % 16 // 8) + kl) & 1
        return value if cls == rh else 0
    word = int(words[row, 16 * span + 4 * q + kl]) & 0xFFFFFFFF
    step, s = divmod(span, 2)
    class_word = int(classes[row // 16, step, row % 8, q]) & 0xFFFFFFFF
    cls = class_word >> (8 * (2 * s + row % 16 // 8) + 2 * kl) & 3
    if rh == 0:
        return word & (0xFFFFFFFF >> (16 * cls) if cls < 2 else 0)
    return word >> (32 - 16 * cls) if cls > 0 else 0


def _logical_a(values, metadata, classes, blocks: int, n: int, m: int) -> torch.Tensor:
    """The MMA's A rows as the hardware reads them: each chunk's two slots (the A register's
    16-bit halves) at the columns its metadata nibble names (rows g and g + 8 in the low and
    high halves of lane (g, q % 2)'s word; lane q % 2 = 0 the block's chunks 0-3)."""
    rows = values.shape[0]
    words = values.contiguous().view(torch.int32)
    words = torch.nn.functional.pad(words, (0, blocks * 4 * n - words.shape[1]))
    logical = torch.zeros(rows, blocks * 32, dtype=torch.float64)
    meta = metadata.view(metadata.shape[0], -1, 8, 2, 4).long() & 0xFFFFFFFF
    for r in range(rows):
        tile, g, high = r // 16, r % 8, r % 16 >= 8
        for kb in range(blocks):
            for c in range(8):
                nibble = int(meta[tile, kb // 4, g, c // 4, kb % 4]) >> (16 * high + 4 * (c % 4))
                register = _a_register(words, classes, r, kb, c, n, m)
                for slot in range(2):
                    bits = torch.tensor([register >> (16 * slot) & 0xFFFF], dtype=torch.int32)
                    value = bits.to(torch.int16).view(torch.bfloat16).double()
                    logical[r, 32 * kb + 4 * c + (nibble >> (2 * slot) & 3)] += float(value)
    return logical


@pytest.mark.parametrize(
    ("rows", "k", "tokens", "vector", "n", "m"),
    [(37, 148, 5, 1, 2, 4), (33, 320, 9, 3, 2, 4), (37, 296, 5, 1, 2, 8), (20, 1032, 3, 2, 2, 8),
     (37, 304, 5, 1, 1, 8), (20, 1296, 3, 2, 1, 8)],
)  # fmt: skip
def test_register_orders_keep_the_product(rows, k, tokens, vector, n, m, gen):
    """On the CPU: A's registers as the kernel builds them, the metadata and B in the kernel's
    K order, read back as the MMA reads its registers, give W @ B: the permutation moves A's
    groups, their metadata and B's rows alike, 2:8's halves hold each value once, and the
    padding (rows, K, tokens) adds nothing."""
    W = random_nm(rows, k, n, m, gen, vector, 1, torch.bfloat16)
    x = randn(tokens, k, gen=gen, dtype=torch.bfloat16)
    metadata = metadata_words(W.indices, rows, vector, n, m)
    classes = class_words(W.indices, rows, vector, n) if m == 8 else None
    device = "cuda" if torch.cuda.is_available() else "cpu"  # (a Triton kernel)
    b_words = permuted_b(x.t().to(device), n, m).cpu()
    blocks = b_words.shape[1]
    assert metadata.shape == (-(-rows // 16), blocks // 4, 8, 2, 4)
    got = _logical_a(W.values, metadata, classes, blocks, n, m) @ _logical_b(b_words).double().t()
    want = W.to_dense().double() @ x.double().t()
    torch.testing.assert_close(got[:rows, :tokens], want, rtol=1e-12, atol=1e-12)


def test_supports():
    assert not supports(2, 4, 1, torch.bfloat16, 4096, torch.device("cpu"))  # no interpreter


@pytest.mark.gpu
def test_supports_on_the_gpu():
    if torch.cuda.get_device_capability() >= (8, 0):
        gpu = torch.device("cuda")
        assert supports(2, 4, 1, torch.bfloat16, 4096, gpu)
        assert supports(2, 4, 1, torch.float16, 4096, gpu)
        assert supports(2, 8, 1, torch.bfloat16, 4096, gpu)
        assert supports(1, 8, 1, torch.bfloat16, 4096, gpu)
        assert not supports(1, 8, 1, torch.bfloat16, 4104, gpu)  # K off 16: odd groups a row
        assert not supports(1, 4, 1, torch.bfloat16, 4096, gpu)
        assert not supports(2, 4, 2, torch.bfloat16, 4096, gpu)  # block-wise
        assert not supports(2, 4, 1, torch.float32, 4096, gpu)


def test_route_takes_the_measured_window():
    """2:4 at 1-32 tokens, 2:8 at 2-16 (1-16 on large weights with K > rows), 1:8 at 2-16
    (9-16: on large weights only, or in fp16 with 8-token tiles), bf16 and fp16 element-
    wise: one 8-token tile with B permuted in the kernel to 8 tokens (16-byte stores for
    2:8), 16-token tiles past, B permuted by a launch before (in the kernel with 16-byte
    stores on small weights to 16 tokens, 2:4 and 2:8); split for four programs an SM (132
    SMs; 2:8 and 1:8 at 1-8 tokens eight, to 16 ranges), each range two steps at least; a
    column-major out stored by rows for 2:8 and 1:8 to 8 tokens (2:8 to 16 on large
    weights); two m16 tiles a warp for 1:8 at 1-8 tokens (from one on a large weight with
    K > rows) and for 2:8 and 1:8 past 8 on large weights with rows > K. Vector-wise rows
    (no blocks) take the same windows but 1:8 from two tokens on every weight, 2:8 from one on
    large weights with K > rows, and 1:8 on small weights to 16 tokens in bf16 too. Nothing
    else (blocks, other patterns, fp32, 33 tokens)."""
    from sparsekernels.kernels.nm_mma_sp_tuning import spmm_nm_mma_sp_config

    bf16 = torch.bfloat16

    def tile(tokens, rows, k, n=2, m=4, dtype=bf16, vector=1, block=1):
        c = spmm_nm_mma_sp_config(tokens, n, m, vector, block, dtype, rows, k, 132)
        if c is None:
            return None
        return (c.m_tiles, c.blocks, c.n_tiles, c.split, c.natural_b, c.wide_b_stores)

    assert tile(1, 4096, 14336) == (1, 8, 1, 8, True, False)  # 64 row tiles: 528 // 64 = 8
    assert tile(8, 14336, 4096) == (1, 8, 1, 2, True, False)  # 224 row tiles
    assert tile(8, 14336, 4096, dtype=torch.float16) == (1, 8, 1, 2, True, False)
    assert tile(16, 4096, 4096) == (1, 8, 2, 8, True, True)  # small: B permuted in the kernel
    assert tile(17, 4096, 4096) == (1, 8, 2, 4, False, False)  # two column tiles
    assert tile(32, 4096, 14336) == (1, 8, 2, 4, False, False)
    assert tile(9, 14336, 4096) == (1, 8, 2, 2, False, False)
    assert tile(4, 64, 256) == (1, 8, 1, 1, True, False)  # one step: one range
    assert tile(2, 4096, 4096, 2, 8) == (1, 8, 1, 8, True, True)  # 16 steps: 8 ranges of 2
    assert tile(2, 4096, 14336, 2, 8) == (1, 8, 1, 16, True, True)  # 1056 // 64, 56 steps
    assert tile(8, 14336, 4096, 2, 8) == (1, 8, 1, 4, True, True)  # 1056 // 224
    # 1:8 at 1-8 tokens: two m16 tiles a warp (one token on a large weight with K > rows)
    assert tile(2, 4096, 14336, 1, 8) == (2, 8, 1, 16, True, False)
    assert tile(1, 4096, 14336, 1, 8) == (2, 8, 1, 16, True, False)
    assert tile(3, 14336, 4096, 1, 8) == (2, 8, 1, 8, True, False)  # 1056 // 112, 16 steps
    assert tile(16, 4096, 14336, 2, 8) == (1, 8, 2, 8, False, False)  # 16 tokens: four
    # past 8 tokens on a large weight with rows > K: two m16 tiles a warp
    assert tile(16, 14336, 4096, 2, 8) == (2, 8, 2, 4, False, False)  # 528 // 112
    assert tile(16, 14336, 4096, 1, 8) == (2, 8, 2, 4, False, False)
    assert tile(16, 4096, 4096, 2, 8) == (1, 8, 2, 8, True, True)
    assert tile(16, 4096, 8192, 1, 8, torch.float16) == (1, 8, 2, 8, False, False)
    assert tile(16, 4096, 4096, 1, 8, torch.float16) == (1, 8, 1, 4, True, False)  # 2 col tiles
    assert tile(17, 4096, 4096, 1, 8, torch.float16) is None
    # vector-wise: element-wise's tiles
    assert tile(16, 4096, 4096, 2, 4, bf16, 64) == tile(16, 4096, 4096)
    assert tile(1, 4096, 14336, 2, 4, bf16, 4) == tile(1, 4096, 14336)
    assert tile(32, 4096, 14336, 2, 4, bf16, 2) == tile(32, 4096, 14336)
    assert tile(1, 4096, 14336, 2, 8, bf16, 64) == (1, 8, 1, 16, True, True)  # wide: one token
    assert tile(16, 14336, 4096, 1, 8, bf16, 4) == tile(16, 14336, 4096, 1, 8)
    assert tile(9, 4096, 4096, 1, 8, bf16, 64) == tile(9, 4096, 4096, 1, 8, torch.float16)
    for args in [
        (33, 4096, 4096),
        (16, 4096, 4096, 1, 4),
        (16, 4096, 4096, 2, 4, torch.float32),
        (16, 4096, 4096, 2, 4, bf16, 2, 2),  # blocks
        (1, 4096, 14336, 1, 8, bf16, 4),  # vectors: 1:8 from two tokens on every weight
        (1, 14336, 4096, 2, 8, bf16, 64),  # 2:8 from two on a tall weight
        (1, 4096, 4096, 2, 8, bf16, 64),  # and on a small one
        (17, 4096, 4096, 1, 8, bf16, 4),
        (33, 4096, 4096, 2, 4, bf16, 64),
        (1, 4096, 4096, 2, 8),  # small: the select kernel keeps one token
        (1, 4096, 14336, 2, 8),  # and on a wide one (its permuted picks)
        (1, 14336, 4096, 2, 8),  # and on a tall weight
        (1, 14336, 4096, 1, 8),
        (9, 4096, 4096, 1, 8),
        (17, 4096, 14336, 2, 8),
        (17, 4096, 14336, 1, 8),
        (32, 1, 2**27),  # int32 offsets: the permuted B's 32 x 2^27 / 2 words
        (16, 1, 2**28),
        (1, 1, 2**29, 2, 8),  # a block's words
    ]:
        assert tile(*args) is None, args
    assert tile(32, 1, 2**27 - 32) is not None and tile(16, 1, 2**28 - 32) is not None

    def by_rows(tokens, n, m, rows=4096):
        return spmm_nm_mma_sp_config(tokens, n, m, 1, 1, bf16, rows, 14336, 132).out_by_rows

    assert by_rows(8, 2, 8) and by_rows(8, 1, 8) and by_rows(16, 2, 8)
    assert not by_rows(8, 2, 4) and not by_rows(16, 1, 8) and not by_rows(16, 2, 8, 1024)


def test_metadata_is_prepared_once_per_weight(gen):
    """The route's metadata words are kept per offsets tensor and rebuilt after an in-place
    edit (its version moves)."""
    from sparsekernels.ops import _triton_nm

    W = random_nm(40, 256, 2, 4, gen, 1, 1, torch.bfloat16)
    words = _triton_nm.metadata_words(W.indices, 40, 1)
    assert torch.equal(words, metadata_words(W.indices, 40, 1))
    assert _triton_nm.metadata_words(W.indices, 40, 1) is words
    W.indices.add_(0)
    assert _triton_nm.metadata_words(W.indices, 40, 1) is not words


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("n", "m", "tokens", "rows", "k", "dtype"),
    [(2, 4, t, 1000, 2080, torch.bfloat16) for t in (1, 3, 8, 9, 16, 29)]
    + [(2, 8, 2, 1000, 2080, torch.bfloat16), (1, 8, 8, 1000, 2080, torch.bfloat16)]
    + [(2, 8, 13, 1000, 2080, torch.bfloat16), (2, 8, 16, 4100, 8208, torch.bfloat16)]
    + [(1, 8, 9, 4100, 8208, torch.float16), (2, 4, 20, 1000, 2080, torch.float16)]
    + [(1, 8, 14, 1000, 2080, torch.float16)]
    + [(2, 8, 2, 4100, 8208, torch.bfloat16), (1, 8, 2, 1000, 2080, torch.bfloat16)]
    + [(1, 8, 1, 2056, 16400, torch.bfloat16)]  # (4096+ rows and columns: the TMA ring)
    + [(2, 8, 16, 8208, 4104, torch.bfloat16), (1, 8, 16, 8208, 4112, torch.bfloat16)],
)
def test_linear_routes_through_mma_sp(n, m, tokens, rows, k, dtype, gen, monkeypatch):
    """linear takes the kernel in its windows on the GPU (2:4 at 1-32 tokens, 2:8 at 2-16,
    1:8 at 2-8, 9-16 on a large weight and one token on
    a large weight with K > rows; two m16 tiles a warp on tall ones at 16), with bias,
    split on a few-row weight, its column-major out stored by rows to 8 tokens (2:8 to 16),
    and gives the product in x's layout."""
    import sparsekernels as sk
    from sparsekernels.kernels import spmm_nm_mma_sp

    calls = []
    launch = spmm_nm_mma_sp.spmm_nm_mma_sp
    monkeypatch.setattr(
        spmm_nm_mma_sp,
        "spmm_nm_mma_sp",
        lambda **kw: calls.append((kw["split"], kw["out_m_fastest"])) or launch(**kw),
    )
    W = random_nm(rows, k, n, m, gen, 1, 1, dtype, "cuda")
    x = randn(tokens, k, gen=gen, dtype=dtype, device="cuda")
    bias = randn(rows, gen=gen, dtype=dtype, device="cuda")
    got = sk.linear(x, W, bias)
    want = x.double() @ W.to_dense().double().t() + bias.double()
    assert len(calls) == 1 and calls[0][0] > 1 and got.is_contiguous()
    large = rows * k >= 1 << 25
    assert calls[0][1] == (m == 8 and tokens <= (16 if n == 2 and large else 8))
    bound = spmm_bound(x, W.to_dense().t()) + bias.double().abs()
    assert_close(got, want, bound, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("n", "m", "vector", "tokens", "k", "dtype", "reads_as"),
    [
        (2, 4, 64, 16, 2080, torch.bfloat16, (2, 4)),
        (2, 4, 3, 1, 2080, torch.float16, (2, 4)),
        (2, 8, 4, 8, 2080, torch.bfloat16, (2, 8)),
        (1, 8, 3, 12, 2080, torch.bfloat16, (1, 8)),  # small, bf16: to 16 tokens as in fp16
        (1, 4, 1, 16, 2080, torch.bfloat16, (2, 8)),
        (1, 4, 16, 2, 2080, torch.float16, (2, 8)),
        (1, 2, 1, 8, 2080, torch.bfloat16, (2, 4)),
        (1, 2, 5, 16, 2080, torch.bfloat16, (2, 4)),  # (at 32: dense, tuning.spmm_nm_prefers_dense)
        (1, 4, 1, 8, 2084, torch.bfloat16, None),  # 2084 columns: an unpaired 1:4 group
        (1, 8, 4, 1, 2080, torch.bfloat16, None),  # vectors: 1:8 from two tokens
    ],
)
def test_linear_routes_vectors_and_aliases_through_mma_sp(
    n, m, vector, tokens, k, dtype, reads_as, gen, monkeypatch
):
    """Vector-wise rows take the kernel in element-wise's windows, and 1:2 and 1:4 weights
    read as 2:4 and 2:8 (the odd group's offset moved up by m); the product is the weight's."""
    import sparsekernels as sk
    from sparsekernels.kernels import spmm_nm_mma_sp

    calls = []
    launch = spmm_nm_mma_sp.spmm_nm_mma_sp
    monkeypatch.setattr(
        spmm_nm_mma_sp,
        "spmm_nm_mma_sp",
        lambda **kw: calls.append((kw["n"], kw["m"])) or launch(**kw),
    )
    W = random_nm(1000, k, n, m, gen, vector, 1, dtype, "cuda")
    x = randn(tokens, k, gen=gen, dtype=dtype, device="cuda")
    bias = randn(1000, gen=gen, dtype=dtype, device="cuda")
    got = sk.linear(x, W, bias)
    assert calls == ([reads_as] if reads_as else [])
    want = x.double() @ W.to_dense().double().t() + bias.double()
    bound = spmm_bound(x, W.to_dense().t()) + bias.double().abs()
    assert_close(got, want, bound, dtype)
