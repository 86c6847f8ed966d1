"""A SparseAttention's repeat call on packed qkv runs its plan straight from the layer
(nn/_repeat_calls.py, ops/_attention_plans.replayer). On the CPU, with the fused kernel forced
(the interpreter) and stand-ins for the launch plans whose replays give what the recorded call
gave (frozen): a replay where the pattern, qkv's signature, the scale or the gradient wish
changed would show as a wrong answer. On the GPU: the layer's bits against a fresh pattern's
whole path, without and with a gradient."""

import copy
import importlib

import pytest
import torch

import sparsekernels as sk
from _helpers import count_calls, dense_attention, randn, twin_weight
from sparsekernels.nn import _repeat_calls
from sparsekernels.ops import _dispatch, _launch_plans

packed_module = importlib.import_module("sparsekernels.ops.attention_packed")


class _Frozen:
    """A launch plan stand-in: replays return a copy of what the recorded call returned."""

    def __init__(self, out: torch.Tensor, state: tuple):
        self.out, self.state, self.replays = out.clone(), state, 0

    def replay_call(self, inputs, state, stream=None):
        if state != self.state:
            return None
        self.replays += 1
        return self.out.clone()


@pytest.fixture
def stand_ins(monkeypatch):
    """The fused kernel forced, inference launch plans recorded on the CPU as stand-ins (the
    training ones off): a list that collects the stand-ins made."""
    made = []

    def record_call(call, inputs, state, check_inputs=False):
        out = call()
        made.append(_Frozen(out, state))
        return out, made[-1]

    first_fitting = _dispatch._first_fitting

    def first(op, problem):
        return "triton_flash" if op == "sparse_attention" else first_fitting(op, problem)

    monkeypatch.setattr(_dispatch, "_first_fitting", first)
    monkeypatch.setattr(_repeat_calls, "on_cuda", lambda x: True)
    monkeypatch.setattr(_launch_plans, "stream_of", lambda x: (5, 0))
    monkeypatch.setattr(_launch_plans, "can_record", lambda x: True)
    monkeypatch.setattr(_launch_plans, "record_call", record_call)
    monkeypatch.setattr(_launch_plans, "TRAINING", False)
    return made


@pytest.fixture
def whole_path_calls(monkeypatch):
    return count_calls(monkeypatch, packed_module, "checked_backend")


def _replays(made) -> int:
    return sum(s.replays for s in made)


def _runs(layer) -> list:
    """What the layer runs again, one a call signature it keeps (nn/_repeat_calls.py)."""
    return [run for _, run, _ in layer._replays.values()]


def _keep(layer) -> torch.Tensor:
    offsets, columns = layer.row_offsets.long(), layer.column_indices.long()
    rows = torch.repeat_interleave(torch.arange(len(offsets) - 1), offsets.diff())
    keep = torch.zeros(layer.shape, dtype=torch.bool)
    keep[rows, columns] = True
    return keep


def _check(layer, qkv) -> torch.Tensor:
    got = layer(qkv)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    scale = layer.scale if layer.scale is not None else q.shape[-1] ** -0.5
    want = dense_attention(q, k, v, _keep(layer), scale)
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)
    return got


def _layer(length: int = 40):
    return sk.nn.SparseAttention.local_strided(length, window=8, stride=8, causal=True)


def _warm(layer, qkv, made) -> None:
    """Three calls: the whole path (its plan), the plan's call (its launches), then a replay."""
    with torch.no_grad():
        for _ in range(3):
            _check(layer, qkv)
    assert _runs(layer) and _replays(made) == 1


def test_repeat_calls_replay_from_the_layer(gen, stand_ins, whole_path_calls):
    layer = _layer()
    qkv = randn(1, 40, 3, 2, 8, gen=gen, dtype=torch.float32)
    _warm(layer, qkv, stand_ins)
    with torch.no_grad():
        first = layer(qkv)
        # another qkv of the same signature: the frozen replay gives the first one's output
        assert torch.equal(layer(randn(1, 40, 3, 2, 8, gen=gen, dtype=torch.float32)), first)
    assert _replays(stand_ins) == 3 and len(whole_path_calls) == 1


def _pattern_in_place(layer):
    """Row 30's first strided key (column 6) moved to column 7, in the buffers themselves."""
    with torch.no_grad():
        start = int(layer.row_offsets[30])
        assert int(layer.column_indices[start]) == 6
        layer.column_indices[start] = 7


def _new_scale(layer):
    layer.scale = 0.2


def _numpy_scale(layer):
    import numpy as np

    layer.scale = np.float32(0.25)  # (not a Python float: the op checks it each call)


def _released(layer):
    layer.release_caches()


CHANGES = {
    "pattern in place": _pattern_in_place,
    "scale": _new_scale,
    "numpy scale": _numpy_scale,
    "release_caches": _released,
}


