"""torch.fx.symbolic_trace keeps each sparse layer as one call_module node, as it does nn.Linear,
and the traced model computes what the model does, in the forward and the backward."""

import io

import torch
from torch import fx, nn

import sparsekernels as sk
from _helpers import assert_bitwise_equal, randn
from sparsekernels.nn import DepthwiseConv2d, SparseAttention, SparseConv2d, SparseLinear

torch.manual_seed(0)  # (the layers' initial weights)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _called_modules(graph_module: fx.GraphModule) -> dict[str, type]:
    return {
        node.target: type(graph_module.get_submodule(node.target))
        for node in graph_module.graph.nodes
        if node.op == "call_module"
    }


def _traced_matches(model: nn.Module, *inputs: torch.Tensor) -> fx.GraphModule:
    traced = fx.symbolic_trace(model)
    assert_bitwise_equal(traced(*inputs), model(*inputs))
    leaves = [p for p in model.parameters() if p.requires_grad]
    expected = torch.autograd.grad(model(*inputs).square().sum(), leaves)
    got = torch.autograd.grad(traced(*inputs).square().sum(), leaves)  # (the same parameters)
    for e, g in zip(expected, got, strict=True):
        assert_bitwise_equal(g, e)
    return traced


def test_sparsified_mlp_traces_with_its_layers_whole():
    model = nn.Sequential(nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 64), nn.Linear(64, 16))
    model.double()
    sk.sparsify_(model, "2:4", filter_fn=lambda module, fqn: fqn == "2")
    sk.sparsify_(model, 0.7)
    traced = _traced_matches(model, randn(5, 64, gen=_gen(1)))
    assert _called_modules(traced) == {
        "0": SparseLinear,
        "1": nn.ReLU,
        "2": SparseLinear,
        "3": SparseLinear,
    }
    assert traced.get_submodule("2").format == "nm" and traced.get_submodule("0").format == "csr"


def test_traced_convolutions_and_functions_around_them():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
            self.depthwise = DepthwiseConv2d.from_conv(depthwise, activation="relu")
            self.pointwise = SparseConv2d.from_dense(nn.Conv2d(8, 12, 1), sparsity=0.75)

        def forward(self, x):
            return self.pointwise(self.depthwise(x)).flatten(1).softmax(-1)

    model = Block().double()
    traced = _traced_matches(model, randn(2, 8, 5, 7, gen=_gen(2)))
    assert _called_modules(traced) == {"depthwise": DepthwiseConv2d, "pointwise": SparseConv2d}
    functions = [n.target for n in traced.graph.nodes if n.op == "call_method"]
    assert functions == ["flatten", "softmax"]  # (traced through, as before)


def test_traced_attention_with_several_inputs():
    class Attend(nn.Module):
        def __init__(self):
            super().__init__()
            self.project = nn.Linear(16, 48)
            self.attention = SparseAttention.local_strided(11, window=3, stride=4)

        def forward(self, x):
            q, k, v = self.project(x).unflatten(-1, (3, 2, 8)).permute(2, 0, 3, 1, 4).unbind(0)
            return self.attention(q, k, v)

    model = Attend().double()
    traced = _traced_matches(model, randn(2, 11, 16, gen=_gen(3)))
    assert _called_modules(traced)["attention"] is SparseAttention
    node = next(n for n in traced.graph.nodes if n.target == "attention")
    assert len(node.args) == 3 and not node.kwargs


def test_traced_model_saves_and_loads_like_the_model():
    model = nn.Sequential(nn.Linear(32, 24), nn.GELU(), nn.Linear(24, 8))
    sk.sparsify_(model, "2:8")
    traced = fx.symbolic_trace(model)
    assert traced.state_dict().keys() == model.state_dict().keys()
    buffer = io.BytesIO()
    torch.save(traced.state_dict(), buffer)
    other = nn.Sequential(nn.Linear(32, 24), nn.GELU(), nn.Linear(24, 8))
    sk.sparsify_(other, "2:8")
    other = fx.symbolic_trace(other)
    buffer.seek(0)
    other.load_state_dict(torch.load(buffer))
    x = randn(3, 32, gen=_gen(4), dtype=torch.float32)
    assert_bitwise_equal(other(x), model(x))


def test_a_layer_called_outside_a_trace_still_checks_its_input():
    layer = SparseLinear.from_dense(nn.Linear(8, 4), sparsity=0.5)
    try:
        layer([1.0] * 8)
    except TypeError as error:
        assert "x must be a torch.Tensor" in str(error)
    else:
        raise AssertionError("a list was accepted")
