"""set_weight_copies: which copies of a CSR weight the routes keep beside it (the line walks'
layout and packed values, the scatter kernel's tiled copy), per layer; and the products the
other routes then give, against float64. Routes as on the GPU through the interpreter (the
line walks' size thresholds lowered), the scatter kernel's copy by its builder."""

import pytest
import torch
from torch import nn

import sparsekernels as sk
from _helpers import KERNEL_DEVICES, assert_close, randn, skip_interpreter_on_gpu_machine
from sparsekernels.ops import _csr_lines, _csr_scatter, _weight_copies


def _layer(device, gen) -> sk.nn.SparseLinear:
    torch.manual_seed(0)
    dense = nn.Linear(600, 40).to(device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        dense.weight.copy_(randn(40, 600, gen=gen, dtype=torch.bfloat16, device=device))
    layer = sk.nn.SparseLinear.from_dense(dense, sparsity=0.6)
    return layer.requires_grad_(False)


@pytest.fixture
def few_lines(monkeypatch):
    """The few-token line walk's launches, the walk taking this small weight."""
    from sparsekernels.kernels import csr_lines_tuning
    from sparsekernels.kernels import spmm_csr_few_lines as kernel
    from sparsekernels.ops import _launch_plans

    monkeypatch.setattr(_launch_plans, "ENABLED", False)  # each call through the route
    monkeypatch.setattr(csr_lines_tuning, "CSR_LINES_MIN_NNZ", 0)
    monkeypatch.setattr(csr_lines_tuning, "CSR_LINES_MIN_ROWS", 0)
    calls = []
    launch = kernel.spmm_csr_few_lines
    monkeypatch.setattr(kernel, "spmm_csr_few_lines", lambda **kw: calls.append(kw) or launch(**kw))
    return calls


def _check(layer, x):
    """The layer's product through the GPU's kernels (the interpreter on the CPU)."""
    W = layer.to_dense().double()
    want = x.double() @ W.t() + layer.bias.double()
    bound = x.double().abs() @ W.abs().t() + layer.bias.double().abs()
    got = sk.linear(x, layer.weight, layer.bias, backend="triton")
    assert_close(got, want, bound, torch.bfloat16)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_line_walks_keep_what_the_choice_allows(device, gen, few_lines):
    """ "all" packs the values into the line layout; "in_place" walks the lines reading the
    layer's own values (nothing packed but the few rest lines); "none" keeps no layout and
    the plain few-token walk runs; each gives the product."""
    skip_interpreter_on_gpu_machine(device)
    layer = _layer(device, gen)
    x = randn(3, 600, gen=gen, dtype=torch.bfloat16, device=device)
    _check(layer, x)
    assert len(few_lines) == 1 and not few_lines[0]["in_place"]
    assert few_lines[0]["values"] is not layer.values  # (the packed copy)
    packed = _csr_lines._PACKED.get(layer.values)[2]
    assert packed.numel() >= layer.values.numel()

    layer.set_weight_copies("in_place")
    assert _csr_lines._PACKED.get(layer.values) is None  # (dropped now)
    _check(layer, x)
    assert len(few_lines) == 2 and few_lines[1]["values"] is layer.values
    assert few_lines[1]["in_place"].in_place
    rest = _csr_lines._PACKED.get(layer.values)[2]
    assert rest.numel() < packed.numel() / 4

    layer.set_weight_copies("none")
    _check(layer, x)
    assert len(few_lines) == 2  # the plain walk ran
    assert _csr_lines._PACKED.get(layer.values) is None
    assert _csr_lines._LAYOUTS.get(layer.column_indices) is None

    layer.set_weight_copies("all")
    _check(layer, x)
    assert len(few_lines) == 3 and not few_lines[2]["in_place"]


def test_the_scatter_copy_only_where_allowed(gen, monkeypatch):
    """spmm prepares the scatter kernel's tiled copy for a weight it would take, unless the
    layer keeps no copies ("in_place" or "none"); its automatic choice then passes it by."""
    built = []
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)  # (CPU torch)
    monkeypatch.setattr(_csr_scatter, "_fits", lambda values, b, rows: True)
    monkeypatch.setattr(_csr_scatter, "_build", lambda *args: built.append(args) or ("o", "e"))
    layer = _layer("cpu", gen)
    x = randn(16, 600, gen=gen, dtype=torch.bfloat16)
    b = x.t()
    for choice, builds in (("none", 0), ("in_place", 0), ("all", 1)):
        layer.set_weight_copies(choice)
        _csr_scatter.prepare(layer.weight, b)
        assert len(built) == builds, choice
        ready = _csr_scatter.ready(layer.row_offsets, layer.column_indices, layer.values, b)
        assert ready == (choice == "all")


def test_the_choice_outlives_moves_loads_and_copies(gen):
    layer = _layer("cpu", gen)
    model = nn.Sequential(layer, nn.GELU(), nn.Linear(40, 8))
    sk.nn.set_weight_copies(model, "none")
    assert _weight_copies.chosen(layer.column_indices) == "none"
    model.float()  # (a move rebuilds the format)
    assert _weight_copies.chosen(layer.column_indices) == "none"
    layer.load_state_dict({k: v.clone() for k, v in layer.state_dict().items()})
    assert _weight_copies.chosen(layer.column_indices) == "none"
    import copy

    twin = copy.deepcopy(layer)
    assert twin.weight_copies == "none"
    assert _weight_copies.chosen(twin.column_indices) == "none"
    sk.nn.set_weight_copies(model, "all")
    assert _weight_copies.chosen(layer.column_indices) == "all"
    nm = sk.nn.SparseLinear.from_dense(nn.Linear(64, 32), pattern="2:4")
    nm.set_weight_copies("none")  # (N:M weights keep no such copies: accepted, no change)
    torch.testing.assert_close(nm(torch.ones(2, 64)), nm.to_linear()(torch.ones(2, 64)))


def test_bad_choices_are_named():
    layer = sk.nn.SparseLinear.from_dense(nn.Linear(8, 4), sparsity=0.5)
    with pytest.raises(ValueError, match=r"which must be one of \('all', 'in_place', 'none'\)"):
        layer.set_weight_copies("some")
    with pytest.raises(ValueError, match="which must be one of"):
        sk.nn.set_weight_copies(nn.Sequential(layer), "in-place")
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        sk.nn.set_weight_copies("model", "none")
    assert layer.weight_copies == "all"
