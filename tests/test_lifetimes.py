"""What the layers and formats keep dies with them and is not pickled: no reference cycle
between a pattern and its transpose (freed only by a full garbage collection), no format
cache in torch.save or deepcopy (the values twice), no old values after a `.data` swap."""

import copy
import gc
import io
import pickle
import weakref

import torch
from torch import nn

import sparsekernels as sk
from _helpers import assert_bitwise_equal, randn
from sparsekernels.nn import SparseAttention, SparseLinear


def _trained_layer(gen, pattern=None, sparsity=None) -> SparseLinear:
    torch.manual_seed(0)
    layer = SparseLinear.from_dense(nn.Linear(256, 96).double(), sparsity, pattern=pattern)
    x = randn(5, 256, gen=gen).requires_grad_()
    layer(x).square().sum().backward()  # (dX: the weight's transpose is derived and kept)
    return layer


def _tensor_bytes(module: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in module.state_dict().values())


def test_a_trained_csr_layer_dies_without_a_garbage_collection(gen):
    layer = _trained_layer(gen, sparsity=0.5)
    pattern = layer.weight.pattern
    transposed = weakref.ref(pattern.transpose()[0])
    indices = weakref.ref(layer.column_indices)
    del pattern
    gc.disable()
    try:
        del layer
        assert indices() is None and transposed() is None
    finally:
        gc.enable()


def test_a_transpose_of_a_transpose_is_the_pattern_while_it_lives(gen):
    dense = randn(6, 9, gen=gen)
    A = sk.CSRMatrix.from_dense(dense * (dense > 0))
    T = A.t()
    assert T.t().pattern is A.pattern
    twin = T.pattern.transpose()[0]
    del A, twin
    gc.collect()
    again, perm = T.pattern.transpose()  # (its source gone: built anew, still right)
    dense = T.to_dense().t()
    assert torch.equal(again.column_indices.long(), dense.nonzero()[:, 1])
    assert torch.equal(T.values[perm], dense[dense != 0])


def test_pickles_and_copies_hold_the_weights_once(gen):
    for pattern, sparsity in ((None, 0.5), ("2:4", None)):
        layer = _trained_layer(gen, pattern, sparsity)
        model = nn.Sequential(layer)
        weights = _tensor_bytes(model)
        buffer = io.BytesIO()
        torch.save(model, buffer)
        assert buffer.tell() < 1.02 * weights + 8192, (buffer.tell(), weights)
        pickled = pickle.dumps(model)
        assert len(pickled) < 1.02 * weights + 8192, weights
        assert b"CSRMatrix" not in pickled and b"NMMatrix" not in pickled  # (made on load)
        buffer.seek(0)
        x = randn(3, 256, gen=gen)
        for twin in (torch.load(buffer, weights_only=False), copy.deepcopy(model)):
            assert twin[0]._format_cache is not None  # (built again, not carried)
            assert_bitwise_equal(twin(x), model(x))
            assert twin[0].weight.values is twin[0].values


def test_a_matrix_pickles_without_what_its_pattern_derived(gen):
    dense = randn(300, 200, gen=gen)
    A = sk.CSRMatrix.from_dense(dense * (dense > 0))
    A.t(), A.pattern.row_order(), A.pattern.row_indices()  # (each as large as the indices)
    stored = sum(t.numel() * t.element_size() for t in (A.values, A.row_offsets, A.column_indices))
    assert len(pickle.dumps(A)) < 1.02 * stored + 4096
    again = pickle.loads(pickle.dumps(A))
    assert torch.equal(again.t().to_dense(), dense.clamp_min(0).t())


def test_attention_pickles_without_its_derived_pattern(gen):
    attention = SparseAttention.local_strided(64, window=4, stride=8)
    q = randn(1, 2, 64, 8, gen=gen).requires_grad_()
    attention(q, q, q).sum().backward()
    held = _tensor_bytes(attention)
    assert len(pickle.dumps(attention)) < 1.2 * held + 8192
    twin = copy.deepcopy(attention)
    assert_bitwise_equal(twin(q, q, q), attention(q, q, q))


def _tensors_in(value, depth: int = 0):
    """Every tensor reachable from `value` through containers and objects' attributes."""
    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 6 and isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors_in(item, depth + 1)
    elif depth < 6 and isinstance(value, dict):
        for item in value.values():
            yield from _tensors_in(item, depth + 1)
    elif depth < 6 and hasattr(value, "__dict__") and not isinstance(value, type):
        yield from _tensors_in(vars(value), depth + 1)


def test_old_values_are_not_held_after_a_data_swap(gen):
    """torch.nn.utils.vector_to_parameters and offloading swap `.data`: what the layer keeps
    beside the Parameter (its format built from the buffers) held the old storage."""
    for pattern, sparsity in ((None, 0.5), ("2:8", None)):
        layer = _trained_layer(gen, pattern, sparsity)
        old = layer.values.untyped_storage().data_ptr()
        layer.values.data = torch.randn_like(layer.values)
        x = randn(3, 256, gen=gen)
        got = layer(x)
        kept = list(_tensors_in(layer._format_cache))
        assert kept and all(t.untyped_storage().data_ptr() != old for t in kept)
        assert torch.allclose(got, x @ layer.to_dense().t() + layer.bias)
