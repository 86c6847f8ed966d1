"""The Triton densify kernels (dense backend): in the interpreter on CPU (small shapes) and
compiled on CUDA (gpu, at LLM sizes). Outputs start as NaN so an unwritten element shows;
densifying copies values, so every comparison is bitwise against the formats' torch to_dense."""

import pytest
import torch

import sparsekernels as sk
from _helpers import (
    ALL_DTYPES,
    KERNEL_DEVICES,
    randn,
    random_csr,
    random_nm,
    skip_interpreter_on_gpu_machine,
)
from sparsekernels.kernels import densify as kernel
from sparsekernels.kernels.densify_tuning import (
    DensifyCsrConfig,
    DensifyNmConfig,
    densify_csr_config,
    densify_nm_config,
)
from sparsekernels.ops import _dense as dense_module

_BITS = {8: torch.int64, 4: torch.int32, 2: torch.int16}


def assert_bitwise(got: torch.Tensor, want: torch.Tensor):
    """Equal bit for bit (the sign of zero included), NaN where want has NaN: torch's CPU
    scatter does not keep a bf16 NaN's payload, the kernels do."""
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    bits = _BITS[got.element_size()]
    same = got.contiguous().view(bits) == want.contiguous().view(bits)
    same |= torch.isnan(got) & torch.isnan(want)
    if not same.all():
        where = (~same).nonzero()[0].tolist()
        raise AssertionError(
            f"{int((~same).sum())} of {same.numel()} elements differ; first at {where}: "
            f"got {got[tuple(where)].item()}, want {want[tuple(where)].item()}"
        )


# ----------------------------------------------------------------------------- CSR
def _csr_launch(row_offsets, cols, values, shape, config, poison=True):
    batch = values.shape[0] if values.dim() == 2 else 1
    fill = float("nan") if poison and config.write_zeros else 0.0
    out = torch.full((batch, *shape), fill, dtype=values.dtype, device=values.device)
    kernel.densify_csr(
        row_offsets=row_offsets,
        column_indices=cols,
        values=values,
        out=out,
        write_zeros=config.write_zeros,
        block_rows=config.block_rows,
        block_k=config.block_k,
        block_nnz=config.block_nnz,
        num_warps=config.num_warps,
    )
    return out if values.dim() == 2 else out[0]


def _csr_configs(A):
    default = densify_csr_config(*A.shape, A.nnz)
    return {
        "default": default,
        "small-steps": DensifyCsrConfig(True, 2, 16, 16, 2),
        "prezeroed": DensifyCsrConfig(False, 1, 16, 32, 1),
    }


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("config_name", ["default", "small-steps", "prezeroed"])
@pytest.mark.parametrize(
    "shape,density",
    [((1, 1), 1.0), ((1, 37), 0.5), ((37, 100), 0.3), ((20, 300), 0.05), ((9, 40), 0.0)],
)
def test_csr_every_element_written(device, config_name, shape, density, gen):
    skip_interpreter_on_gpu_machine(device)
    A = random_csr(*shape, density, gen, torch.float32, device)  # every third row empty
    config = _csr_configs(A)[config_name]
    got = _csr_launch(A.row_offsets, A.column_indices, A.values, A.shape, config)
    assert_bitwise(got, A.to_dense())


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("index", [torch.int16, torch.int32, torch.int64])
def test_csr_column_index_types(device, index, gen):
    skip_interpreter_on_gpu_machine(device)
    A = random_csr(29, 70, 0.3, gen, torch.float32, device)
    for config in _csr_configs(A).values():
        got = _csr_launch(A.row_offsets, A.column_indices.to(index), A.values, A.shape, config)
        assert_bitwise(got, A.to_dense())


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_csr_dtypes_copy_bits(device, dtype, gen):
    """NaN, Inf and -0.0 among the stored values come out as stored."""
    skip_interpreter_on_gpu_machine(device)
    A = random_csr(23, 50, 0.4, gen, dtype, device)
    values = A.values.clone()
    values[:3] = torch.tensor([float("nan"), float("-inf"), -0.0], dtype=dtype)
    A = A.with_values(values)
    got = _csr_launch(
        A.row_offsets, A.column_indices, A.values, A.shape, _csr_configs(A)["default"]
    )
    assert_bitwise(got, A.to_dense())


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_csr_batched_values(device, gen):
    skip_interpreter_on_gpu_machine(device)
    A = random_csr(19, 33, 0.3, gen, torch.float16, device)
    A = A.with_values(randn(3, A.nnz, gen=gen, dtype=torch.float16, device=device))
    for config in _csr_configs(A).values():
        got = _csr_launch(A.row_offsets, A.column_indices, A.values, A.shape, config)
        assert_bitwise(got, A.to_dense())


