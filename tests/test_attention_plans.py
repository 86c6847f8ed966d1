"""sparse_attention_packed's eager plans (ops/_attention_plans.py): a repeat call on the fused
kernel skips the checks and lookups, with the whole path's bits (fresh qkv each call, with and
without a gradient); anything that could change the outcome of the checks takes the whole
path again."""

import importlib

import pytest
import torch

import sparsekernels as sk
from _attention_cases import mask_of, pattern_of
from _helpers import count_calls, dense_attention, randn, twin_weight

packed_module = importlib.import_module("sparsekernels.ops.attention_packed")


@pytest.fixture
def attention_whole_path_calls(monkeypatch):
    """How many calls took the whole path (its checks) since the fixture was made."""
    return count_calls(monkeypatch, packed_module, "checked_backend")


def _call(qkv, pattern, scale=None, backend="triton_flash"):
    return sk.sparse_attention_packed(qkv, pattern, scale, backend=backend)


@pytest.mark.parametrize("gradient", [False, True])
def test_repeat_calls_take_the_plan_with_the_whole_paths_bits(
    gradient, gen, attention_whole_path_calls
):
    """Two components (local + strided), L not a multiple of the tiles; three calls of fresh
    qkv and output gradients against a fresh pattern's whole path, bit for bit."""
    keep = mask_of("local_strided", 150, 150, gen)
    pattern = pattern_of(keep)
    for _ in range(3):
        qkv = randn(1, 150, 3, 2, 16, gen=gen, dtype=torch.float32).requires_grad_(gradient)
        twin_qkv = qkv.detach().clone().requires_grad_(gradient)
        got, want = _call(qkv, pattern), _call(twin_qkv, twin_weight(pattern))
        assert torch.equal(got, want)
        if gradient:
            g = randn(*got.shape, gen=gen, dtype=torch.float32)
            got.backward(g)
            want.backward(g)
            assert torch.equal(qkv.grad, twin_qkv.grad)
    assert len(attention_whole_path_calls) == 1 + 3  # the pattern's first call; every twin's


def test_the_planned_product_matches_float64(gen, attention_whole_path_calls):
    keep = mask_of("causal", 40, 40, gen)
    pattern = pattern_of(keep)
    for _ in range(2):
        qkv = randn(2, 40, 3, 1, 8, gen=gen)
        got = _call(qkv.float(), pattern, 0.3)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        torch.testing.assert_close(got.double(), dense_attention(q, k, v, keep, 0.3),
                                   rtol=1e-4, atol=1e-5)  # fmt: skip
    assert len(attention_whole_path_calls) == 1


def test_signature_changes_take_the_whole_path(gen, attention_whole_path_calls):
    """Another shape, strides, dtype, scale or gradient wish is a new signature."""
    pattern = pattern_of(mask_of("random", 40, 40, gen))
    qkv = randn(1, 40, 3, 2, 8, gen=gen, dtype=torch.float32)
    strided = randn(1, 40, 3, 2, 16, gen=gen, dtype=torch.float32)[..., :8]
    calls = [
        lambda: _call(qkv, pattern),
        lambda: _call(qkv[:, :, :, :1], pattern),
        lambda: _call(strided, pattern),
        lambda: _call(qkv.half(), pattern),
        lambda: _call(qkv, pattern, 0.5),
        lambda: _call(qkv.clone().requires_grad_(), pattern),
    ]
    for i, call in enumerate(calls):
        first = call()
        assert len(attention_whole_path_calls) == i + 1
        assert torch.equal(call(), first)  # the same signature again: planned
        assert len(attention_whole_path_calls) == i + 1


def test_a_pattern_edited_in_place_takes_the_whole_path(gen, attention_whole_path_calls):
    """Row i keeps keys 0 .. i // 2; row 1's one key moved from 0 to 1 in place."""
    rows = torch.arange(32)
    keep = rows[None, :] <= rows[:, None] // 2
    pattern = pattern_of(keep)
    qkv = randn(1, 32, 3, 1, 8, gen=gen, dtype=torch.float32)
    _call(qkv, pattern)
    _call(qkv, pattern)
    assert len(attention_whole_path_calls) == 1
    with torch.no_grad():
        pattern.column_indices[1] = 1  # (row 0's one entry, then row 1's)
    got = _call(qkv, pattern)
    assert len(attention_whole_path_calls) == 2
    keep[1] = False
    keep[1, 1] = True
    q, k, v = (qkv.double()[:, :, i].transpose(1, 2) for i in range(3))
    torch.testing.assert_close(got.double(), dense_attention(q, k, v, keep, 8**-0.5),
                               rtol=1e-4, atol=1e-5)  # fmt: skip


