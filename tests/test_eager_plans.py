"""linear's eager plans (ops/_eager_plans.py): a repeat call without a gradient runs the backend
its signature chose, with the same product; anything that could change the choice or the
checks' outcome takes the whole path again."""

import gc
import weakref

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, randn, random_csr, random_nm, spmm_bound, twin_weight
from sparsekernels.ops import _dispatch, _eager_plans, _launch_plans


def _want(W, x, bias=None):
    out = x.double() @ W.to_dense().double().t()
    return out if bias is None else out + bias.double()


def _bound(W, x, bias=None):
    bound = (
        spmm_bound(W.to_dense(), x.reshape(-1, x.shape[-1]).t())
        .t()
        .reshape(*x.shape[:-1], W.shape[0])
    )
    return bound if bias is None else bound + bias.double().abs()


def _weights(gen, dtype=torch.float32):
    return [random_csr(37, 50, 0.3, gen, dtype), random_nm(37, 48, 2, 8, gen, dtype=dtype)]


@pytest.mark.parametrize("kind", [0, 1], ids=["csr", "nm"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_a_repeat_call_takes_the_plan_with_the_same_product(kind, dtype, gen, whole_path_calls):
    """Fresh x each call (never zeros), a bias, 3-D x: the planned calls match float64."""
    W = _weights(gen, dtype)[kind]
    bias = randn(37, gen=gen, dtype=dtype)
    with torch.no_grad():
        for _ in range(3):
            x = randn(2, 3, W.shape[1], gen=gen, dtype=dtype)
            got = sk.linear(x, W, bias)
            assert got.shape == (2, 3, 37) and got.is_contiguous()
            assert_close(got, _want(W, x, bias), _bound(W, x, bias), dtype)
    assert len(whole_path_calls) == 1


@pytest.mark.parametrize("kind", [0, 1], ids=["csr", "nm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_bias", [False, True])
def test_the_dense_plan_gives_the_dense_backends_bits(kind, dtype, with_bias, gen,
                                                      whole_path_calls):  # fmt: skip
    """The dense backend's plan (its weight densified, then the very cuBLAS call): fresh x
    each call, 3-D, and one token (not column-major: the backend's own call) give the bits of
    a fresh weight's whole path."""
    W = _weights(gen, dtype)[kind]
    bias = randn(37, gen=gen, dtype=dtype) if with_bias else None
    with torch.no_grad():
        for shape in [(2, 3), (2, 3), (2, 3), (1,), (1,)]:
            x = randn(*shape, W.shape[1], gen=gen, dtype=dtype)
            got = sk.linear(x, W, bias, backend="dense")
            assert torch.equal(got, sk.linear(x, twin_weight(W), bias, backend="dense"))
            assert_close(got, _want(W, x, bias), _bound(W, x, bias), dtype)
    assert len(whole_path_calls) == 2 + 5  # (W's first call of each signature; every twin's)


def test_one_token_and_k_one(gen, whole_path_calls):
    W = random_csr(5, 1, 1.0, gen, torch.float32, empty_rows=False)
    for _ in range(2):
        x = randn(1, 1, gen=gen, dtype=torch.float32)
        assert_close(sk.linear(x, W), _want(W, x), _bound(W, x), torch.float32)
    assert len(whole_path_calls) == 1


def test_signature_changes_take_the_whole_path(gen, whole_path_calls):
    """Another shape, strides, dtype, bias or forced backend is a new signature."""
    W = random_csr(37, 50, 0.3, gen, torch.float32)
    x = randn(4, 50, gen=gen, dtype=torch.float32)
    bias = randn(37, gen=gen, dtype=torch.float32)
    calls = [
        lambda: sk.linear(x, W),
        lambda: sk.linear(x[:3], W),
        lambda: sk.linear(randn(50, 4, gen=gen, dtype=torch.float32).t(), W),  # strides
        lambda: sk.linear(x, W, bias),
        lambda: sk.linear(x, W, backend="reference"),
    ]
    for i, call in enumerate(calls):
        call()
        assert len(whole_path_calls) == i + 1
        call()  # the same signature again: planned
        assert len(whole_path_calls) == i + 1


def test_bad_input_is_still_refused_after_a_plan(gen):
    """Wrong K, dtype or bias are other signatures: the checks run and name the argument."""
    W = random_nm(37, 48, 2, 8, gen, dtype=torch.float32)
    x = randn(4, 48, gen=gen, dtype=torch.float32)
    sk.linear(x, W)
    sk.linear(x, W)
    with pytest.raises(ValueError, match="in_features"):
        sk.linear(randn(4, 40, gen=gen, dtype=torch.float32), W)
    with pytest.raises((TypeError, ValueError), match="dtype"):
        sk.linear(x.double(), W)
    with pytest.raises(ValueError, match="bias"):
        sk.linear(x, W, randn(36, gen=gen, dtype=torch.float32))
    with pytest.raises(ValueError, match="backend"):
        sk.linear(x, W, backend="nonsense")


def test_another_weight_sharing_the_values_takes_the_whole_path(gen, whole_path_calls):
    """Plans are found by the values; a matrix of another shape or pattern on the same
    values is checked (and computed) as itself."""
    values = randn(4, gen=gen, dtype=torch.float32)
    narrow = sk.CSRMatrix(torch.tensor([0, 1, 2, 3, 4]), torch.tensor([0, 1, 2, 3]), values, (4, 8))
    wide = sk.CSRMatrix(torch.tensor([0, 1, 2, 3, 4]), torch.tensor([9, 10, 11, 15]), values,
                        (4, 16))  # fmt: skip
    moved = sk.CSRMatrix(torch.tensor([0, 1, 2, 3, 4]), torch.tensor([4, 5, 6, 7]), values, (4, 8))
    x = randn(3, 8, gen=gen, dtype=torch.float32)
    for _ in range(2):
        sk.linear(x, narrow)
    assert len(whole_path_calls) == 1
    with pytest.raises(ValueError, match="in_features 16"):
        sk.linear(x, wide)
    for _ in range(2):  # same shape, another pattern: its own product, then its own plan
        torch.testing.assert_close(sk.linear(x, moved), x @ moved.to_dense().t())
    assert len(whole_path_calls) == 2  # (the wide one was refused before it)
    W = random_nm(8, 16, 2, 8, gen, dtype=torch.float32)
    indices = random_nm(8, 16, 2, 8, gen, dtype=torch.float32).indices
    assert not torch.equal(indices, W.indices)
    other = sk.NMMatrix(W.values, indices, (8, 16), 2, 8)
    x = randn(3, 16, gen=gen, dtype=torch.float32)
    for matrix in (W, W, other, other):
        torch.testing.assert_close(sk.linear(x, matrix), x @ matrix.to_dense().t())


def test_values_changed_in_place_take_the_whole_path(gen, whole_path_calls):
    W = random_csr(37, 50, 0.3, gen, torch.float32)
    x = randn(4, 50, gen=gen, dtype=torch.float32)
    sk.linear(x, W)
    with torch.no_grad():
        W.values.mul_(-3)
    got = sk.linear(x, W)
    assert len(whole_path_calls) == 2
    assert_close(got, _want(W, x), _bound(W, x), torch.float32)


def test_plans_of_older_values_are_dropped(gen, whole_path_calls):
    """Evaluated between optimizer steps (values changed in place each time), a weight keeps
    only the current version's plans; a signature of that version stays planned."""
    W = random_csr(37, 50, 0.3, gen, torch.float32)
    x, x2 = (randn(t, 50, gen=gen, dtype=torch.float32) for t in (4, 6))
    for step in range(3):
        with torch.no_grad():
            W.values.add_(0.25)  # an optimizer step
        sk.linear(x, W)
        sk.linear(x2, W)
        assert len(_eager_plans._PLANS.get(W.values)) == 2  # x's and x2's, this version's
        got = sk.linear(x, W)  # planned
        assert len(whole_path_calls) == 2 * (step + 1)
        assert_close(got, _want(W, x), _bound(W, x), torch.float32)


def test_a_gradient_takes_the_whole_path_and_is_right(gen, whole_path_calls):
    W = random_nm(37, 48, 2, 8, gen, dtype=torch.float64)
    x = randn(4, 48, gen=gen, dtype=torch.float64)
    sk.linear(x, W)
    sk.linear(x, W)
    assert len(whole_path_calls) == 1
    x.requires_grad_()
    sk.linear(x, W).sum().backward()
    assert len(whole_path_calls) == 2
    torch.testing.assert_close(x.grad, torch.ones(4, 37, dtype=torch.float64) @ W.to_dense())


def test_the_backend_is_looked_up_at_each_call(gen, monkeypatch):
    """A planned call runs the registered backend of that name as it is now."""
    W = random_csr(37, 50, 0.3, gen, torch.float32)
    x = randn(4, 50, gen=gen, dtype=torch.float32)
    sk.linear(x, W)
    (plan,) = _eager_plans._PLANS.get(W.values).values()
    name = plan.backend
    backend, calls = _dispatch._REGISTRY["spmm_csr"][name], []

    def counted(*args):
        calls.append(1)
        return backend.run(*args)

    monkeypatch.setitem(_dispatch._REGISTRY["spmm_csr"], name,
                        _dispatch.Backend(name, counted, backend.reasons))  # fmt: skip
    sk.linear(x, W)
    assert calls == [1]


def test_plans_hold_no_weight_and_stay_few(gen):
    """The plans die with the weight's values and keep at most MOST_SIGNATURES signatures."""
    W = random_csr(37, 50, 0.3, gen, torch.float32)
    for tokens in range(1, _eager_plans.MOST_SIGNATURES + 3):
        sk.linear(randn(tokens, 50, gen=gen, dtype=torch.float32), W)
    assert len(_eager_plans._PLANS.get(W.values)) <= _eager_plans.MOST_SIGNATURES
    values = weakref.ref(W.values)
    del W
    gc.collect()
    assert values() is None


def test_inference_mode_weights_take_the_whole_path(gen, whole_path_calls):
    """Inference tensors have no version counter to key a plan on."""
    with torch.inference_mode():
        W = random_csr(37, 50, 0.3, gen, torch.float32)
        x = randn(4, 50, gen=gen, dtype=torch.float32)
        for _ in range(2):
            assert_close(sk.linear(x, W), _want(W, x), _bound(W, x), torch.float32)
    assert len(whole_path_calls) == 2


def test_not_a_tensor_after_a_plan_is_refused(gen):
    W = random_nm(6, 8, 2, 4, gen, dtype=torch.float64)
    x = randn(2, 8, gen=gen)
    sk.linear(x, W)
    with pytest.raises(TypeError, match="bias must be a torch.Tensor"):
        sk.linear(x, W, [0.0] * 6)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        sk.linear(x.tolist(), W)


def test_compiled_calls_after_a_plan(gen):
    """torch.compile(fullgraph=True) of linear on a weight with plans: traced through the op."""
    W = random_nm(6, 8, 2, 4, gen, dtype=torch.float64)
    x = randn(3, 8, gen=gen)
    with torch.no_grad():
        eager = sk.linear(x, W)
        sk.linear(x, W)  # planned
        compiled = torch.compile(lambda x: sk.linear(x, W), fullgraph=True, backend="eager")(x)
    torch.testing.assert_close(compiled, eager)


def test_each_stream_records_a_launch_plan_of_its_own(gen, monkeypatch):
    """A launch plan replays on the stream it was recorded on only: a signature first met on
    a side stream (a warm-up before a CUDA graph capture, as torch's docs do it) left the
    default stream without one, its every call the whole path. One a stream now."""
    W = random_csr(37, 50, 0.3, gen, torch.float32)
    x = randn(4, 50, gen=gen, dtype=torch.float32)
    current, recorded, replayed = [7], [], []

    class Launches:
        def __init__(self, out) -> None:
            self.out, self.stream = out, current[0]

        def replay(self, x, bias, weight, stream=None):
            if current[0] != self.stream:  # (as the real one: its own stream only)
                return None
            replayed.append(self.stream)
            return self.out.clone()

    def record(call, x, bias, W):
        recorded.append(current[0])
        out = call()
        return out, Launches(out)

    monkeypatch.setattr(_launch_plans, "stream_of", lambda x: current[0])
    monkeypatch.setattr(_launch_plans, "can_record", lambda x: True)
    monkeypatch.setattr(_launch_plans, "record", record)
    want = sk.linear(x, W)  # the whole path, its backend remembered
    for stream in (9, 9, 9, 7, 7, 7):
        current[0] = stream
        torch.testing.assert_close(sk.linear(x, W), want, rtol=0, atol=0)
    assert recorded == [9, 7] and replayed == [9, 9, 7, 7]
    for stream in range(20, 20 + _eager_plans.MOST_STREAMS):  # (a few streams at most)
        current[0] = stream
        sk.linear(x, W)
    assert len(recorded) == _eager_plans.MOST_STREAMS
