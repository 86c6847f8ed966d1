"""The scatter-into-shared-memory CSR kernel (kernels/spmm_csr_scatter.py, the CSR route at
8-64 tokens in half precision): its tiled entries decoded back on the CPU, the kernel on the
GPU (Gluon has no interpreter) against float64 with poisoned outputs."""

import itertools

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, randn, random_csr, spmm_bound
from sparsekernels.kernels.csr_scatter_banks import scatter_bank_stats
from sparsekernels.kernels.spmm_csr_scatter import (
    BANK_ORDERS,
    buffer_alone,
    buffer_bytes,
    spmm_csr_scatter,
    tiled_entries,
)


def _decode(tile_offsets, entries, rows, k, swizzle, dtype, block_k, block_m):
    """The dense weight the tiled entries describe (the test's own decoder)."""
    k_tiles = -(-k // block_k)
    dense = torch.zeros(-(-rows // block_m) * block_m, k_tiles * block_k, dtype=dtype)
    written = torch.zeros_like(dense, dtype=torch.bool)
    offsets = tile_offsets.tolist()
    for t in range(len(offsets) - 1):
        row_tile, k_tile = divmod(t, k_tiles)
        run = entries[offsets[t] : offsets[t + 1]].tolist()
        assert offsets[t] % 4 == 0 and len(run) % 4 == 0  # 16-byte runs
        for entry in run:
            place, bits = (entry >> 16) & 0xFFFF, entry & 0xFFFF
            if place == 0xFFFF:  # padding
                continue
            r, chunk = place // (2 * block_k), place % (2 * block_k) // 16
            within = place % 16 // 2
            c = (chunk ^ (r % 8) if swizzle else chunk) * 8 + within
            at = (row_tile * block_m + r, k_tile * block_k + c)
            assert not written[at], f"entry {at} twice"
            written[at] = True
            value = torch.tensor([bits - 65536 if bits >= 32768 else bits], dtype=torch.int16)
            dense[at] = value.view(dtype)[0]
    return dense[:rows, :k]


@pytest.mark.parametrize("banks", ["greedy", "spread", "plain"])
@pytest.mark.parametrize(("block_m", "block_k"), [(64, 64), (64, 128), (128, 64), (128, 128)])
@pytest.mark.parametrize("swizzle", [True, False])
@pytest.mark.parametrize("shape", [(70, 150), (1, 64), (64, 1), (130, 64), (65, 300)])
def test_tiled_entries_hold_the_weight(shape, swizzle, block_k, block_m, banks, gen):
    """Every stored value once, at its row and column, in its (block_m, block_k) tile's run;
    runs padded to 4 entries with skipped places at their ends; rows and columns off the
    tiles; empty rows; sparse, dense and full tiles (pairs of entries in one 4-byte word);
    runs in each order."""
    rows, k = shape
    for dtype, density in ((torch.bfloat16, 0.3), (torch.float16, 0.05), (torch.bfloat16, 1.0)):
        W = random_csr(rows, k, density, gen, dtype)
        offsets, entries = tiled_entries(
            W.row_offsets, W.column_indices, W.values, k, swizzle, block_k, block_m, banks
        )
        assert offsets.dtype == entries.dtype == torch.int32
        got = _decode(offsets, entries, rows, k, swizzle, dtype, block_k, block_m)
        assert torch.equal(got, W.to_dense())
        bounds = offsets.tolist()
        for t, (start, end) in enumerate(itertools.pairwise(bounds)):
            run = entries[start:end]
            stored = int((run != -1).sum())  # (an entry's place is under 2^15: never -1)
            assert torch.all(run[:stored] != -1) and end - start - stored < 4, t  # padding last
        assert int((entries != -1).sum()) == W.values.numel()


@pytest.mark.parametrize("swizzle", [True, False])
def test_structured_patterns_hold_the_weight_in_every_order(swizzle, gen):
    """Patterns that pile entries into few banks or few words (one full column, one full row,
    the diagonal, every other column, a full tile beside empty ones, two entries to a word):
    each order's runs decode to the weight (the greedy order's single-entry rounds run out
    of banks there)."""
    rows, k = 130, 200
    masks = {
        "column": torch.zeros(rows, k, dtype=torch.bool).index_fill_(1, torch.tensor([7]), True),
        "row": torch.zeros(rows, k, dtype=torch.bool).index_fill_(0, torch.tensor([5]), True),
        "diagonal": torch.eye(rows, k, dtype=torch.bool),
        "every other column": (torch.arange(k) % 2 == 0).expand(rows, k).clone(),
        "pairs": (torch.arange(k) // 2 % 3 == 0).expand(rows, k).clone(),
    }
    full = torch.zeros(rows, k, dtype=torch.bool)
    full[:64, 64:128] = True
    masks["a full tile"] = full
    for name, mask in masks.items():
        dense = torch.where(mask, randn(rows, k, gen=gen), 0.0).to(torch.bfloat16)
        W = sk.CSRMatrix.from_dense(dense)
        for banks in BANK_ORDERS:
            offsets, entries = tiled_entries(
                W.row_offsets, W.column_indices, W.values, k, swizzle, banks=banks
            )
            got = _decode(offsets, entries, rows, k, swizzle, torch.bfloat16, 64, 64)
            assert torch.equal(got, W.to_dense()), (name, banks)


def _words_a_bank(tile_offsets, entries) -> float:
    """Mean over a warp's scatter stores of the most 4-byte words one bank receives (the
    store's shared-memory wavefronts): a store writes a run's places 128 b + 4 lane + j.
    (A loop over the stores: csr_scatter_banks.scatter_bank_stats does it in tensors.)"""
    total = stores = 0
    offsets = tile_offsets.tolist()
    for t in range(len(offsets) - 1):
        run = entries[offsets[t] : offsets[t + 1]]
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


@pytest.mark.parametrize(("density", "greedy_most"), [(0.5, 1.05), (0.3, 1.1), (0.1, 1.4)])
def test_bank_orders_store_into_fewer_words_a_bank(density, greedy_most, gen):
    """Runs placed store by store (greedy, the default) against dealt in bank order (spread)
    and row and column order (plain): at 70% plain stores hit 3.2 words a bank (ncu,
    at-35aed1b), spread ones 1.8, greedy ones 1.0-1.1 (a 4-byte word's two entries in one
    store count once)."""
    W = random_csr(256, 512, density, gen, torch.bfloat16)
    args = (W.row_offsets, W.column_indices, W.values, 512, True, 64, 64)
    each = {banks: _words_a_bank(*tiled_entries(*args, banks)) for banks in BANK_ORDERS}
    assert each["plain"] > 2.5 and each["spread"] < 2.2 and each["greedy"] < greedy_most, each
    for banks in BANK_ORDERS:
        stats = scatter_bank_stats(*tiled_entries(*args, banks))
        assert stats == pytest.approx(each[banks], abs=1e-9)


def test_tiled_entries_reject_wide_values(gen):
    W = random_csr(8, 8, 0.5, gen, torch.float32)
    with pytest.raises(TypeError, match="fp16 or bf16"):
        tiled_entries(W.row_offsets, W.column_indices, W.values, 8)
    half = W.values.to(torch.bfloat16)
    with pytest.raises(ValueError, match="block_k"):
        tiled_entries(W.row_offsets, W.column_indices, half, 8, block_k=32)
    with pytest.raises(ValueError, match="block_m"):
        tiled_entries(W.row_offsets, W.column_indices, half, 8, block_m=96)
    with pytest.raises(ValueError, match="banks must be one of"):
        tiled_entries(W.row_offsets, W.column_indices, half, 8, banks="random")


def test_buffer_alone():
    assert buffer_alone(buffer_bytes()) and not buffer_alone(buffer_bytes() + 1024)
    assert buffer_alone(buffer_bytes(128), 128) and not buffer_alone(buffer_bytes(), 128)
    assert buffer_alone(buffer_bytes(64, 128), 64, 128) and buffer_bytes(128, 128) == 65536


def _run(W, b, swizzle=True, bias=None, activation="none", block_k=64, block_m=64, **tile):
    offsets, entries = tiled_entries(
        W.row_offsets, W.column_indices, W.values, b.shape[0], swizzle, block_k, block_m
    )
    out = torch.full((W.shape[0], b.shape[1]), float("nan"), dtype=b.dtype, device=b.device)
    return spmm_csr_scatter(
        tile_offsets=offsets, entries=entries, b=b, bias=bias, out=out, activation=activation,
        swizzle=swizzle, block_k=block_k, block_m=block_m, **tile,
    )  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("swizzle", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens", [1, 5, 16, 37])
@pytest.mark.parametrize("block_n", [8, 16, 32, 64])
def test_every_element_written(swizzle, dtype, tokens, block_n, gen):
    """Poisoned out, every element written: rows off the 64-row tile, K off the 64-column step
    (and under one step, K = 1), tokens off the column tile, empty rows; x^T and a row-major
    B."""
    shapes = ((70, 150, 0.3), (1, 200, 0.5), (130, 40, 0.9), (64, 64, 0.05), (3, 1, 1.0))
    for rows, k, density in shapes:
        W = random_csr(rows, k, density, gen, dtype, "cuda")
        x = randn(tokens, k, gen=gen, dtype=dtype, device="cuda")
        for b in (x.t(), x.t().contiguous()):
            got = _run(W, b, swizzle, block_n=block_n)
            want = W.to_dense().double() @ b.double()
            assert_close(got, want, spmm_bound(W.to_dense(), b), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("swizzle", [True, False])
@pytest.mark.parametrize("tokens", [1, 16, 37])
@pytest.mark.parametrize("block_n", [16, 64])
def test_128_column_steps(swizzle, tokens, block_n, gen):
    """Steps of 128 columns (tiles of 64 x 128, a 32 KB buffer): K off the step and under one,
    split ranges, poisoned out."""
    shapes = ((70, 300, 0.3, 1), (130, 40, 0.9, 1), (64, 1000, 0.1, 3), (3, 1, 1.0, 1))
    for rows, k, density, split in shapes:
        W = random_csr(rows, k, density, gen, torch.bfloat16, "cuda")
        x = randn(tokens, k, gen=gen, dtype=torch.bfloat16, device="cuda")
        got = _run(W, x.t(), swizzle, block_k=128, block_n=block_n, split=split)
        want = W.to_dense().double() @ x.t().double()
        assert_close(got, want, spmm_bound(W.to_dense(), x.t()), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("block_k", [64, 128])
@pytest.mark.parametrize("tokens", [1, 16, 37])
@pytest.mark.parametrize("block_n", [16, 64])
@pytest.mark.parametrize("warps", [8, 4])
def test_128_row_tiles(block_k, tokens, block_n, warps, gen):
    """Tiles of 128 rows on 8 warps (B's tile shared by twice the rows) or 4 (a warp's two m16
    tiles): rows off the tile, a single row, K off the step, split ranges, poisoned out."""
    shapes = ((70, 300, 0.3, 1), (300, 40, 0.9, 1), (129, 1000, 0.1, 3), (1, 200, 0.5, 2))
    for rows, k, density, split in shapes:
        W = random_csr(rows, k, density, gen, torch.bfloat16, "cuda")
        x = randn(tokens, k, gen=gen, dtype=torch.bfloat16, device="cuda")
        got = _run(W, x.t(), block_m=128, block_k=block_k, block_n=block_n, split=split,
                   warps=warps)  # fmt: skip
        want = W.to_dense().double() @ x.t().double()
        assert_close(got, want, spmm_bound(W.to_dense(), x.t()), torch.bfloat16)


# (steps_ahead, unscatter): the walks, and zeroing only the step before's places
WALKS = [(1, False), (2, False), (1, True)]


@pytest.mark.gpu
@pytest.mark.parametrize(("steps_ahead", "unscatter"), WALKS)
@pytest.mark.parametrize("block_k", [64, 128])
@pytest.mark.parametrize("entries_per_thread", [4, 8, 16])
def test_runs_longer_and_shorter_than_a_chunk(
    entries_per_thread, block_k, steps_ahead, unscatter, gen
):
    """A step's run loaded a step ahead up to a chunk (4-16 entries a thread, 512-2048 a
    program), the rest in its step: dense tiles take 2-8 chunks, sparse ones part of one, and
    each split's first and last steps prefetch nothing outside their range (one or two steps
    ahead: ranges of 1-5 steps); unscattered, a long run's places past its first chunk are
    zeroed too."""
    for rows, k, density, split in ((64, 64, 0.97, 1), (130, 300, 0.6, 3), (200, 1000, 0.02, 4)):
        W = random_csr(rows, k, density, gen, torch.bfloat16, "cuda")
        x = randn(16, k, gen=gen, dtype=torch.bfloat16, device="cuda")
        got = _run(W, x.t(), entries_per_thread=entries_per_thread, split=split, fused=False,
                   block_k=block_k, steps_ahead=steps_ahead, unscatter=unscatter)  # fmt: skip
        want = W.to_dense().double() @ x.t().double()
        assert_close(got, want, spmm_bound(W.to_dense(), x.t()), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize(("steps_ahead", "unscatter"), WALKS)
@pytest.mark.parametrize("split", [1, 2, 5])
@pytest.mark.parametrize("entries_per_thread", [4, 16])
def test_runs_cut_to_their_tile(steps_ahead, unscatter, split, entries_per_thread, gen):
    """Tile boundaries (two steps ahead loads each run to the range's end and cuts it when
    scattering): a sparse tile before a dense one (the over-read is the next tile's entries),
    empty tiles, runs longer than a chunk, split ranges (the over-read stops at the range's
    end), K off the step; unscattered, a full tile's values gone before the sparse and
    empty steps after it."""
    W = random_csr(130, 900, 0.05, gen, torch.bfloat16, "cuda")
    dense = W.to_dense()
    dense[:, 64:128] = randn(130, 64, gen=gen, dtype=torch.bfloat16, device="cuda")  # full
    dense[:, 256:384] = 0  # two empty column steps
    for weight in (W, sk.CSRMatrix.from_dense(dense)):
        x = randn(16, 900, gen=gen, dtype=torch.bfloat16, device="cuda")
        got = _run(weight, x.t(), steps_ahead=steps_ahead, split=split,
                   entries_per_thread=entries_per_thread, unscatter=unscatter)  # fmt: skip
        want = weight.to_dense().double() @ x.t().double()
        assert_close(got, want, spmm_bound(weight.to_dense(), x.t()), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("steps_ahead", [1, 2])
@pytest.mark.parametrize("split", [1, 3, 64])
@pytest.mark.parametrize("fused", [True, False])
def test_bias_activation_and_split(split, fused, steps_ahead, gen):
    W = random_csr(100, 700, 0.3, gen, torch.bfloat16, "cuda")
    x = randn(9, 700, gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(100, gen=gen, dtype=torch.bfloat16, device="cuda")
    tile = dict(split=split, fused=fused, steps_ahead=steps_ahead)
    got = _run(W, x.t(), bias=bias, activation="gelu", **tile)
    pre = W.to_dense().double() @ x.t().double() + bias.double()[:, None]
    want = torch.nn.functional.gelu(pre)
    assert_close(got, want, spmm_bound(W.to_dense(), x.t()) + bias.double().abs()[:, None],
                 torch.bfloat16)  # fmt: skip
    if split > 1 and fused:  # the counters are left at zero: the same bits again
        again = _run(W, x.t(), bias=bias, activation="gelu", **tile)
        assert torch.equal(again, got)


@pytest.mark.gpu
def test_llm_shape(gen):
    """4096 x 4096 at 70%, 16 tokens, split as a route would: one run against float64."""
    W = random_csr(4096, 4096, 0.3, gen, torch.bfloat16, "cuda", empty_rows=False)
    x = randn(16, 4096, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = _run(W, x.t(), split=16)
    assert_close(got, W.to_dense().double() @ x.t().double(), spmm_bound(W.to_dense(), x.t()),
                 torch.bfloat16)  # fmt: skip


def test_bad_arguments_are_said(gen):
    W = random_csr(8, 64, 0.5, gen, torch.bfloat16)
    offsets, entries = tiled_entries(W.row_offsets, W.column_indices, W.values, 64)
    b = randn(64, 4, gen=gen, dtype=torch.bfloat16)
    out = torch.empty(8, 4, dtype=torch.bfloat16)
    args = dict(tile_offsets=offsets, entries=entries, b=b, bias=None, out=out, activation="none")
    with pytest.raises(ValueError, match="tile_offsets"):
        spmm_csr_scatter(**{**args, "b": randn(200, 4, gen=gen, dtype=torch.bfloat16)})
    with pytest.raises(ValueError, match="block_n"):
        spmm_csr_scatter(**args, block_n=12)
    with pytest.raises(ValueError, match="entries_per_thread"):
        spmm_csr_scatter(**args, entries_per_thread=12)
    with pytest.raises(ValueError, match="block_k"):
        spmm_csr_scatter(**args, block_k=96)
    with pytest.raises(ValueError, match="steps_ahead"):
        spmm_csr_scatter(**args, steps_ahead=3)
    with pytest.raises(ValueError, match="unscatter walks one step ahead"):
        spmm_csr_scatter(**args, steps_ahead=2, unscatter=True)
    with pytest.raises(ValueError, match="block_m"):
        spmm_csr_scatter(**args, block_m=32)
    with pytest.raises(ValueError, match="warps"):
        spmm_csr_scatter(**args, warps=8)  # 64 rows: a warp's 16 at least
    with pytest.raises(ValueError, match="entries"):
        spmm_csr_scatter(**{**args, "entries": entries.long()})
    with pytest.raises(TypeError, match="16-bit"):
        spmm_csr_scatter(**{**args, "b": b.float(), "out": out.float()})
