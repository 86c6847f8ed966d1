"""torch.func's transforms are not supported yet, and say so by name at the op: torch itself
failed inside with messages about setup_context or about expanding sparse CSR tensors.
functional_call without a transform works."""

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

import sparsekernels as sk
from _helpers import randn
from sparsekernels.ops.depthwise import depthwise_conv2d


@pytest.mark.parametrize("kw", [dict(sparsity=0.5), dict(pattern="2:8")], ids=["csr", "nm"])
def test_transforms_are_refused_by_name(kw, gen):
    torch.manual_seed(0)
    layer = sk.nn.SparseLinear.from_dense(nn.Linear(16, 8).double(), **kw)
    params = {name: p.detach() for name, p in layer.named_parameters()}
    x = randn(4, 16, gen=gen)
    with pytest.raises(NotImplementedError, match="sparsekernels.linear does not support"):
        grad(lambda p: functional_call(layer, p, (x,)).sum())(params)
    with pytest.raises(NotImplementedError, match="torch.func transforms"):
        vmap(lambda row: functional_call(layer, params, (row,)))(x)
    out = functional_call(layer, params, (x,))  # (no transform: fine)
    assert torch.equal(out, layer(x))


def test_every_public_op_refuses_them(gen):
    A = sk.CSRMatrix.from_dense(torch.eye(4, dtype=torch.float64))
    x = randn(4, 4, gen=gen)
    q = randn(1, 1, 4, 2, gen=gen)
    w = randn(2, 1, 3, 3, gen=gen)
    calls = {
        "linear": lambda t: sk.linear(t, A),
        "spmm": lambda t: sk.spmm(A, t),
        "sddmm": lambda t: sk.sddmm(t, t, A).values,
        "sparse_softmax": lambda t: sk.sparse_softmax(A.with_values(t.diagonal())).values,
        "sparse_attention": lambda t: sk.sparse_attention(q * t.sum(), q, q, A),
        "depthwise_conv2d": lambda t: depthwise_conv2d(t.sum() * randn(1, 2, 4, 4, gen=gen), w),
    }
    for name, call in calls.items():
        with pytest.raises(NotImplementedError, match=f"sparsekernels.{name} does not support"):
            grad(lambda t, call=call: call(t).sum())(x)