def test_bad_input_is_still_refused_after_a_plan(gen):
    pattern = pattern_of(mask_of("causal", 16, 16, gen))
    qkv = randn(1, 16, 3, 1, 8, gen=gen, dtype=torch.float32)
    _call(qkv, pattern)
    _call(qkv, pattern)
    with pytest.raises(ValueError, match="pattern must have shape"):
        _call(randn(1, 17, 3, 1, 8, gen=gen, dtype=torch.float32), pattern)
    with pytest.raises(ValueError, match="scale"):
        _call(qkv, pattern, float("nan"))
    with pytest.raises(ValueError, match="backend"):
        _call(qkv, pattern, backend="nonsense")
    with pytest.raises(TypeError, match="qkv must be a torch.Tensor"):
        _call(qkv.tolist(), pattern)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_on_the_gpu_repeat_calls_give_the_whole_paths_bits(dtype, attention_whole_path_calls):
    """The automatic choice (the fused kernel) on the Sparse Transformer's local + strided
    pattern, L = 1000, with and without a gradient: planned calls against a fresh pattern's."""
    layer = sk.nn.SparseAttention.local_strided(1000, window=64, stride=64, causal=True,
                                                device="cuda")  # fmt: skip
    pattern = layer.pattern
    torch.manual_seed(0)
    for gradient in (False, True, False, True):
        qkv = torch.randn(2, 1000, 3, 4, 64, device="cuda", dtype=dtype, requires_grad=gradient)
        twin_qkv = qkv.detach().clone().requires_grad_(gradient)
        got = _call(qkv, pattern, backend=None)
        want = _call(twin_qkv, twin_weight(pattern), backend=None)
        assert torch.equal(got, want)
        if gradient:
            g = torch.randn_like(got)
            got.backward(g)
            want.backward(g)
            assert torch.equal(qkv.grad, twin_qkv.grad)
    assert len(attention_whole_path_calls) == 2 + 4


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1000, 4), (2, 8192, 8)], ids=["one-chunk", "two-chunks"])
def test_replayed_forwards_give_the_whole_paths_bits(shape, monkeypatch):
    """LAUNCH_PLANS on: no-grad calls of fresh qkv (at call 4 two bytes off, which a replay
    must leave to the kernels' launch) replay the recorded launches, bit for bit against a
    fresh pattern's whole path; at B = 2, L = 8192 the forward runs in two chunks of heads,
    each with its fp32 scratch. Every output stays its own."""
    from sparsekernels.ops import _attention_plans, _launch_plans

    monkeypatch.setattr(_attention_plans, "LAUNCH_PLANS", True)
    monkeypatch.setattr(_launch_plans, "ENABLED", True)
    batch, length, heads = shape
    layer = sk.nn.SparseAttention.local_strided(length, window=128, stride=128, causal=True,
                                                device="cuda")  # fmt: skip
    pattern, twin = layer.pattern, None
    torch.manual_seed(0)
    before, kept = _launch_plans.stats["replayed"], []
    with torch.no_grad():
        for call in range(6):
            size = batch * length * 3 * heads * 64
            flat = torch.randn(size + 8, device="cuda", dtype=torch.bfloat16)
            start = 8 * (call % 2) + (1 if call == 4 else 0)
            qkv = flat[start : start + size].view(batch, length, 3, heads, 64)
            got = _call(qkv, pattern, backend=None)
            twin = twin_weight(pattern)
            assert torch.equal(got, _call(qkv, twin, backend=None)), call
            kept.append((got, got.clone()))
    for got, copy in kept:
        assert torch.equal(got, copy)
    assert _launch_plans.stats["replayed"] - before >= 3, _launch_plans.stats