@pytest.mark.parametrize("change", list(CHANGES.values()), ids=list(CHANGES))
def test_a_change_to_the_layer_ends_the_replay(change, gen, stand_ins):
    layer = _layer()
    qkv = randn(1, 40, 3, 2, 8, gen=gen, dtype=torch.float32)
    _warm(layer, qkv, stand_ins)
    change(layer)
    with torch.no_grad():
        _check(layer, qkv)  # (a stale replay would give the old layer's answer)
        assert _replays(stand_ins) == 1
        for _ in range(3):  # the changed layer records its own and replays it
            _check(layer, qkv)
    if change is _numpy_scale:  # (neither the op's plans nor the layer's take such a scale)
        assert _replays(stand_ins) == 1
    else:
        assert _replays(stand_ins) > 1


@pytest.mark.parametrize(
    "other",
    [lambda x: x[:, :, :, :1], lambda x: x.double(), lambda x: x.repeat(2, 1, 1, 1, 1)],
    ids=["heads", "dtype", "batch"],
)
def test_another_qkv_takes_the_whole_path(other, gen, stand_ins):
    layer = _layer()
    qkv = randn(1, 40, 3, 2, 8, gen=gen, dtype=torch.float32)
    _warm(layer, qkv, stand_ins)
    with torch.no_grad():
        _check(layer, other(randn(1, 40, 3, 2, 8, gen=gen, dtype=torch.float32)))
    assert _replays(stand_ins) == 1


def test_training_calls_take_the_layers_path(gen, stand_ins, whole_path_calls):
    """Calls recording a gradient: after the first, the fused kernel's autograd twin with the
    plan, straight from the layer (no whole path); output and qkv's gradient against float64;
    inference calls between them take theirs."""
    layer = _layer()
    keep = _keep(layer)
    fixed = randn(1, 40, 3, 2, 8, gen=gen, dtype=torch.float32)  # (the frozen replays' input)
    for _ in range(4):
        qkv = randn(1, 40, 3, 2, 8, gen=gen, dtype=torch.float32).requires_grad_(True)
        got = layer(qkv)
        g = randn(*got.shape, gen=gen, dtype=torch.float32)
        got.backward(g)
        exact_qkv = qkv.detach().double().requires_grad_(True)
        q, k, v = (exact_qkv[:, :, i].transpose(1, 2) for i in range(3))
        want = dense_attention(q, k, v, keep, 8**-0.5)
        want.backward(g.double())
        torch.testing.assert_close(got.double(), want.detach(), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(qkv.grad.double(), exact_qkv.grad, rtol=1e-4, atol=1e-5)
        with torch.no_grad():
            _check(layer, fixed)
    # the training signature's first call and the inference one's: the rest from the layer
    assert len(whole_path_calls) == 2


def test_copies_drop_the_replay(gen, stand_ins):
    layer = _layer()
    qkv = randn(1, 40, 3, 2, 8, gen=gen, dtype=torch.float32)
    _warm(layer, qkv, stand_ins)
    twin = copy.deepcopy(layer)
    assert not _runs(twin)
    with torch.no_grad():
        _check(twin, qkv)


def test_off_cuda_nothing_is_kept(gen):
    layer = _layer()
    qkv = randn(1, 40, 3, 2, 8, gen=gen, dtype=torch.float32)
    with torch.no_grad():
        for _ in range(3):
            _check(layer, qkv)
    assert not _runs(layer)


# ----------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1000, 4), (2, 8192, 8)], ids=["one-chunk", "two-chunks"])
@pytest.mark.parametrize("gradient", [False, True])
def test_layer_calls_give_the_whole_paths_bits(shape, gradient, replays_on):
    """Fresh qkv (and output gradients) each call against a fresh pattern's whole path, bit for
    bit; the replays counted (inference: the forward's launches; training: the forward's and
    the backward's)."""
    batch, length, heads = shape
    layer = sk.nn.SparseAttention.local_strided(length, window=128, stride=128, causal=True,
                                                device="cuda")  # fmt: skip
    torch.manual_seed(0)
    before = _launch_plans.stats["replayed"]
    with torch.set_grad_enabled(gradient):
        for call in range(5):
            qkv = torch.randn(batch, length, 3, heads, 64, device="cuda", dtype=torch.bfloat16)
            twin_qkv = qkv.clone().requires_grad_(gradient)
            qkv.requires_grad_(gradient)
            got = layer(qkv)
            want = sk.sparse_attention_packed(twin_qkv, twin_weight(layer.pattern))
            assert torch.equal(got, want), call
            if gradient:
                g = torch.randn_like(got)
                got.backward(g)
                want.backward(g)
                assert torch.equal(qkv.grad, twin_qkv.grad), call
    assert any(callable(run) for run in _runs(layer))
    assert _launch_plans.stats["replayed"] - before >= 3, _launch_plans.stats
