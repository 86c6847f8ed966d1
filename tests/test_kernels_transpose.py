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
