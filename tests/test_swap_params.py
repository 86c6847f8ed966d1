"""torch's swap path (torch.__future__.set_swap_module_params_on_conversion(True), used by
FSDP2- and DTensor-style code): `.to()` and load_state_dict swap each Parameter's contents in
place with torch.utils.swap_tensors, which refuses tensors with weak references, and the ops'
caches and the optimizer-step tracker held the values weakly."""

import pytest
import torch
from torch import nn

import sparsekernels as sk
from _helpers import randn


@pytest.fixture
def swap_mode():
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    yield
    torch.__future__.set_swap_module_params_on_conversion(before)


@pytest.mark.parametrize("kw", [dict(sparsity=0.5), dict(pattern="2:8")], ids=["csr", "nm"])
def test_to_and_load_swap_the_values_in_place(kw, swap_mode, gen):
    torch.manual_seed(0)
    layer = sk.nn.SparseLinear.from_dense(nn.Linear(32, 16), **kw)
    values = layer.values
    optimizer = torch.optim.AdamW(layer.parameters(), lr=0.1, fused=True)
    x = randn(5, 32, gen=gen, dtype=torch.float32)
    with torch.no_grad():
        layer(x)  # (the ops keep what they derive from the values: weak references)
    layer.to(torch.float64)
    assert layer.values is values and values.dtype == torch.float64  # (swapped, not replaced)
    layer.load_state_dict(layer.state_dict())
    assert layer.values is values
    x = x.double()
    layer(x).square().sum().backward()
    optimizer.step()  # (fused: bumps no version; the tracker must follow the swapped values)
    with torch.no_grad():
        got = layer(x)
    want = x @ layer.to_dense().t() + layer.bias
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
