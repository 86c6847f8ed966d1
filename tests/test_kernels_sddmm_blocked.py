"""The blocked CSR SDDMM walk (kernels/sddmm_blocked.py) and its plan: in the interpreter on CPU
(small shapes), compiled on CUDA (gpu).

Each check compares with a float64 product on fresh random data; outputs are poisoned with NaN
first so an entry no program writes shows up. Blocks are chosen so that patterns cross them
unevenly: a partial last block in both directions, empty blocks, blocks cut into several
pieces (chunk), a block of one row or one column, fewer (persistent) programs than pieces.
"""

import importlib

import pytest
import torch

from _helpers import (
    ALL_DTYPES,
    KERNEL_DEVICES,
    assert_close,
    randn,
    random_csr,
    sddmm_want_and_bound,
    skip_interpreter_on_gpu_machine,
    with_column_dtype,
)
from sparsekernels.kernels import sddmm_blocked, sddmm_tuning


def _launch_poisoned(
    P,
    x,
    y,
    block=(8, 8),
    chunk=1000,
    block_nnz=16,
    block_k=16,
    programs=None,
    ahead=False,
):
    batch = torch.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    out = torch.full((*batch, P.nnz), float("nan"), dtype=x.dtype, device=x.device)
    plan = sddmm_blocked.build_plan(P.row_offsets, P.column_indices, y.shape[-2], *block, chunk)
    sddmm_blocked.sddmm_blocked(
        plan=plan,
        x=x,
        y=y,
        out=out.view(-1, P.nnz) if P.nnz else out.view(1, 0),
        block_nnz=block_nnz,
        block_k=block_k,
        num_warps=1,
        programs=programs,
        ahead=ahead,
    )
    return out


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("K", [19, 32], ids=["masked-k", "even-k"])
def test_every_entry_written(device, dtype, K, gen):
    """K past one step of 16 and not a multiple of it (loads masked on K), or a multiple
    (EVEN_K: no masks; lanes past a piece read the block's first row and column)."""
    skip_interpreter_on_gpu_machine(device)
    P = random_csr(37, 29, 0.3, gen, dtype, device)  # empty rows; blocks cut at 8 x 8 unevenly
    x = randn(37, K, gen=gen, dtype=dtype, device=device)
    y = randn(29, K, gen=gen, dtype=dtype, device=device)
    assert_close(_launch_poisoned(P, x, y), *sddmm_want_and_bound(P, x, y), dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize(
    "block,chunk",
    [((5, 7), 3), ((1, 1), 1), ((64, 64), 4), ((37, 1), 1000), ((1, 29), 2), ((3, 100), 17)],
)
def test_blocks_and_chunks(device, block, chunk, gen):
    """Blocks of one row, one column, larger than the matrix; blocks cut into pieces of 1-17
    entries; steps of 16 entries cut by a piece's end."""
    skip_interpreter_on_gpu_machine(device)
    P = random_csr(37, 29, 0.4, gen, torch.float64, device)
    x, y = randn(37, 5, gen=gen, device=device), randn(29, 5, gen=gen, device=device)
    got = _launch_poisoned(P, x, y, block, chunk)
    assert_close(got, *sddmm_want_and_bound(P, x, y), torch.float64)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("programs", [1, 3, 10**6])
def test_persistent_programs(device, programs, gen):
    """One program walking every piece, three taking every third (pieces of uneven length,
    batched), more programs asked than pieces (one a piece)."""
    skip_interpreter_on_gpu_machine(device)
    P = random_csr(29, 31, 0.4, gen, torch.float64, device)
    x, y = randn(2, 29, 6, gen=gen, device=device), randn(2, 31, 6, gen=gen, device=device)
    got = _launch_poisoned(P, x, y, (8, 8), 7, programs=programs)
    assert_close(got, *sddmm_want_and_bound(P, x, y), torch.float64)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("K", [16, 19, 48], ids=["one-step", "masked-k", "even-k"])
@pytest.mark.parametrize("programs", [None, 3])
def test_loads_a_step_ahead(device, K, programs, gen):
    """Each step's loads issued during the step before (`ahead`): the operands too where K is
    one step (16), the cells only past it; pieces of 1-40 entries (a step cut by a piece's
    end, a piece's last step loading past it), batched x, persistent programs."""
    skip_interpreter_on_gpu_machine(device)
    P = random_csr(41, 35, 0.35, gen, torch.float64, device)
    x, y = randn(2, 41, K, gen=gen, device=device), randn(35, K, gen=gen, device=device)
    for block, chunk in [((8, 8), 40), ((5, 35), 1), ((41, 3), 21)]:
        got = _launch_poisoned(P, x, y, block, chunk, programs=programs, ahead=True)
        assert_close(got, *sddmm_want_and_bound(P, x, y), torch.float64)


def test_programs_must_be_positive(gen):
    P = random_csr(4, 4, 0.5, gen)
    with pytest.raises(ValueError, match="programs"):
        _launch_poisoned(P, randn(4, 2, gen=gen), randn(4, 2, gen=gen), programs=0)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("wide", [False, True], ids=["int32", "int64"])
def test_strided_batched_and_nan(device, wide, gen, monkeypatch):
    """x batched and transposed (a stride along K), y unbatched and strided; offsets in int32
    and (forced, as past 2^31) int64; a NaN row of x reaches its row's entries only, and rows
    of y no entry reads never spread theirs."""
    skip_interpreter_on_gpu_machine(device)
    if wide:
        monkeypatch.setattr(sddmm_blocked, "INT32_LIMIT", 0)
    P = random_csr(23, 17, 0.4, gen, torch.float64, device)
    x = randn(2, 6, 23, gen=gen, device=device).transpose(1, 2)  # (2, 23, 6), stride_xk 23
    y = randn(6, 17, gen=gen, device=device).t()  # (17, 6), unbatched
    got = _launch_poisoned(P, x, y, block=(4, 8), chunk=5)
    assert got.shape == (2, P.nnz)
    assert_close(got, *sddmm_want_and_bound(P, x, y), torch.float64)

    x2, y2 = randn(23, 4, gen=gen, device=device), randn(3, 17, 4, gen=gen, device=device)
    x2[1] = float("nan")
    y2[:, ~(P.to_dense() != 0).any(0)] = float("nan")
    got = _launch_poisoned(P, x2, y2, block=(4, 8), chunk=5)
    want, bound = sddmm_want_and_bound(P, x2, y2)
    assert torch.isnan(got).sum() == 3 * int(P.row_offsets[2] - P.row_offsets[1])
    assert_close(got, want, bound.nan_to_num(1.0), torch.float64)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_degenerate_shapes(device, gen):
    """One row, one column, K = 1, a long row (many steps in one block), K past 64."""
    skip_interpreter_on_gpu_machine(device)
    for M, N, K, density in [(1, 1, 1, 1.0), (1, 90, 3, 0.9), (6, 1, 1, 0.9), (4, 7, 70, 0.5)]:
        P = random_csr(M, N, density, gen, torch.float64, device, empty_rows=False)
        x, y = randn(M, K, gen=gen, device=device), randn(N, K, gen=gen, device=device)
        got = _launch_poisoned(P, x, y, block=(2, 64), chunk=1000)
        assert_close(got, *sddmm_want_and_bound(P, x, y), torch.float64)
    empty = random_csr(3, 5, 0.0, gen, torch.float64, device)
    x, y = randn(3, 2, gen=gen, device=device), randn(5, 2, gen=gen, device=device)
    assert _launch_poisoned(empty, x, y).shape == (0,)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_wider_column_indices_give_the_same_bits(device, index_dtype, gen):
    skip_interpreter_on_gpu_machine(device)
    P = random_csr(19, 23, 0.3, gen, torch.float32, device)
    x = randn(19, 37, gen=gen, dtype=torch.float32, device=device)
    y = randn(23, 37, gen=gen, dtype=torch.float32, device=device)
    wide = _launch_poisoned(with_column_dtype(P, index_dtype), x, y)
    assert torch.equal(wide, _launch_poisoned(P, x, y))


@pytest.mark.parametrize("block,chunk", [((4, 8), 5), ((1, 1), 1), ((64, 3), 1000)])
def test_plan_groups_entries_by_block(block, chunk, gen):
    """Every CSR place once; a piece's entries in one block, in CSR order; their rows and
    columns within the block; a block cut into ceil(entries / chunk) pieces of `chunk` but
    the last."""
    P = random_csr(23, 17, 0.4, gen)
    plan = sddmm_blocked.build_plan(P.row_offsets, P.column_indices, 17, *block, chunk)
    R, C = block
    assert torch.equal(plan.entries.sort().values.long(), torch.arange(P.nnz))
    rows = P.pattern.row_indices().long()[plan.entries.long()]
    cols = P.column_indices.long()[plan.entries.long()]
    assert plan.cells.dtype == torch.int32
    starts = plan.starts.tolist()
    assert starts[0] == 0 and starts[-1] == P.nnz and len(starts) == plan.pieces + 1
    per_block = {}
    for p in range(plan.pieces):
        span = slice(starts[p], starts[p + 1])
        assert 0 < starts[p + 1] - starts[p] <= chunk
        first = int(plan.first_rows[p])
        assert first % R == 0 and (rows[span] // R == first // R).all()
        assert (cols[span] // C == cols[span][0] // C).all()
        first_col = int(plan.first_cols[p])
        assert first_col % C == 0 and (cols[span] // C == first_col // C).all()
        cells = plan.cells[span].long()
        assert torch.equal(cells >> 16, rows[span] - first)
        assert torch.equal(cells & 0xFFFF, cols[span] - first_col)
        assert (plan.entries[span].diff() > 0).all()  # CSR order within a block
        key = (first // R, int(cols[span][0]) // C)
        per_block.setdefault(key, []).append(starts[p + 1] - starts[p])
    for sizes in per_block.values():
        assert all(s == chunk for s in sizes[:-1])
    blocks = torch.unique((rows // R) * 100 + cols // C)
    assert len(per_block) == blocks.numel()


def test_plan_refuses_bad_blocks():
    P = random_csr(4, 4, 0.5, torch.Generator().manual_seed(0))
    for block, chunk, what in [((0, 4), 4, "block_rows"), ((2**15 + 1, 4), 4, "block_rows"),
                               ((4, 0), 4, "block_cols"), ((4, 2**16 + 1), 4, "block_cols"),
                               ((4, 4), 0, "chunk")]:  # fmt: skip
        with pytest.raises(ValueError, match=what):
            sddmm_blocked.build_plan(P.row_offsets, P.column_indices, 4, *block, chunk)


def test_config_rule():
    """Square blocks whose X and Y rows take SDDMM_BLOCKED_ROW_BYTES, 16 to 1024 rows; taken
    (once SDDMM_BLOCKED is on) where they cut L2's bytes an entry below half."""
    config = sddmm_tuning.sddmm_blocked_config
    side = sddmm_tuning.SDDMM_BLOCKED_ROW_BYTES // (2 * 64 * 4) // 16 * 16
    assert config(64, 4).block_rows == config(64, 4).block_cols == side
    assert config(64, 2).block_rows == 2 * side
    assert config(1, 2).block_rows == 1024 and config(8192, 4).block_rows == 16
    assert config(64, 4).block_k == 16 and config(64, 2).block_k == 32
    assert config(8, 2).block_k == 16 and config(20, 2).block_k == 32


def test_route_takes_it_where_on(gen, monkeypatch):
    """With SDDMM_BLOCKED on, the triton backend runs the blocked walk where its rule holds,
    and gives the per-entry kernel's answer; off (as shipped until timed), never."""
    op = importlib.import_module("sparsekernels.ops.sddmm")  # the module, not the function
    called = []
    real = sddmm_blocked.sddmm_blocked
    monkeypatch.setattr(sddmm_blocked, "sddmm_blocked", lambda **k: called.append(1) or real(**k))
    P = random_csr(40, 48, 0.5, gen)
    x, y = randn(40, 8, gen=gen), randn(48, 8, gen=gen)
    assert not sddmm_tuning.sddmm_blocked_takes(8, 8, 0.5)
    monkeypatch.setattr(sddmm_tuning, "SDDMM_BLOCKED", True)
    assert sddmm_tuning.sddmm_blocked_takes(8, 8, 0.5)
    assert not sddmm_tuning.sddmm_blocked_takes(8, 8, 0.0)
    got = op._triton_csr(P.row_offsets, P.column_indices, x, y)
    assert called and torch.isfinite(got).all()
    assert_close(got, *sddmm_want_and_bound(P, x, y), torch.float64)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape,density", [((2048, 2048, 64), 0.1), ((777, 1500, 300), 0.3)])
def test_large_on_cuda(dtype, shape, density, gen):
    M, N, K = shape
    P = random_csr(M, N, density, gen, dtype, "cuda")
    x = randn(3, M, K, gen=gen, dtype=dtype, device="cuda")
    y = randn(N, K, gen=gen, dtype=dtype, device="cuda")
    config = sddmm_tuning.sddmm_blocked_config(K, x.element_size())
    got = _launch_poisoned(P, x, y, (config.block_rows, config.block_cols), config.chunk,
                           config.block_nnz, config.block_k)  # fmt: skip
    assert_close(got, *sddmm_want_and_bound(P, x, y), dtype)
