"""The tiled row-major copy used to lay out x^T for row gathers."""

import pytest
import torch

from _helpers import ALL_DTYPES, randn
from sparsekernels.kernels.transpose import row_major_copy


@pytest.mark.parametrize(
    "device",
    [pytest.param("cpu", id="interpreter"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)],
)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (70, 3), (130, 65)])
def test_copy_of_transposed_view(device, dtype, shape, gen):
    if device == "cpu" and torch.cuda.is_available():
        pytest.skip("the interpreter runs only on machines without CUDA")
    src = randn(shape[1], shape[0], gen=gen, dtype=dtype, device=device).t()
    out = row_major_copy(src=src)
    assert out.is_contiguous() and torch.equal(out, src)


@pytest.mark.parametrize(
    "device",
    [pytest.param("cpu", id="interpreter"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)],
)
def test_copy_padded_to_a_wider_row(device, gen):
    if device == "cpu" and torch.cuda.is_available():
        pytest.skip("the interpreter runs only on machines without CUDA")
    src = randn(12, 70, gen=gen, device=device).t()  # (70, 12)
    poison = src.new_full((70, 80), float("nan"))  # the allocator hands this block out again
    del poison
    out = row_major_copy(src=src, width=80)
    assert out.shape == (70, 80) and out.is_contiguous()
    assert torch.equal(out[:, :12], src) and not out[:, 12:].any()
    with pytest.raises(ValueError, match="width"):
        row_major_copy(src=src, width=11)