def test_csr_unsorted_columns(gen):
    """CSRMatrix keeps columns sorted; the kernel does not rely on it (one store per entry)."""
    A = random_csr(31, 64, 0.4, gen, torch.float32)
    rows = A.pattern.row_indices()
    order = torch.argsort(rows * 1000 + torch.rand(A.nnz, generator=gen) * 999)  # shuffle rows
    assert not torch.equal(order, torch.arange(A.nnz))
    cols, values = A.column_indices[order], A.values[order]
    got = _csr_launch(A.row_offsets, cols, values, A.shape, _csr_configs(A)["small-steps"])
    assert_bitwise(got, A.to_dense())


# ----------------------------------------------------------------------------- N:M
# (n, m, vector, block): element-wise 2:4 / 2:8 / 1:8, vector-wise, block-wise (BW4x4),
# n and m not powers of two (3:32, 3:6 with blocks of 3), and 1:2 with v = 64.
PATTERNS = [
    (2, 4, 1, 1),
    (2, 8, 1, 1),
    (1, 8, 1, 1),
    (2, 8, 16, 1),
    (4, 8, 4, 4),
    (3, 32, 16, 1),
    (3, 6, 2, 3),
    (1, 2, 64, 1),
    (16, 32, 1, 1),  # many kept slots of a wide group: the default scatters
]


def _nm_launch(W, config, poison=True):
    fill = float("nan") if poison and (config.write_zeros or config.select) else 0.0
    out = torch.full(W.shape, fill, dtype=W.dtype, device=W.device)
    return kernel.densify_nm(
        values=W.values,
        indices=W.indices,
        out=out,
        n=W.n,
        m=W.m,
        vector=W.vector,
        block=W.block,
        write_zeros=config.write_zeros,
        select=config.select,
        block_m=config.block_m,
        block_k=config.block_k,
        block_s=config.block_s,
        program_cols=config.program_cols,
        num_warps=config.num_warps,
    )


def _nm_configs(W):
    """The default; scatter and select in small steps over programs of 2 groups (tiles that do
    not divide a program's columns when 2 * m is no multiple of 16); scatter into zeros."""
    return {
        "default": densify_nm_config(*W.shape, W.n, W.m),
        "scatter": DensifyNmConfig(False, True, 4, 16, 16, 2 * W.m, 2),
        "select": DensifyNmConfig(True, True, 2, 16, 16, 2 * W.m, 2),
        "prezeroed": DensifyNmConfig(False, False, 8, 16, 16, 3 * W.m, 1),
    }


