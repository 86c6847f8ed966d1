"""The tensor-core CSR SDDMM (kernels/sddmm_tiles.py), its plan and its route.

The kernel runs in the interpreter on CPU (small shapes; bfloat16 upcast there, the
interpreter's bfloat16 dot being wrong) and compiled on CUDA (gpu), against a float64 product
on fresh random data, outputs poisoned with NaN first so an entry never written shows.
"""

import math

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

import sparsekernels as sk
from _helpers import (
    KERNEL_DEVICES,
    assert_close,
    randn,
    random_csr,
    sddmm_want_and_bound,
    skip_interpreter_on_gpu_machine,
)
from sparsekernels.kernels import sddmm_tiles, sddmm_tuning
from sparsekernels.ops import _sddmm_plans


def _launch(
    P, x, y, block_m=16, block_n=16, block_k=16, precision="ieee", programs=None, prefetch=False
):
    plan = sddmm_tiles.build_plan(P.row_offsets, P.column_indices, P.shape[1], block_m, block_n)
    batch = torch.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    out = torch.full((*batch, P.nnz), float("nan"), dtype=x.dtype, device=x.device)
    flat = out.view(math.prod(batch), P.nnz)  # (1, nnz) when unbatched; nnz may be 0
    sddmm_tiles.sddmm_tiles(plan=plan, x=x, y=y, out=flat, block_k=block_k,
                            precision=precision, num_warps=4, num_stages=2,
                            programs=programs, prefetch=prefetch)  # fmt: skip
    return out


