"""What the caches do with the tensors AOT autograd traces a backward with: FakeTensors (on
CUDA too, even on a CPU machine), where torch.compiler.is_compiling() is False. Reading their
storage raised, and failed the GPU test test_layers_compile_with_fullgraph_on_cuda."""

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from sparsekernels._cache_mode import traced, version
from sparsekernels.ops import _sddmm_plans


def test_fake_tensors_have_no_version_and_no_tile_fill():
    real = torch.tensor([0, 1, 1])
    assert not traced(real) and version(real) is not None
    with FakeTensorMode():
        row_offsets = torch.tensor([0, 2, 3], device="cuda")
        column_indices = torch.tensor([0, 1, 1], device="cuda")
        assert traced(column_indices)
        assert version(column_indices) is None  # nothing derived from it is kept
        # the fill estimate reads the pattern: 0 while traced, as under dynamo
        assert _sddmm_plans.tile_fill(row_offsets, column_indices, 4) == 0.0