def test_launch_plans_on_record_nothing_off_cuda(gen, monkeypatch, attention_whole_path_calls):
    """With LAUNCH_PLANS on, a CPU call (the interpreter) is planned and records no launches."""
    from sparsekernels.ops import _attention_plans, _launch_plans

    monkeypatch.setattr(_attention_plans, "LAUNCH_PLANS", True)
    monkeypatch.setattr(_launch_plans, "ENABLED", True)
    pattern = pattern_of(mask_of("causal", 24, 24, gen))
    for _ in range(3):
        qkv = randn(1, 24, 3, 1, 8, gen=gen, dtype=torch.float32)
        assert torch.equal(_call(qkv, pattern), _call(qkv, twin_weight(pattern)))
    (plan,) = pattern.pattern._cached("attention plans", dict).values()
    assert plan.launches == {}
    assert len(attention_whole_path_calls) == 1 + 3


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1000, 4), (2, 8192, 8)], ids=["one-chunk", "two-chunks"])
def test_replayed_training_calls_give_the_whole_paths_bits(shape, monkeypatch):
    """_launch_plans.TRAINING on: calls recording a gradient replay the forward's launches
    (the output and the LSE) and the backward's (qkv's gradient), their fp32 scratch allocated
    by each replay: outputs and gradients bit for bit against a fresh pattern's whole path,
    fresh qkv and output gradients each call, at call 4 qkv two bytes off (which a replay must
    leave to the kernels' launch), at call 3 a gradient in other strides (the backward's inputs
    are checked whole). Every output and gradient stays its own."""
    from sparsekernels.ops import _launch_plans

    monkeypatch.setattr(_launch_plans, "TRAINING", True)
    monkeypatch.setattr(_launch_plans, "ENABLED", True)
    batch, length, heads = shape
    layer = sk.nn.SparseAttention.local_strided(length, window=128, stride=128, causal=True,
                                                device="cuda")  # fmt: skip
    pattern = layer.pattern
    torch.manual_seed(0)
    before, kept = _launch_plans.stats["replayed"], []
    for call in range(6):
        size = batch * length * 3 * heads * 64
        flat = torch.randn(size + 8, device="cuda", dtype=torch.bfloat16)
        start = 8 * (call % 2) + (1 if call == 4 else 0)
        qkv = flat[start : start + size].view(batch, length, 3, heads, 64).requires_grad_()
        twin_qkv = qkv.detach().clone().requires_grad_()
        got = _call(qkv, pattern, backend=None)
        want = _call(twin_qkv, twin_weight(pattern), backend=None)
        assert torch.equal(got, want), call
        g = torch.randn_like(got) if call != 3 else torch.randn(got.shape, device="cuda").bfloat16()
        got.backward(g)
        want.backward(g)
        assert torch.equal(qkv.grad, twin_qkv.grad), call
        kept.append((got, got.clone(), qkv.grad, qkv.grad.clone()))
    for got, got_copy, grad, grad_copy in kept:
        assert torch.equal(got, got_copy) and torch.equal(grad, grad_copy)
    # forwards replayed at calls 2, 3, 5; backwards at 2 and 5 (3: other strides; 4: misaligned)
    assert _launch_plans.stats["replayed"] - before >= 5, _launch_plans.stats


def test_training_launch_plans_on_record_nothing_off_cuda(gen, monkeypatch):
    """With TRAINING on, CPU calls recording a gradient are planned and record no launches:
    the whole path's bits, forward and backward."""
    from sparsekernels.ops import _launch_plans

    monkeypatch.setattr(_launch_plans, "TRAINING", True)
    monkeypatch.setattr(_launch_plans, "ENABLED", True)
    pattern = pattern_of(mask_of("local_strided", 40, 40, gen))
    for _ in range(3):
        qkv = randn(1, 40, 3, 2, 8, gen=gen, dtype=torch.float32).requires_grad_()
        twin_qkv = qkv.detach().clone().requires_grad_()
        got, want = _call(qkv, pattern), _call(twin_qkv, twin_weight(pattern))
        assert torch.equal(got, want)
        g = randn(*got.shape, gen=gen, dtype=torch.float32)
        got.backward(g)
        want.backward(g)
        assert torch.equal(qkv.grad, twin_qkv.grad)
    (plan,) = pattern.pattern._cached("attention plans", dict).values()
    assert plan.training == {"forward": {}, "backward": {}}
