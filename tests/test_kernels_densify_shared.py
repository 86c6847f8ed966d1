"""The densify through shared memory (kernels/densify_shared.py, the dense backend's CSR densify
on CUDA): its configuration on the CPU, the kernel on the GPU (Gluon has no interpreter),
bitwise against torch's to_dense into outputs poisoned with NaN, so an unwritten element shows."""

import pytest
import torch

from _helpers import random_csr
from sparsekernels.kernels import densify_tuning
from sparsekernels.kernels.densify_tuning import densify_csr_shared_config
from sparsekernels.ops import _dense as dense_module
from test_kernels_densify import assert_bitwise


def test_config_fills_a_program_and_refuses_wide_rows():
    bf16 = densify_csr_shared_config(14336, 4096, 14336 * 1229, 2)
    assert (bf16.rows_per_program, bf16.row_span, bf16.block_nnz) == (1, 4096, 1024)
    wide = densify_csr_shared_config(4096, 14336, 4096 * 4300, 2)
    assert (wide.rows_per_program, wide.row_span) == (1, 16384)  # 32 KB a program
    four = densify_csr_shared_config(8192, 1000, 8192 * 300, 2)  # 8 KB, 256 entries a step
    assert (four.rows_per_program, four.block_nnz) == (4, 256)
    most = densify_csr_shared_config(65536, 100, 65536 * 30, 4)  # at most 16 rows
    assert (most.rows_per_program, most.block_nnz) == (16, 32)
    assert densify_csr_shared_config(128, 32768, 8000, 2).row_span == 32768  # 64 KB: one row
    assert densify_csr_shared_config(128, 32769, 8000, 2) is None  # a row past 64 KB
    assert densify_csr_shared_config(256, 16385, 8000, 4) is None
    assert densify_csr_shared_config(4096, 4096, 8000, 8) is None  # float64: Triton densify
    assert densify_csr_shared_config(2048, 1024, 8000, 2) is None  # small: Triton densify


@pytest.fixture(autouse=True)
def _every_size(request, monkeypatch):
    """The GPU tests' small weights take the shared densify (the route keeps it for large)."""
    if request.node.get_closest_marker("gpu") is None:
        yield
        return
    monkeypatch.setattr(densify_tuning, "SHARED_LEAST_ELEMENTS", 0)
    densify_csr_shared_config.cache_clear()
    yield
    densify_csr_shared_config.cache_clear()


def _launch(A, config, values=None, columns=None):
    from sparsekernels.kernels.densify_shared import densify_csr_shared

    values = A.values if values is None else values
    batch = values.shape[0] if values.dim() == 2 else 1
    out = torch.full((batch, *A.shape), float("nan"), dtype=values.dtype, device="cuda")
    densify_csr_shared(
        row_offsets=A.row_offsets,
        column_indices=A.column_indices if columns is None else columns,
        values=values,
        out=out,
        rows_per_program=config.rows_per_program,
        row_span=config.row_span,
        block_nnz=config.block_nnz,
        num_warps=config.num_warps,
    )
    return out if values.dim() == 2 else out[0]