def test_plan_places_every_entry(gen):
    """Each entry's place is its tile row's start plus its rank, and its column is listed at
    that rank; tiles are the non-empty ones, ascending; J is the longest run."""
    P = random_csr(45, 70, 0.3, gen)  # empty rows; neither side a multiple of the tile
    plan = sddmm_tiles.build_plan(P.row_offsets, P.column_indices, 70, 16, 32)
    tiles_n = 3
    rows = P.pattern.row_indices()
    cols = P.column_indices.long()
    tile = (rows // 16) * tiles_n + cols // 32
    assert torch.equal(plan.tiles.long(), torch.unique(tile))
    runs = plan.columns.shape[-1]
    seen = torch.zeros(P.nnz, dtype=torch.bool)
    for t, tile_id in enumerate(plan.tiles.tolist()):
        for r in range(16):
            start = int(plan.row_starts[t, r])
            for j in range(runs):
                c = int(plan.columns[t, r, j])
                if c == sddmm_tiles.ABSENT:
                    assert (plan.columns[t, r, j:] == sddmm_tiles.ABSENT).all()
                    break
                place = start + j
                assert rows[place] == (tile_id // tiles_n) * 16 + r
                assert cols[place] == (tile_id % tiles_n) * 32 + c
                seen[place] = True
    assert seen.all()
    assert plan.fill == pytest.approx(P.nnz / (plan.tiles.numel() * 16 * 32))
    assert runs == 1 << (int((plan.columns != sddmm_tiles.ABSENT).sum(-1).max()) - 1).bit_length()


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_every_entry_written(device, dtype, gen):
    skip_interpreter_on_gpu_machine(device)
    P = random_csr(37, 45, 0.3, gen, dtype, device)  # empty rows, partial edge tiles
    x = randn(37, 20, gen=gen, dtype=dtype, device=device)  # K not a multiple of BLOCK_K
    y = randn(45, 20, gen=gen, dtype=dtype, device=device)
    assert_close(_launch(P, x, y), *sddmm_want_and_bound(P, x, y), dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("programs", [1, 3, 10**6])
@pytest.mark.parametrize("prefetch", [False, True], ids=["pipelined", "prefetch"])
def test_programs_walking_tiles(device, dtype, programs, prefetch, gen):
    """K within one step: one program walking every tile, three taking every third (tiles of
    uneven fill, empty rows, partial edge tiles, batched x), more programs asked than tiles;
    K = 16 exactly and K = 5 (masked within the step); the next tile's loads by the pipeliner
    or prefetched into registers (past the last tile: the last one reloaded, not stored)."""
    skip_interpreter_on_gpu_machine(device)
    P = random_csr(37, 45, 0.3, gen, dtype, device)
    for K in (16, 5):
        x = randn(2, 37, K, gen=gen, dtype=dtype, device=device)
        y = randn(45, K, gen=gen, dtype=dtype, device=device)
        got = _launch(P, x, y, programs=programs, prefetch=prefetch)
        assert_close(got, *sddmm_want_and_bound(P, x, y), dtype)


def test_programs_need_k_within_one_step(gen):
    P = random_csr(8, 8, 0.5, gen)
    with pytest.raises(ValueError, match="programs"):
        _launch(P, randn(8, 17, gen=gen), randn(8, 17, gen=gen), programs=2)
    with pytest.raises(ValueError, match="programs"):
        _launch(P, randn(8, 16, gen=gen), randn(8, 16, gen=gen), programs=0)
    with pytest.raises(ValueError, match="prefetch"):
        _launch(P, randn(8, 16, gen=gen), randn(8, 16, gen=gen), prefetch=True)
    empty = random_csr(8, 8, 0.0, gen)  # checked before the early return of no tiles
    with pytest.raises(ValueError, match="programs"):
        _launch(empty, randn(8, 17, gen=gen), randn(8, 17, gen=gen), programs=2)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_degenerate_and_long_k(device, gen):
    """One row, one column, K = 1, a full row of one tile (J = BLOCK_N), K of several steps."""
    skip_interpreter_on_gpu_machine(device)
    for M, N, K, density in [(1, 40, 3, 0.5), (6, 1, 1, 0.9), (3, 16, 70, 1.0), (20, 33, 1, 0.4)]:
        P = random_csr(M, N, density, gen, torch.float32, device, empty_rows=False)
        x = randn(M, K, gen=gen, dtype=torch.float32, device=device)
        y = randn(N, K, gen=gen, dtype=torch.float32, device=device)
        assert_close(_launch(P, x, y), *sddmm_want_and_bound(P, x, y), torch.float32)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_batched_strided_and_nan(device, gen):
    """Batched x against unbatched strided y; a NaN in a row of x reaches that row's entries
    only (the tile computes it into every column; only stored cells leave the tile)."""
    skip_interpreter_on_gpu_machine(device)
    f32 = torch.float32
    P = random_csr(21, 18, 0.5, gen, f32, device)
    x = randn(2, 6, 21, gen=gen, dtype=f32, device=device).transpose(1, 2)  # (2, 21, 6) strided
    y = randn(6, 18, gen=gen, dtype=f32, device=device).t()  # (18, 6) strided
    got = _launch(P, x, y)
    assert got.shape == (2, P.nnz)
    assert_close(got, *sddmm_want_and_bound(P, x, y), f32)

    rows = P.pattern.row_indices().to(device)
    poisoned = int(rows[P.nnz // 2])
    x2 = randn(21, 4, gen=gen, dtype=f32, device=device)
    x2[poisoned] = float("nan")
    y2 = randn(18, 4, gen=gen, dtype=f32, device=device)
    got = _launch(P, x2, y2)
    assert got[rows == poisoned].isnan().all()
    want, bound = sddmm_want_and_bound(P, x2, y2)
    keep = rows != poisoned
    assert_close(got[keep], want[keep], bound[keep], f32)


def test_rule():
    """Well-filled tiles take the kernel; against the whole product only where the visited
    tiles are a part of it, or K is short in half precision."""
    assert sddmm_tuning.sddmm_tiles_takes(64, 0.06, 0.8, True)  # a local window
    assert sddmm_tuning.sddmm_tiles_takes(2048, 0.06, 0.8, False)
    assert sddmm_tuning.sddmm_tiles_takes(64, 0.3, 0.3, True)  # uniform 30%, every tile visited
    assert not sddmm_tuning.sddmm_tiles_takes(2048, 0.3, 0.3, True)
    assert not sddmm_tuning.sddmm_tiles_takes(64, 0.3, 0.3, False)
    assert not sddmm_tuning.sddmm_tiles_takes(64, 0.1, 0.1, True)  # too sparse a fill
    assert not sddmm_tuning.sddmm_prefers_dense(64, 0.3, 4096 * 4096, True, tile_fill=0.3)
    assert sddmm_tuning.sddmm_prefers_dense(64, 0.3, 4096 * 4096, True, tile_fill=0.0)
    config = sddmm_tuning.sddmm_tiles_config  # 2 stages to two 64-column steps, then 3
    assert [config(k).num_stages for k in (1, 64, 128, 129, 256, 300)] == [2, 2, 2, 3, 3, 3]
    assert (config(256).block_m, config(300).block_m) == (64, 128)


def _local_window(n, width, device, dtype):
    i = torch.arange(n, device=device)
    return sk.CSRMatrix.from_dense(((i[:, None] - i[None, :]).abs() < width).to(dtype))


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_route_takes_tiles_where_filled(device, gen, monkeypatch):
    """sk.sddmm runs the tensor-core kernel on a banded pattern and the per-entry kernel on a
    sparse uniform one, both right; the tile plan is built once per pattern."""
    skip_interpreter_on_gpu_machine(device)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    launches = []
    launch = sddmm_tiles.sddmm_tiles
    monkeypatch.setattr(
        sddmm_tiles, "sddmm_tiles", lambda **kw: launches.append(kw) or launch(**kw)
    )
    band = _local_window(512, 40, device, dtype)  # fill 0.44, a third of the product visited
    sparse = random_csr(512, 512, 0.02, gen, dtype, device)
    x = randn(512, 24, gen=gen, dtype=dtype, device=device)
    y = randn(512, 24, gen=gen, dtype=dtype, device=device)
    for P, tiles in ((band, True), (sparse, False)):
        launches.clear()
        got = sk.sddmm(x, y, P, backend="triton").values
        assert_close(got, *sddmm_want_and_bound(P, x, y), dtype)
        assert bool(launches) == tiles
    plan = _sddmm_plans.tile_plan(band.row_offsets, band.column_indices, 512, 64, 64)
    sk.sddmm(x, y, band, backend="triton")
    assert launches[-1]["plan"] is plan  # cached


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_float32_follows_torch_matmul_precision(device, gen, monkeypatch):
    skip_interpreter_on_gpu_machine(device)
    precisions = []
    launch = sddmm_tiles.sddmm_tiles
    monkeypatch.setattr(
        sddmm_tiles, "sddmm_tiles", lambda **kw: precisions.append(kw["precision"]) or launch(**kw)
    )
    P = _local_window(512, 40, device, torch.float32)
    x = randn(512, 8, gen=gen, dtype=torch.float32, device=device)
    previous = torch.get_float32_matmul_precision()
    try:
        sk.sddmm(x, x, P, backend="triton")
        torch.set_float32_matmul_precision("high")
        sk.sddmm(x, x, P, backend="triton")
    finally:
        torch.set_float32_matmul_precision(previous)
    assert precisions == ["ieee", "tf32"]


def test_plan_cache_follows_in_place_edits(gen):
    P = random_csr(30, 30, 0.5, gen)
    ro, ci = P.row_offsets.clone(), P.column_indices.clone()
    first = _sddmm_plans.tile_plan(ro, ci, 30, 16, 16)
    assert _sddmm_plans.tile_plan(ro, ci, 30, 16, 16) is first
    ci.add_(0)  # an in-place edit bumps the version
    assert _sddmm_plans.tile_plan(ro, ci, 30, 16, 16) is not first
    assert _sddmm_plans.row_order(ro, ci, 30) is _sddmm_plans.row_order(ro, ci, 30)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("k", [64, 100, 300])
def test_route_on_gpu_at_its_tiles(dtype, k, gen, monkeypatch):
    """The route's own tiles (64 x 64 at short K, 128 x 128 past 256) on a banded pattern with
    16 heads, by the default dispatch: every entry against float64."""
    launches = []
    launch = sddmm_tiles.sddmm_tiles
    monkeypatch.setattr(
        sddmm_tiles, "sddmm_tiles", lambda **kw: launches.append(kw) or launch(**kw)
    )
    P = _local_window(700, 90, "cuda", dtype)
    x = randn(16, 700, k, gen=gen, dtype=dtype, device="cuda")
    y = randn(16, 700, k, gen=gen, dtype=dtype, device="cuda")
    got = sk.sddmm(x, y, P).values
    assert_close(got, *sddmm_want_and_bound(P, x, y), dtype)
    assert launches and launches[0]["plan"].block_m == (64 if k <= 256 else 128)


def test_fill_estimate_samples_row_blocks(gen, monkeypatch):
    """The route's fill reads a sample of row blocks: exact when the sample is every block,
    within a few percent of the plan's own fill on a banded and a uniform pattern otherwise."""
    band = _local_window(3000, 100, "cpu", torch.float64)  # 47 row blocks of 64
    uniform = random_csr(3000, 900, 0.1, gen)
    for P, cols in ((band, 3000), (uniform, 900)):
        exact = sddmm_tiles.build_plan(P.row_offsets, P.column_indices, cols, 64, 64).fill
        estimate = _sddmm_plans._sampled_fill(P.row_offsets, P.column_indices, cols)
        assert estimate == pytest.approx(exact, rel=0.05)
        monkeypatch.setattr(_sddmm_plans, "FILL_SAMPLE_BLOCKS", 1000)
        every = _sddmm_plans._sampled_fill(P.row_offsets, P.column_indices, cols)
        assert every == pytest.approx(exact, rel=1e-12)
        monkeypatch.undo()
    empty = random_csr(100, 100, 0.0, gen)
    assert _sddmm_plans.tile_fill(empty.row_offsets, empty.column_indices, 100) == 0.0


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    M=st.integers(1, 40),
    N=st.integers(1, 40),
    K=st.integers(1, 40),
    density=st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 1.0)),
    band=st.one_of(st.none(), st.integers(1, 12)),
    batch=st.sampled_from([None, 1, 3]),
    dtype=st.sampled_from([torch.float16, torch.float32]),
    seed=st.integers(0, 2**32 - 1),
)
def test_kernel_property(M, N, K, density, band, batch, dtype, seed):
    """Random shapes, uniform or banded patterns (runs up to a full tile row), batched or not,
    at 16 x 16 tiles in the interpreter (compiled on CUDA): every entry against float64."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(seed)
    if band is None:
        mask = torch.rand(M, N, generator=g) < density
    else:
        i, j = torch.arange(M)[:, None], torch.arange(N)[None, :]
        mask = (i - j).abs() < band
    P = sk.CSRMatrix.from_dense(mask.to(dtype)).to(device)
    lead = () if batch is None else (batch,)
    x = torch.randn(*lead, M, K, generator=g).to(device, dtype)
    y = torch.randn(N, K, generator=g).to(device, dtype)
    assert_close(_launch(P, x, y), *sddmm_want_and_bound(P, x, y), dtype)