def test_nm_config_scatters_many_kept_slots_of_wide_groups():
    """Select for power-of-two m, but m >= 32 keeping more than 4 slots (of `block` columns) a
    group scatters (the select form loads each kept slot in turn: ~121 us for 16:32 on 4096^2
    where scatter costs what 2:4's did, 32); other m scatter."""
    select = {
        pattern: densify_nm_config(4096, 4096, *pattern).select
        for pattern in [(2, 4), (1, 8), (8, 16), (4, 32), (8, 32), (16, 32), (3, 6)]
    }
    assert [p for p, s in select.items() if s] == [(2, 4), (1, 8), (8, 16), (4, 32)]
    assert densify_nm_config(4096, 4096, 64, 128, 64).select  # one kept block a group
    assert not densify_nm_config(4096, 4096, 64, 128, 8).select


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("config_name", ["default", "scatter", "select", "prezeroed"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_nm_every_element_written(device, config_name, pattern, gen):
    skip_interpreter_on_gpu_machine(device)
    n, m, vector, block = pattern
    rows = vector + vector // 2 + 1 if vector > 1 else 37  # a partial last row group
    W = random_nm(rows, 3 * m, n, m, gen, vector, block, torch.float32, device)
    assert_bitwise(_nm_launch(W, _nm_configs(W)[config_name]), W.to_dense())


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("select", [False, True])
def test_nm_dtypes_copy_bits(device, dtype, select, gen):
    skip_interpreter_on_gpu_machine(device)
    W = random_nm(13, 32, 2, 8, gen, 1, 1, dtype, device)
    values = W.values.clone()
    values[0, :3] = torch.tensor([float("nan"), float("inf"), -0.0], dtype=dtype)
    W = W.with_values(values)
    config = _nm_configs(W)["select" if select else "scatter"]
    assert_bitwise(_nm_launch(W, config), W.to_dense())


# ----------------------------------------------------------------------------- the op
def test_dense_backend_csr_unchanged_by_kernel(gen, monkeypatch):
    """The dense backend densifies with the kernels when told to, here in the interpreter."""
    A = random_csr(21, 40, 0.3, gen, torch.float32)
    batched = A.with_values(randn(2, A.nnz, gen=gen, dtype=torch.float32))
    B = randn(40, 6, gen=gen, dtype=torch.float32)
    bias = randn(21, gen=gen, dtype=torch.float32)
    cases = [(A, B), (batched, B), (A, B.expand(3, 40, 6))]
    want = [sk.spmm(a, b, bias, "relu", backend="dense") for a, b in cases]
    monkeypatch.setattr(dense_module, "triton_densifies", lambda values: True)
    for (a, b), w in zip(cases, want, strict=True):
        assert_bitwise(sk.spmm(a, b, bias, "relu", backend="dense"), w)


@pytest.mark.parametrize("pattern", [(2, 8, 1, 1), (4, 8, 4, 4)])
def test_dense_backend_nm_forward_backward_unchanged(pattern, gen, monkeypatch):
    """linear's forward (W @ x^T) and backward for x (W^T @ g) through the dense backend."""
    n, m, vector, block = pattern
    W = random_nm(12, 32, n, m, gen, vector, block, torch.float32)
    x = randn(5, 32, gen=gen, dtype=torch.float32)

    def run():
        xg = x.clone().requires_grad_()
        out = sk.linear(xg, W, backend="dense")
        out.backward(torch.ones_like(out))
        return out.detach(), xg.grad

    want = run()
    monkeypatch.setattr(dense_module, "triton_densifies", lambda values: True)
    for got, expected in zip(run(), want, strict=True):
        assert_bitwise(got, expected)


# ----------------------------------------------------------------------------- GPU, LLM sizes
def _random_csr(w, sparsity):
    """A random pattern: cheaper than magnitude pruning (a top-k) under compute-sanitizer."""
    return sk.CSRMatrix.from_dense(w, mask=torch.rand(w.shape, device=w.device) >= sparsity)


@pytest.mark.gpu
@pytest.mark.parametrize("sparsity", [0.5, 0.9])
def test_gpu_csr_llm_size(sparsity):
    torch.manual_seed(0)
    w = torch.randn(14336, 4096, device="cuda", dtype=torch.bfloat16)
    A = _random_csr(w, sparsity)
    want = A.to_dense()
    cols16 = A.pattern.column_indices_int16()
    for config in _csr_configs(A).values():
        got = _csr_launch(A.row_offsets, cols16, A.values, A.shape, config)
        assert_bitwise(got, want)
    assert_bitwise(dense_module.densify_csr(A.row_offsets, cols16, A.values, 4096), want)


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", [(2, 4, 1), (2, 8, 1), (1, 8, 64), (16, 32, 1), (8, 32, 8)])
def test_gpu_nm_llm_size(pattern):
    n, m, vector = pattern
    torch.manual_seed(0)
    w = torch.randn(14336, 4096, device="cuda", dtype=torch.bfloat16)
    W = sk.NMMatrix.from_dense(w, n, m, vector, mask=sk.prune.nm_mask(w.float(), n, m, vector))
    want = W.to_dense()
    for config in _nm_configs(W).values():
        assert_bitwise(_nm_launch(W, config), want)
    assert_bitwise(dense_module.densify_nm(W.values, W.indices, n, m, vector, 1), want)


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["csr", "2:8"])
def test_gpu_dense_backend_bitwise(fmt):
    """The op's output at 2048 tokens is cuBLAS on exactly the weight torch indexing gives."""
    torch.manual_seed(0)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    if fmt == "csr":
        W = _random_csr(w, 0.7)
    else:
        W = sk.NMMatrix.from_dense(w, 2, 8, mask=sk.prune.nm_mask(w.float(), 2, 8))
    x = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)
    got = sk.linear(x, W, backend="dense")
    want = torch.matmul(W.to_dense(), x.t()).t()
    assert_bitwise(got, want)
