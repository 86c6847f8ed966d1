"""The scatter kernel's wgmma form (kernels/spmm_csr_scatter_wgmma.py: three tiles in a ring,
the product asynchronous) on the GPU against float64, poisoned outputs: the ring's turns
(ranges of 1 to many steps, and split ranges ending mid-turn), runs longer than a chunk,
every column tile width, bias and activation, bad arguments said on the CPU."""

import pytest
import torch

from _helpers import assert_close, randn, random_csr, spmm_bound
from sparsekernels.kernels.spmm_csr_scatter import spmm_csr_scatter, tiled_entries
from sparsekernels.kernels.spmm_csr_scatter_wgmma import b_slots, buffer_bytes, turn_ranges


def _run(W, b, bias=None, activation="none", **tile):
    offsets, entries = tiled_entries(W.row_offsets, W.column_indices, W.values, b.shape[0])
    out = torch.full((W.shape[0], b.shape[1]), float("nan"), dtype=b.dtype, device=b.device)
    return spmm_csr_scatter(
        tile_offsets=offsets, entries=entries, b=b, bias=bias, out=out, activation=activation,
        wgmma=True, **tile,
    )  # fmt: skip


def test_split_ranges_are_whole_turns():
    """Pieces of whole turns of 3 steps covering every step, none empty; K = 0 one piece."""
    for steps in (0, 1, 2, 3, 4, 16, 64, 224):
        for split in (1, 2, 3, 4, 5, 16, 64):
            per, pieces = turn_ranges(steps, split)
            assert per % 3 == 0 and pieces <= max(1, split)
            assert (pieces - 1) * per < max(steps, 1) <= pieces * per


def test_buffer_holds_the_ring_and_b():
    assert [b_slots(n) for n in (8, 16, 32, 64)] == [1, 1, 2, 3]
    assert buffer_bytes(16) == 4 * 8192 and buffer_bytes(64) == 6 * 8192


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens", [1, 5, 16, 37])
@pytest.mark.parametrize("block_n", [8, 16, 32, 64])
def test_every_element_written(dtype, tokens, block_n, gen):
    """Rows off the 64-row tile, K off the 64-column step and under one (K = 1), 1-16 steps
    (the ring's turn of 3 whole, cut short, wrapped), empty rows; x^T and a row-major B."""
    shapes = ((70, 150, 0.3), (1, 200, 0.5), (130, 40, 0.9), (64, 64, 0.05), (3, 1, 1.0),
              (65, 1000, 0.2), (128, 448, 0.1))  # fmt: skip
    for rows, k, density in shapes:
        W = random_csr(rows, k, density, gen, dtype, "cuda")
        x = randn(tokens, k, gen=gen, dtype=dtype, device="cuda")
        for b in (x.t(), x.t().contiguous()):
            got = _run(W, b, block_n=block_n)
            want = W.to_dense().double() @ b.double()
            assert_close(got, want, spmm_bound(W.to_dense(), b), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("entries_per_thread", [4, 8, 16])
@pytest.mark.parametrize("split", [1, 2, 3, 5])
def test_runs_and_split_ranges(entries_per_thread, split, gen):
    """Dense tiles (runs of 2-8 chunks) and sparse ones; split ranges of 1-7 steps, each
    starting its ring at tile 0 and ending mid-turn."""
    for rows, k, density in ((64, 64, 0.97), (130, 1300, 0.6), (200, 1000, 0.02)):
        W = random_csr(rows, k, density, gen, torch.bfloat16, "cuda")
        x = randn(16, k, gen=gen, dtype=torch.bfloat16, device="cuda")
        got = _run(W, x.t(), entries_per_thread=entries_per_thread, split=split, fused=False)
        want = W.to_dense().double() @ x.t().double()
        assert_close(got, want, spmm_bound(W.to_dense(), x.t()), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("split", [1, 3, 64])
@pytest.mark.parametrize("fused", [True, False])
def test_bias_activation_and_split(split, fused, gen):
    W = random_csr(100, 700, 0.3, gen, torch.bfloat16, "cuda")
    x = randn(9, 700, gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(100, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = _run(W, x.t(), bias=bias, activation="gelu", split=split, fused=fused)
    want = torch.nn.functional.gelu(W.to_dense().double() @ x.t().double() + bias.double()[:, None])
    assert_close(got, want, spmm_bound(W.to_dense(), x.t()) + bias.double().abs()[:, None],
                 torch.bfloat16)  # fmt: skip


@pytest.mark.gpu
def test_llm_shape(gen):
    """4096 x 4096 at 70%, 16 tokens, split as a route would."""
    W = random_csr(4096, 4096, 0.3, gen, torch.bfloat16, "cuda", empty_rows=False)
    x = randn(16, 4096, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = _run(W, x.t(), split=16)
    assert_close(got, W.to_dense().double() @ x.t().double(), spmm_bound(W.to_dense(), x.t()),
                 torch.bfloat16)  # fmt: skip


def test_other_tiles_are_refused(gen):
    W = random_csr(8, 64, 0.5, gen, torch.bfloat16)
    offsets, entries = tiled_entries(W.row_offsets, W.column_indices, W.values, 64)
    b = randn(64, 4, gen=gen, dtype=torch.bfloat16)
    out = torch.empty(8, 4, dtype=torch.bfloat16)
    args = dict(tile_offsets=offsets, entries=entries, b=b, bias=None, out=out, activation="none")
    for option in (dict(block_k=128), dict(block_m=128), dict(steps_ahead=2), dict(swizzle=False)):
        with pytest.raises(ValueError, match="wgmma takes"):
            spmm_csr_scatter(**args, wgmma=True, **option)