def _configs(A):
    """The default, one row with 512 entries a step, and as many rows as 64 KB hold (at most
    16) with 1024 entries a step over them."""
    default = densify_csr_shared_config(*A.shape, A.nnz, A.values.element_size())
    span = default.row_span
    most = min(16, 65536 // (span * A.values.element_size()))
    return {
        "default": default,
        "one row": densify_tuning.DensifyCsrSharedConfig(1, span, 512, 4),
        "most rows": densify_tuning.DensifyCsrSharedConfig(most, span, 1024 // most, 4),
    }


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize(
    "shape,density",
    [
        ((1, 1), 1.0),
        ((1, 37), 0.5),  # one row, K not a multiple of 8 (no 16-byte stores)
        ((37, 100), 0.3),  # rows past a program's, every third row empty
        ((20, 300), 0.05),
        ((9, 40), 0.0),  # no stored entry
        ((33, 1000), 0.3),
        ((70, 4096), 0.3),
        ((3, 14336), 0.3),  # rows longer than a scatter step
        ((5, 1 << 14), 0.3),  # 32 KB (bf16) or 64 KB (fp32) a row
    ],
)
def test_gpu_every_element_written(dtype, shape, density, gen):
    A = random_csr(*shape, density, gen, dtype, "cuda")
    want = A.to_dense()
    for config in _configs(A).values():
        assert_bitwise(_launch(A, config), want)


@pytest.mark.gpu
def test_gpu_a_row_of_64_kb(gen):
    A = random_csr(3, 32768, 0.3, gen, torch.bfloat16, "cuda")
    config = densify_csr_shared_config(*A.shape, A.nnz, 2)
    assert config.rows_per_program * config.row_span * 2 == 64 * 1024
    assert_bitwise(_launch(A, config), A.to_dense())


@pytest.mark.gpu
@pytest.mark.parametrize("index", [torch.int16, torch.int32, torch.int64])
def test_gpu_column_index_types(index, gen):
    A = random_csr(29, 700, 0.3, gen, torch.bfloat16, "cuda")
    for config in _configs(A).values():
        assert_bitwise(_launch(A, config, columns=A.column_indices.to(index)), A.to_dense())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gpu_values_copied_as_bits(dtype, gen):
    """NaN, Inf and -0.0 among the stored values come out as stored."""
    A = random_csr(23, 50, 0.4, gen, dtype, "cuda")
    values = A.values.clone()
    values[:3] = torch.tensor([float("nan"), float("-inf"), -0.0], dtype=dtype)
    A = A.with_values(values)
    assert_bitwise(_launch(A, _configs(A)["default"]), A.to_dense())


@pytest.mark.gpu
def test_gpu_batched_values(gen):
    A = random_csr(19, 330, 0.3, gen, torch.float16, "cuda")
    values = torch.randn(3, A.nnz, generator=gen).to(torch.float16).cuda()
    A = A.with_values(values)
    for config in _configs(A).values():
        assert_bitwise(_launch(A, config, values=values), A.to_dense())


@pytest.mark.gpu
def test_gpu_unsorted_columns(gen):
    """One store an entry: the kernel does not rely on a row's columns being sorted."""
    A = random_csr(31, 640, 0.4, gen, torch.bfloat16)
    order = torch.argsort(A.pattern.row_indices() * 1000 + torch.rand(A.nnz, generator=gen) * 999)
    assert not torch.equal(order, torch.arange(A.nnz))
    columns, values = A.column_indices[order].cuda(), A.values[order].cuda()
    got = _launch(A.to(device="cuda"), _configs(A)["default"], values, columns)
    assert_bitwise(got, A.to_dense().cuda())


@pytest.mark.gpu
def test_gpu_bad_arguments_raise(gen):
    A = random_csr(4, 100, 0.3, gen, torch.bfloat16, "cuda")
    config = _configs(A)["default"]
    with pytest.raises(ValueError, match="row_span"):
        _launch(A, densify_tuning.DensifyCsrSharedConfig(1, 64, 512, 4))
    with pytest.raises(ValueError, match="shared memory"):
        _launch(A, densify_tuning.DensifyCsrSharedConfig(1024, 128, 512, 4))
    with pytest.raises(ValueError, match="power of two"):
        _launch(A, densify_tuning.DensifyCsrSharedConfig(3, 128, 512, 4))
    with pytest.raises(TypeError, match="2- or 4-byte"):
        _launch(A, config, values=A.values.double())


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [4096, 40000])
def test_gpu_dense_backend_takes_it_where_rows_fit(cols, gen, monkeypatch):
    """densify_csr on CUDA: through shared memory for rows up to 64 KB, the Triton densify past
    them; both bitwise."""
    from sparsekernels.kernels import densify_shared

    calls = []
    launch = densify_shared.densify_csr_shared
    monkeypatch.setattr(densify_shared, "densify_csr_shared", lambda **k: calls.append(1)
                        or launch(**k))  # fmt: skip
    A = random_csr(40, cols, 0.3, gen, torch.bfloat16, "cuda")
    got = dense_module.densify_csr(A.row_offsets, A.column_indices, A.values, cols)
    assert_bitwise(got, A.to_dense())
    assert len(calls) == (1 if cols == 4096 else 0)


def test_a_kernel_holding_more_than_its_buffer_is_refused():
    """The PTX stores address the buffer from the shared window's start: a compiled kernel with
    any other shared memory (a reduction's scratch) must not run them."""
    from types import SimpleNamespace

    from sparsekernels.kernels._gluon_bits import check_buffer_alone

    check_buffer_alone(SimpleNamespace(metadata=SimpleNamespace(shared=8192)), 8192, "ok")
    extra = SimpleNamespace(metadata=SimpleNamespace(shared=8224))
    with pytest.raises(RuntimeError, match="8224 bytes of shared memory, not its buffer's 8192"):
        check_buffer_alone(extra, 8192, "densify_csr_shared")
