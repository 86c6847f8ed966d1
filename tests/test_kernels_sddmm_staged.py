"""The staged CSR SDDMM (kernels/sddmm_staged.py): its refusals on the CPU, the kernel on the
GPU (Gluon has no interpreter). Each GPU check compares with a float64 product on fresh random
data; outputs are poisoned with NaN first so an entry no program writes shows up. Patterns
cross the blocks unevenly (M, N not multiples of a block, empty rows), blocks are cut into
several pieces, and lanes past a piece's end read its first cell.
"""

import pytest
import torch

from _helpers import assert_close, randn, random_csr, sddmm_want_and_bound
from sparsekernels.kernels.sddmm_blocked import build_plan


def _staged():
    from sparsekernels.kernels import sddmm_staged

    return sddmm_staged


def _launch_poisoned(P, x, y, block=None, chunk=1000, num_warps=4, block_nnz=64):
    staged = _staged()
    if block is None:
        constants = staged.config(x.shape[1], num_warps, block_nnz)
        block = (constants["BR"], constants["BC"])
    plan = build_plan(P.row_offsets, P.column_indices, y.shape[0], *block, chunk)
    out = torch.full((P.nnz,), float("nan"), dtype=torch.float32, device=x.device)
    staged.sddmm_staged(plan=plan, x=x, y=y, out=out, num_warps=num_warps,
                        block_nnz=block_nnz)  # fmt: skip
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("K", [16, 32, 48, 64])
@pytest.mark.parametrize("shape,density", [((300, 277), 0.05), ((700, 530), 0.02), ((1, 1), 1.0)])
def test_every_entry_written(K, shape, density, gen):
    """The default blocks (128 x 128 at K 48-64, 256 x 256 below), partial in both directions."""
    M, N = shape
    P = random_csr(M, N, density, gen, torch.float32, "cuda")
    x = randn(M, K, gen=gen, dtype=torch.float32, device="cuda")
    y = randn(N, K, gen=gen, dtype=torch.float32, device="cuda")
    assert_close(_launch_poisoned(P, x, y), *sddmm_want_and_bound(P, x, y), torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("K", [16, 48, 64])
@pytest.mark.parametrize("block,chunk", [((32, 64), 1000), ((64, 32), 7), ((128, 128), 50),
                                         ((32, 32), 1)])  # fmt: skip
def test_blocks_and_chunks(K, block, chunk, gen):
    """Small blocks (many of them, the last partial), blocks cut into pieces of 1-50 entries
    (a step of 64 entries cut by a piece's end)."""
    P = random_csr(150, 99, 0.3, gen, torch.float32, "cuda")
    x = randn(150, K, gen=gen, dtype=torch.float32, device="cuda")
    y = randn(99, K, gen=gen, dtype=torch.float32, device="cuda")
    got = _launch_poisoned(P, x, y, block, chunk)
    assert_close(got, *sddmm_want_and_bound(P, x, y), torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("num_warps,block_nnz", [(4, 128), (8, 64), (2, 16)])
def test_warps_and_steps(num_warps, block_nnz, gen):
    P = random_csr(260, 300, 0.1, gen, torch.float32, "cuda")
    x = randn(260, 64, gen=gen, dtype=torch.float32, device="cuda")
    y = randn(300, 64, gen=gen, dtype=torch.float32, device="cuda")
    got = _launch_poisoned(P, x, y, num_warps=num_warps, block_nnz=block_nnz)
    assert_close(got, *sddmm_want_and_bound(P, x, y), torch.float32)


@pytest.mark.gpu
def test_strided_rows(gen):
    """x and y rows inside wider tensors (row strides 80 and 68 floats, unit along K)."""
    P = random_csr(200, 150, 0.1, gen, torch.float32, "cuda")
    x = randn(200, 80, gen=gen, dtype=torch.float32, device="cuda")[:, 8:40]
    y = randn(150, 68, gen=gen, dtype=torch.float32, device="cuda")[:, 1:33]
    got = _launch_poisoned(P, x, y)
    assert_close(got, *sddmm_want_and_bound(P, x, y), torch.float32)


@pytest.mark.gpu
def test_nan_stays_in_its_entries(gen):
    """A NaN in x's row 4 reaches exactly row 4's entries (no staged row leaks into another)."""
    P = random_csr(64, 70, 0.3, gen, torch.float32, "cuda")
    x = randn(64, 32, gen=gen, dtype=torch.float32, device="cuda")
    y = randn(70, 32, gen=gen, dtype=torch.float32, device="cuda")
    x[4, 7] = float("nan")
    assert_close(_launch_poisoned(P, x, y, (32, 32)), *sddmm_want_and_bound(P, x, y),
                 torch.float32)  # fmt: skip


@pytest.mark.gpu
def test_empty_pattern(gen):
    P = random_csr(40, 30, 0.0, gen, torch.float32, "cuda")
    x = randn(40, 16, gen=gen, dtype=torch.float32, device="cuda")
    y = randn(30, 16, gen=gen, dtype=torch.float32, device="cuda")
    assert _launch_poisoned(P, x, y).numel() == 0


@pytest.mark.parametrize(
    "x_shape,y_shape,dtype",
    [((8, 20), (9, 20), torch.float32), ((8, 80), (9, 80), torch.float32),
     ((8, 0), (9, 0), torch.float32), ((2, 8, 16), (2, 9, 16), torch.float32),
     ((8, 16), (9, 32), torch.float32), ((8, 16), (9, 16), torch.float64)],
    ids=["k20", "k80", "k0", "batched", "k-differs", "float64"],
)  # fmt: skip
def test_refusals(x_shape, y_shape, dtype, gen):
    """K not a multiple of 16 in [16, 64], batched operands, other dtypes (TypeError), CPU
    tensors: an error before any launch."""
    staged = _staged()
    P = random_csr(8, 9, 0.5, gen, torch.float32)
    plan = build_plan(P.row_offsets, P.column_indices, 9, 32, 32, 1000)
    x, y = torch.zeros(x_shape, dtype=dtype), torch.zeros(y_shape, dtype=dtype)
    out = torch.zeros(P.nnz, dtype=torch.float32)
    with pytest.raises(TypeError if dtype != torch.float32 else ValueError):
        staged.sddmm_staged(plan=plan, x=x, y=y, out=out)


def test_cpu_tensors_refused(gen):
    staged = _staged()
    P = random_csr(8, 9, 0.5, gen, torch.float32)
    plan = build_plan(P.row_offsets, P.column_indices, 9, 32, 32, 1000)
    f32 = torch.float32
    x, y = randn(8, 16, gen=gen, dtype=f32), randn(9, 16, gen=gen, dtype=f32)
    with pytest.raises(ValueError, match="CUDA"):
        staged.sddmm_staged(plan=plan, x=x, y=y, out=torch.zeros(P.nnz))


def test_config_refuses_large_blocks():
    staged = _staged()
    with pytest.raises(ValueError):
        staged.config(64, block=(256, 256))  # 128 KB
    with pytest.raises(ValueError):
        staged.config(32, block=(96, 128))  # not a power of two
    assert staged.shared_bytes(staged.config(64)) == 65536
    assert staged.shared_bytes(staged.config(48)) == 65536  # rows padded to 256 bytes
    assert staged.shared_bytes(staged.config(16)) == 32768
