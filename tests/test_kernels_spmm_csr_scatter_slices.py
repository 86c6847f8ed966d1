"""The warp-private K slices scatter kernel (kernels/spmm_csr_scatter_slices.py, an unrouted
experiment): its sub-runs decoded back on the CPU, the kernel on the GPU (Gluon has no
interpreter) against float64 with poisoned outputs."""

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, randn, random_csr, spmm_bound
from sparsekernels.kernels.spmm_csr_scatter_slices import (
    buffer_bytes,
    spmm_csr_scatter_slices,
    tiled_entries_slices,
)


def _decode(slab_offsets, entries, rows, k, dtype):
    """The dense weight the sub-runs describe (the test's own decoder: a place is row r's
    32 bytes, its 16-byte chunk swizzled by (r >> 2) & 1, then the value's 2 bytes)."""
    k_tiles = -(-k // 64)
    dense = torch.zeros(-(-rows // 64) * 64, k_tiles * 64, dtype=dtype)
    written = torch.zeros_like(dense, dtype=torch.bool)
    offsets = slab_offsets.tolist()
    assert offsets[0] == 0 and offsets[-1] == entries.numel()
    for s in range(len(offsets) - 1):
        tile, w = divmod(s, 4)
        row_tile, k_tile = divmod(tile, k_tiles)
        run = entries[offsets[s] : offsets[s + 1]].tolist()
        assert offsets[s] % 4 == 0 and len(run) % 4 == 0  # 16-byte sub-runs
        first = offsets[4 * tile]
        assert len(run) * 4 == offsets[4 * tile + 4] - first  # one length a tile
        for entry in run:
            place, bits = (entry >> 16) & 0xFFFF, entry & 0xFFFF
            if place == 0xFFFF:  # padding
                continue
            assert place < 2048  # in the warp's own slab
            r, chunk, within = place // 32, place % 32 // 16, place % 16 // 2
            c = (chunk ^ ((r >> 2) & 1)) * 8 + within
            at = (row_tile * 64 + r, k_tile * 64 + w * 16 + c)
            assert not written[at], f"entry {at} twice"
            written[at] = True
            value = torch.tensor([bits - 65536 if bits >= 32768 else bits], dtype=torch.int16)
            dense[at] = value.view(dtype)[0]
    return dense[:rows, :k]


@pytest.mark.parametrize("banks", ["greedy", "spread", "plain"])
@pytest.mark.parametrize("density", [0.3, 0.1])
@pytest.mark.parametrize("shape", [(70, 150), (1, 64), (64, 1), (130, 64), (65, 300), (3, 17)])
def test_sub_runs_hold_the_weight(shape, density, banks, gen):
    """Every stored value once, at its row and column, in its tile's sub-run of its 16-column
    slice; a tile's sub-runs one length, a multiple of 4, padded with skipped places; rows
    and columns off the tiles; empty rows; runs in either order."""
    rows, k = shape
    for dtype in (torch.bfloat16, torch.float16):
        W = random_csr(rows, k, density, gen, dtype)
        offsets, entries = tiled_entries_slices(W.row_offsets, W.column_indices, W.values, k, banks)
        assert offsets.dtype == entries.dtype == torch.int32
        assert offsets.shape == (-(-rows // 64) * -(-k // 64) * 4 + 1,)
        assert torch.equal(_decode(offsets, entries, rows, k, dtype), W.to_dense())


def test_sub_runs_of_empty_and_full_tiles(gen):
    """A full tile (every sub-run 1024 entries, none padded), empty tiles (sub-runs of length
    0) and a tile whose entries all lie in one slice (three sub-runs all padding)."""

    def nonzero(r, c):
        values = randn(r, c, gen=gen, dtype=torch.bfloat16)
        return values.masked_fill(values == 0, 1.0)

    dense = torch.zeros(128, 192, dtype=torch.bfloat16)
    dense[:64, :64] = nonzero(64, 64)
    dense[64:, 144:160] = nonzero(64, 16)  # slice 1 of tile (1, 2) alone
    W = sk.CSRMatrix.from_dense(dense)
    offsets, entries = tiled_entries_slices(W.row_offsets, W.column_indices, W.values, 192)
    lengths = offsets.diff().view(2, 3, 4)
    assert lengths[0, 0].tolist() == [1024] * 4 and not lengths[0, 1:].any()
    assert lengths[1, 2].tolist() == [1024] * 4 and not lengths[1, :2].any()
    assert torch.equal(_decode(offsets, entries, 128, 192, torch.bfloat16), W.to_dense())


def _words_a_bank(slab_offsets, entries) -> float:
    """Mean over a warp's scatter stores of the most 4-byte words one bank receives: a store
    writes a sub-run's places 128 b + 4 lane + j."""
    total = stores = 0
    offsets = slab_offsets.tolist()
    for s in range(len(offsets) - 1):
        run = entries[offsets[s] : offsets[s + 1]]
        blocks = -(-run.numel() // 128)
        padded = torch.full((blocks * 128,), -1, dtype=torch.int32)
        padded[: run.numel()] = run
        for store in padded.view(blocks, 32, 4).transpose(1, 2).reshape(-1, 32):
            places = (store >> 16) & 0xFFFF
            words = torch.unique(places[places != 0xFFFF] >> 2)
            if words.numel():
                total += int(torch.bincount(words % 32).max())
                stores += 1
    return total / stores


def test_sub_runs_store_into_fewer_words_a_bank(gen):
    """Greedy (the default) below spread below plain (row and column order)."""
    W = random_csr(128, 256, 0.3, gen, torch.bfloat16)
    args = (W.row_offsets, W.column_indices, W.values, 256)
    greedy, spread, plain = (
        _words_a_bank(*tiled_entries_slices(*args, banks))
        for banks in ("greedy", "spread", "plain")
    )
    assert greedy < spread < plain, (plain, spread, greedy)
    with pytest.raises(ValueError, match="banks must be"):
        tiled_entries_slices(*args, "random")


def test_tiled_entries_slices_reject_wide_values(gen):
    W = random_csr(8, 8, 0.5, gen, torch.float32)
    with pytest.raises(TypeError, match="fp16 or bf16"):
        tiled_entries_slices(W.row_offsets, W.column_indices, W.values, 8)


def test_buffer_bytes():
    """Slabs of the weight and B (16 KB), or the four float32 partials where larger."""
    assert buffer_bytes(8) == buffer_bytes(16) == 16384 and buffer_bytes(32) == 32768


def _run(W, b, bias=None, activation="none", **tile):
    offsets, entries = tiled_entries_slices(W.row_offsets, W.column_indices, W.values, b.shape[0])
    out = torch.full((W.shape[0], b.shape[1]), float("nan"), dtype=b.dtype, device=b.device)
    return spmm_csr_scatter_slices(
        slab_offsets=offsets, entries=entries, b=b, bias=bias, out=out, activation=activation,
        **tile,
    )  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens", [1, 5, 16, 37])
@pytest.mark.parametrize("block_n", [8, 16, 32])
def test_every_element_written(dtype, tokens, block_n, gen):
    """Poisoned out, every element written: rows off the 64-row tile, K off the 64-column step
    (and under one step, K = 1, and under one slice), tokens off the column tile, empty rows,
    a single row; x^T and a row-major B."""
    shapes = ((70, 150, 0.3), (1, 200, 0.5), (130, 40, 0.9), (64, 64, 0.05), (3, 1, 1.0),
              (66, 9, 0.6))  # fmt: skip
    for rows, k, density in shapes:
        W = random_csr(rows, k, density, gen, dtype, "cuda")
        x = randn(tokens, k, gen=gen, dtype=dtype, device="cuda")
        for b in (x.t(), x.t().contiguous()):
            got = _run(W, b, block_n=block_n)
            want = W.to_dense().double() @ b.double()
            assert_close(got, want, spmm_bound(W.to_dense(), b), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("entries_per_thread", [4, 8, 16])
@pytest.mark.parametrize("block_n", [16, 32])
def test_runs_longer_and_shorter_than_a_chunk(entries_per_thread, block_n, gen):
    """A warp's sub-run loaded a step ahead up to a chunk (4-16 entries a lane, 128-512 a
    warp), the rest in its step: dense tiles (~1000 entries a slice) take 2-8 chunks, sparse
    ones part of one; each split's first and last steps prefetch nothing outside their range
    (ranges of 1-5 steps)."""
    for rows, k, density, split in ((64, 64, 0.97, 1), (130, 300, 0.6, 3), (200, 1000, 0.02, 4)):
        W = random_csr(rows, k, density, gen, torch.bfloat16, "cuda")
        x = randn(16, k, gen=gen, dtype=torch.bfloat16, device="cuda")
        got = _run(W, x.t(), entries_per_thread=entries_per_thread, split=split, fused=False,
                   block_n=block_n)  # fmt: skip
        want = W.to_dense().double() @ x.t().double()
        assert_close(got, want, spmm_bound(W.to_dense(), x.t()), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("split", [1, 2, 5])
@pytest.mark.parametrize("entries_per_thread", [4, 16])
def test_unequal_slices_and_empty_steps(split, entries_per_thread, gen):
    """Slices of one tile far apart in length (one full, the others sparse: three warps'
    sub-runs mostly padding), steps whose tiles are empty, a full step, K off the step, split
    ranges."""
    W = random_csr(130, 900, 0.05, gen, torch.bfloat16, "cuda")
    dense = W.to_dense()
    dense[:, 64:128] = randn(130, 64, gen=gen, dtype=torch.bfloat16, device="cuda")  # full
    dense[:, 256:384] = 0  # two empty column steps
    dense[:, 400:416] = randn(130, 16, gen=gen, dtype=torch.bfloat16, device="cuda")  # a slice
    for weight in (W, sk.CSRMatrix.from_dense(dense)):
        x = randn(16, 900, gen=gen, dtype=torch.bfloat16, device="cuda")
        got = _run(weight, x.t(), split=split, entries_per_thread=entries_per_thread)
        want = weight.to_dense().double() @ x.t().double()
        assert_close(got, want, spmm_bound(weight.to_dense(), x.t()), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("split", [1, 3, 64])
@pytest.mark.parametrize("fused", [True, False])
def test_bias_activation_and_split(dtype, split, fused, gen):
    W = random_csr(100, 700, 0.3, gen, dtype, "cuda")
    x = randn(9, 700, gen=gen, dtype=dtype, device="cuda")
    bias = randn(100, gen=gen, dtype=dtype, device="cuda")
    got = _run(W, x.t(), bias=bias, activation="gelu", split=split, fused=fused)
    pre = W.to_dense().double() @ x.t().double() + bias.double()[:, None]
    want = torch.nn.functional.gelu(pre)
    assert_close(got, want, spmm_bound(W.to_dense(), x.t()) + bias.double().abs()[:, None],
                 dtype)  # fmt: skip
    if split > 1 and fused:  # the counters are left at zero: the same bits again
        again = _run(W, x.t(), bias=bias, activation="gelu", split=split, fused=fused)
        assert torch.equal(again, got)


@pytest.mark.gpu
@pytest.mark.parametrize("split", [1, 4])
def test_large_k(split, gen):
    """K of 150 steps (a warp's partial over 150 slices), one piece and four."""
    W = random_csr(96, 9600, 0.3, gen, torch.bfloat16, "cuda")
    x = randn(16, 9600, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = _run(W, x.t(), split=split)
    assert_close(got, W.to_dense().double() @ x.t().double(), spmm_bound(W.to_dense(), x.t()),
                 torch.bfloat16)  # fmt: skip


@pytest.mark.gpu
def test_llm_shape(gen):
    """4096 x 4096 at 70%, 16 tokens, split as the scatter route would: one run against
    float64."""
    W = random_csr(4096, 4096, 0.3, gen, torch.bfloat16, "cuda", empty_rows=False)
    x = randn(16, 4096, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = _run(W, x.t(), split=16)
    assert_close(got, W.to_dense().double() @ x.t().double(), spmm_bound(W.to_dense(), x.t()),
                 torch.bfloat16)  # fmt: skip


def test_bad_arguments_are_said(gen):
    W = random_csr(8, 64, 0.5, gen, torch.bfloat16)
    offsets, entries = tiled_entries_slices(W.row_offsets, W.column_indices, W.values, 64)
    b = randn(64, 4, gen=gen, dtype=torch.bfloat16)
    out = torch.empty(8, 4, dtype=torch.bfloat16)
    args = dict(slab_offsets=offsets, entries=entries, b=b, bias=None, out=out, activation="none")
    with pytest.raises(ValueError, match="slab_offsets"):
        spmm_csr_scatter_slices(**{**args, "b": randn(200, 4, gen=gen, dtype=torch.bfloat16)})
    with pytest.raises(ValueError, match="block_n"):
        spmm_csr_scatter_slices(**args, block_n=64)
    with pytest.raises(ValueError, match="entries_per_thread"):
        spmm_csr_scatter_slices(**args, entries_per_thread=12)
    with pytest.raises(ValueError, match="entries"):
        spmm_csr_scatter_slices(**{**args, "entries": entries.long()})
    with pytest.raises(TypeError, match="16-bit"):
        spmm_csr_scatter_slices(**{**args, "b": b.float(), "out": out.float()})
