"""What a model holds for its weights (bench/held.py), and the e2e rows that report it."""

import copy

import torch

from sparsekernels.bench import harness
from sparsekernels.bench.e2e import llama_case
from sparsekernels.bench.held import held_bytes
from sparsekernels.bench.providers import providers_for
from sparsekernels.models.llama import LlamaConfig
from sparsekernels.ops import _csr_lines
from sparsekernels.prune import sparsify_

CPU = torch.device("cpu")


def test_the_weights_and_what_the_routes_keep_for_them_are_counted():
    """Parameters and buffers count, each storage once; a plain attribute (a KV cache) does
    not; what an ops cache keeps for one of the weight's tensors does, and what it keeps for
    another tensor does not."""
    torch.manual_seed(0)
    dense = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Linear(32, 16))
    assert held_bytes(dense) == sum(p.numel() * 4 for p in dense.parameters())
    model = copy.deepcopy(dense)
    sparsify_(model, "50%")
    own = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
           for t in (*model.parameters(), *model.buffers())}  # fmt: skip
    base = held_bytes(model)
    assert base >= sum(own.values())
    model.kv = torch.zeros(1000)  # (an attribute, not a buffer)
    assert held_bytes(model) == base
    layer, other = model[0], torch.zeros(3, dtype=torch.int16)
    kept, ignored = torch.zeros(500), torch.zeros(700)
    _csr_lines._LAYOUTS[layer.column_indices] = ((), kept)  # as a route keeps a layout
    _csr_lines._LAYOUTS[other] = ((), ignored)
    try:
        assert held_bytes(model) == base + kept.nbytes
    finally:
        for key in (layer.column_indices, other):
            del _csr_lines._LAYOUTS._entries[id(key)]


def test_e2e_rows_report_the_weights_held():
    """A Llama-shaped stack at 2:8 holds fewer bytes for its weights than the dense one, and
    the row says so beside its throughput."""
    cfg = LlamaConfig(hidden=64, intermediate=224, heads=4, kv_heads=2, layers=2)
    case = llama_case(cfg, 1, "2:8", torch.float32, CPU, prompt=4, steps=2)
    timer = harness.Timer(CPU, warmup_ms=1, rep_ms=2)
    rows = {r.provider: r for r in harness.run_case(case, providers_for(case), timer)}
    sparse, dense = rows["sk_model"], rows["dense"]
    assert sparse.status == dense.status == "ok"
    assert 0 < sparse.held_mb < 0.7 * dense.held_mb
    assert harness.Row.from_dict(sparse.to_dict()).held_mb == sparse.held_mb


def test_a_training_step_keeps_four_bytes_an_entry_for_the_backward():
    """After a forward and backward, a CSR layer keeps its transpose's columns (2 bytes an
    entry), the permutation to its order (int32) and the weight gradient's flat positions
    (int64 on the CPU, int32 on CUDA), and nothing else per entry: no int64 row indices and
    no inverse permutation (they were 24 bytes an entry more, 7.2 bytes a dense element at
    70%)."""
    from sparsekernels.nn import SparseLinear
    from sparsekernels.ops import _dense

    torch.manual_seed(0)
    layer = SparseLinear.from_dense(torch.nn.Linear(256, 128), sparsity=0.7)
    nnz = layer.values.numel()
    built = held_bytes(layer)
    x = torch.randn(8, 256, requires_grad=True)
    layer(x).square().sum().backward()
    assert layer.values.grad is not None and x.grad is not None
    pattern = layer.weight.pattern
    transposed, perm = pattern.transpose()
    assert perm.dtype == torch.int32 and transposed.column_indices.dtype == torch.int16
    assert _dense._FLAT.get(layer.column_indices)[2].dtype == torch.int64
    assert "row_indices" not in pattern._cache
    workspace = 4 * nnz  # (the CPU kernels' column workspace, ops/_cpu_columns.py)
    assert held_bytes(layer) - built <= (2 + 4 + 8) * nnz + workspace + 4096
    # the way back still works (made when asked for): A^T^T is A, values in A's order
    source, back = transposed.transpose()
    assert source is pattern and torch.equal(perm.long()[back.long()], torch.arange(nnz))
