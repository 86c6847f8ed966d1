"""Launch plans (ops/_launch_plans.py): a repeat eager linear replays the Triton launches its
backend made, with this call's x, bias and a new output. On the CPU: the guard that refuses a
backend doing device work other than Triton launches, and that nothing records off CUDA. On the
GPU: every replayed call gives the same bits as a weight without plans, new x each call (some
at other addresses, one misaligned), the outputs independent, and side streams untouched."""

import weakref

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, random_csr, random_nm, spmm_bound, twin_weight
from sparsekernels.ops import _eager_plans, _launch_plans


def test_the_guard_refuses_all_but_allocations_and_views():
    a = torch.randn(4, 4)
    with _launch_plans._AllocationsAndViewsOnly() as guard:
        torch.empty(3, 3)
        a.new_empty((2, 2))
        a.view(16)[2:5].unsqueeze(0).expand(2, 3)
        a.t()[1].select(0, 2)
        a.view(torch.int32)
    assert guard.refused == []
    for work in (lambda: a @ a, lambda: a.clone(), lambda: torch.zeros(2), lambda: a.sum().item()):
        with _launch_plans._AllocationsAndViewsOnly() as guard:
            work()
        assert guard.refused, work


def test_nothing_records_off_cuda(monkeypatch):
    monkeypatch.setattr(_launch_plans, "ENABLED", True)
    assert not _launch_plans.can_record(torch.randn(2, 3))


@pytest.fixture(autouse=True)
def launch_plans_on(monkeypatch):
    """(on by default; SPARSEKERNELS_LAUNCH_PLANS=0 would turn them off)"""
    monkeypatch.setattr(_launch_plans, "ENABLED", True)


CASES = [  # (weight, tokens, a replay is expected)
    ("csr 70% 512", 1, True),
    ("csr 70% 512", 4, None),
    ("csr 90% 4096", 12, None),
    ("nm 2:8 512", 1, True),
    ("nm 2:4 1024", 8, None),
    ("nm 1:8 2048", 16, None),
    ("nm 2:8 v64 512", 16, None),
    ("nm 1:8 4096", 1, True),  # the TMA ring (Hopper): its descriptors held (DESCRIPTORS)
]


def _weight(name: str, gen):
    kind, pattern, size = name.split(" ")[0], name.split(" ")[1], int(name.split(" ")[-1])
    if kind == "csr":
        return random_csr(size, size, 1 - int(pattern[:-1]) / 100, gen, torch.bfloat16, "cuda")
    n, m = map(int, pattern.split(":"))
    vector = 64 if "v64" in name else 1
    return random_nm(size, size, n, m, gen, vector=vector, dtype=torch.bfloat16, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "tokens", "replays"), CASES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_replayed_calls_give_the_backends_bits(name, tokens, replays, with_bias, gen, monkeypatch):
    monkeypatch.setattr(_launch_plans, "DESCRIPTORS", True)
    W = _weight(name, gen)
    K = W.shape[1]
    bias = torch.randn(W.shape[0], generator=gen).to("cuda").bfloat16() if with_bias else None
    before = dict(_launch_plans.stats)
    results = []
    with torch.no_grad():
        for call in range(7):
            # x's rows from another place each call (its shape and strides kept): 16-byte steps,
            # and at call 5 two bytes off, which a replay must leave to the backend
            flat = torch.randn((tokens + 4) * K, generator=gen).to("cuda").bfloat16()
            start = 8 * (call % 3) + (1 if call == 5 else 0)
            x = flat[start : start + tokens * K].view(tokens, K)
            got = sk.linear(x, W, bias)
            if call == 5:  # (the whole path may route a misaligned x elsewhere: other bits)
                exact = x.double() @ W.to_dense().double().t()
                exact = exact if bias is None else exact + bias.double()
                bound = spmm_bound(W.to_dense(), x.t()).t()
                assert_close(got, exact, bound if bias is None else bound + bias.double().abs(),
                             torch.bfloat16)  # fmt: skip
            else:
                want = sk.linear(x, twin_weight(W), bias)  # a fresh weight: the whole path
                assert torch.equal(got, want), call
            results.append((got, got.clone()))
    for got, kept in results:
        assert torch.equal(got, kept)  # later calls wrote into outputs of their own
    replayed = _launch_plans.stats["replayed"] - before["replayed"]
    if replays is True:
        assert replayed >= 3, _launch_plans.stats
    elif replays is False:
        assert replayed == 0


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["csr 70% 384", "nm 2:8 384", "nm 2:8 v64 384"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_the_dense_backend_replays_its_densify(name, with_bias, gen, monkeypatch):
    """The dense backend (MiniLM-sized layers take it): its weight densified by a replayed
    launch, then cuBLAS as the backend calls it; a (8, 20, 384) batch, new each call, gives
    the bits of a fresh weight's whole path."""
    monkeypatch.setattr(_eager_plans, "DENSIFY_PLANS", True)
    W = _weight(name, gen)
    bias = torch.randn(384, generator=gen).to("cuda").bfloat16() if with_bias else None
    before = _launch_plans.stats["replayed"]
    with torch.no_grad():
        for _ in range(6):
            x = torch.randn(8, 20, 384, generator=gen).to("cuda").bfloat16()
            got = sk.linear(x, W, bias, backend="dense")
            assert torch.equal(got, sk.linear(x, twin_weight(W), bias, backend="dense"))
            exact = x.double() @ W.to_dense().double().t()
            bound = spmm_bound(W.to_dense(), x.view(160, 384).t()).t().view(8, 20, 384)
            exact = exact if bias is None else exact + bias.double()
            bound = bound if bias is None else bound + bias.double().abs()
            assert_close(got, exact, bound, torch.bfloat16)
    assert _launch_plans.stats["replayed"] - before >= 4, _launch_plans.stats


@pytest.mark.gpu
def test_each_stream_records_and_replays_its_own_plan(gen):
    """A plan replays on the stream it was recorded on; a side stream records its own (a
    warm-up there, as torch's CUDA graph docs do it, left none for the default stream)."""
    W = _weight("csr 70% 512", gen)
    x = torch.randn(1, 512, generator=gen).to("cuda").bfloat16()
    side = torch.cuda.Stream()
    with torch.no_grad():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # the signature's plan, then the side stream's launches
                want = sk.linear(x, W)
            before = _launch_plans.stats["replayed"]
            assert torch.equal(sk.linear(x, W), want)
            assert _launch_plans.stats["replayed"] == before + 1
        torch.cuda.current_stream().wait_stream(side)
        got = sk.linear(x, W)  # the default stream: records its own
        assert _launch_plans.stats["replayed"] == before + 1
        for _ in range(2):
            assert torch.equal(sk.linear(x, W), want)
    assert torch.equal(got, want) and _launch_plans.stats["replayed"] == before + 3


@pytest.mark.gpu
def test_a_changed_pattern_takes_the_backend(gen):
    """An in-place change to the weight's indices (not in the eager plan's signature) ends the
    replays: the plan's pointers may hold what the old indices gave (packed words)."""
    W = _weight("nm 2:8 512", gen)
    x = torch.randn(1, 512, generator=gen).to("cuda").bfloat16()
    with torch.no_grad():
        for _ in range(4):
            sk.linear(x, W)
        W.indices.add_(0)  # the same offsets, a new version
        before = _launch_plans.stats["replayed"]
        got = sk.linear(x, W)
        want = sk.linear(x, twin_weight(W))
    assert torch.equal(got, want) and _launch_plans.stats["replayed"] == before


class _FakeKernel:
    """A compiled kernel's launcher stand-in: notes what each launch was given."""

    function, packed_metadata = 7, "meta"

    def __init__(self):
        self.launches = []

    def run(self, *args):
        self.launches.append(args)


class _FakeJit:
    """A JIT function stand-in: its binder names the arguments in order, as Triton's does."""

    names = ("x", "w", "out", "bias", "rows", "BLOCK")

    def __init__(self):
        self.device_caches = {0: (None, None, None, None, self.bind)}

    def bind(self, *args, **kwargs):
        return {**dict(zip(self.names[: len(args)], args, strict=True)), **kwargs}, None, None


@pytest.fixture
def on_a_fake_stream(monkeypatch):
    monkeypatch.setattr(_launch_plans, "_current_stream", lambda: (11, None))
    monkeypatch.setattr(_launch_plans, "_current_device", lambda: 0)


def test_a_plan_points_each_launch_at_this_calls_tensors(gen, on_a_fake_stream):
    """On the CPU, with stand-ins for Triton's pieces: pointers into x, the bias and the output
    follow this call's tensors at the recorded offsets; the weight's stay; the rest is kept."""
    W = random_csr(6, 8, 0.5, gen, torch.float32)
    big = torch.randn(40, generator=gen)
    x, bias = big[4:20].view(2, 8), torch.randn(6, generator=gen)
    out = torch.empty_strided((6, 2), (1, 6))
    kernel, fn = _FakeKernel(), _FakeJit()
    args = (x.t()[1:], W.values, out[:, 1], bias, 5)
    log = [(fn, (3,), args, {"BLOCK": 4}, kernel)]
    plan = _launch_plans._plan(log, (x, bias), out, _launch_plans.weight_state(W))
    assert plan is not None and plan.outputs == (((6, 2), (1, 6), torch.float32),)

    big2, bias2 = torch.randn(60, generator=gen), torch.randn(6, generator=gen)
    x2 = big2[12:28].view(2, 8)  # 32 bytes further into its storage than x was: aligned alike
    got = plan.replay(x2, bias2, _launch_plans.weight_state(W))
    assert got.shape == (6, 2) and got.stride() == (1, 6)
    (launch,) = kernel.launches
    assert launch[:9] == (3, 1, 1, 11, 7, "meta", None, None, None)
    values = launch[9:]
    assert values[0] == x2.data_ptr() + 4  # x.t()[1:]: one float past x's start
    assert values[1] == W.values.data_ptr()
    assert values[2] == got.data_ptr() + 6 * 4  # out[:, 1]: a column of 6 floats in
    assert values[3] == bias2.data_ptr() and values[4:] == (5, 4)

    misaligned = big2[13:29].view(2, 8)  # 4 bytes off
    assert plan.replay(misaligned, bias2, _launch_plans.weight_state(W)) is None
    W.values.add_(0)  # a new version of the weight's values
    assert plan.replay(x2, bias2, _launch_plans.weight_state(W)) is None
    assert len(kernel.launches) == 1


def test_a_plan_keeps_no_tensor_of_the_recorded_call(gen, on_a_fake_stream):
    """x, the bias and the output of the call a plan was recorded on die with the call: a
    plan that kept them held a dense weight for each densify it recorded (2 bytes an element
    beside a sparse layer's ~1)."""
    W = random_csr(6, 8, 0.5, gen, torch.float32)
    x, bias, out = (
        torch.randn(2, 8, generator=gen),
        torch.randn(6, generator=gen),
        torch.empty(6, 2),
    )
    kernel, fn = _FakeKernel(), _FakeJit()
    log = [(fn, (3,), (x, W.values, out, bias, 5), {"BLOCK": 4}, kernel)]
    plan = _launch_plans._plan(log, (x, bias), out, _launch_plans.weight_state(W))
    assert plan is not None
    alive = [weakref.ref(t) for t in (x, bias, out)]
    del x, bias, out, log
    assert [ref() for ref in alive] == [None, None, None]
    x2, bias2 = torch.randn(2, 8, generator=gen), torch.randn(6, generator=gen)
    got = plan.replay(x2, bias2, _launch_plans.weight_state(W))
    assert kernel.launches[0][9:] == (x2.data_ptr(), W.values.data_ptr(), got.data_ptr(),
                                      bias2.data_ptr(), 5, 4)  # fmt: skip


class TensorDescriptor:
    """A TMA descriptor stand-in (the plan knows one by its class name and its base)."""

    def __init__(self, base):
        self.base = base


def test_a_descriptor_over_the_weight_is_held(gen, on_a_fake_stream, monkeypatch):
    """With DESCRIPTORS, a descriptor over the weight's values stays in the plan as recorded
    (its launcher builds the tensor map each launch) and its tensor is held; one over x, or
    any without DESCRIPTORS, gives no plan."""
    W = random_nm(8, 64, 1, 8, gen)
    x, out = torch.randn(1, 64, generator=gen), torch.empty(8, 1)
    over_weight, over_x = TensorDescriptor(W.values.view(-1)), TensorDescriptor(x.view(-1))

    def plan_of(descriptor):
        log = [(_FakeJit(), (2,), (descriptor, W.values, out, None, 8), {"BLOCK": 4},
                _FakeKernel())]  # fmt: skip
        return _launch_plans._plan(log, (x, None), out, _launch_plans.weight_state(W))

    monkeypatch.setattr(_launch_plans, "DESCRIPTORS", False)
    assert plan_of(over_weight) is None  # SPARSEKERNELS_LAUNCH_PLAN_DESCRIPTORS=0
    monkeypatch.setattr(_launch_plans, "DESCRIPTORS", True)
    plan = plan_of(over_weight)
    assert plan is not None and any(h.data_ptr() == _storage_of(W.values) for h in plan.held)
    assert plan.launches[0].values[0] is over_weight
    assert plan_of(over_x) is None


def _storage_of(t):
    return t.untyped_storage().data_ptr()


def test_no_plan_where_x_bias_and_output_share_memory(gen, on_a_fake_stream):
    W = random_csr(6, 8, 0.5, gen, torch.float32)
    big = torch.randn(64, generator=gen)
    x, bias, out = big[:16].view(2, 8), big[16:22], torch.empty(6, 2)
    log = [(_FakeJit(), (1,), (x, W.values, out, bias, 5), {"BLOCK": 4}, _FakeKernel())]
    assert _launch_plans._plan(log, (x, bias), out, _launch_plans.weight_state(W)) is None
    sliced = torch.empty(6, 3)[:, :2]  # an output that is part of a larger buffer
    log = [(_FakeJit(), (1,), (x, W.values, sliced, None, 5), {"BLOCK": 4}, _FakeKernel())]
    assert _launch_plans._plan(log, (x, None), sliced, _launch_plans.weight_state(W)) is None


def test_a_backend_doing_other_work_records_no_plan(gen):
    W = random_csr(6, 8, 0.5, gen, torch.float32)
    x = torch.randn(2, 8, generator=gen)
    before = _launch_plans.stats["refused"]
    out, plan = _launch_plans.record(lambda: W.to_dense() @ x.t(), x, None, W)
    assert plan is None and _launch_plans.stats["refused"] == before + 1
    torch.testing.assert_close(out, W.to_dense() @ x.t())


def test_a_general_plan_follows_every_input_and_output(gen, on_a_fake_stream):
    """The general form (the fused attention's training calls): pointers into each of several
    inputs and outputs follow this call's tensors; with check_inputs a replay also wants the
    inputs' shapes, strides and dtypes as recorded; a held state must be unchanged."""
    a, b = torch.randn(4, 6, generator=gen), torch.randn(10, generator=gen)
    out1, out2 = torch.empty(4, 6), torch.empty(3, dtype=torch.float64)
    held = torch.randn(5, generator=gen)
    kernel, fn = _FakeKernel(), _FakeJit()
    log = [(fn, (2, 3), (a[1], b[2:], out1, out2[1:], held), {"BLOCK": 4}, kernel)]
    state = ((id(held), held._version),)
    plan = _launch_plans._plan(log, (a, b), (out1, out2), state, check_inputs=True)
    assert plan is not None and not plan.single
    a2, b2 = torch.randn(4, 6, generator=gen), torch.randn(10, generator=gen)
    got1, got2 = plan.replay_call((a2, b2), state)
    assert got1.shape == (4, 6) and got2.dtype == torch.float64 and got2.shape == (3,)
    (launch,) = kernel.launches
    assert launch[:3] == (2, 3, 1)
    assert launch[9:] == (a2.data_ptr() + 6 * 4, b2.data_ptr() + 2 * 4, got1.data_ptr(),
                          got2.data_ptr() + 8, held.data_ptr(), 4)  # fmt: skip
    assert plan.replay_call((a2.t().contiguous().t(), b2), state) is None  # other strides
    assert plan.replay_call((a2.double(), b2), state) is None  # another dtype
    held.add_(0)
    assert plan.replay_call((a2, b2), ((id(held), held._version),)) is None
    assert len(kernel.launches) == 1


def test_no_general_plan_where_an_input_and_an_output_share_memory(gen, on_a_fake_stream):
    a = torch.randn(4, 6, generator=gen)
    out = a.view(-1)  # (the output is the input's storage)
    log = [(_FakeJit(), (1,), (a, out), {}, _FakeKernel())]
    assert _launch_plans._plan(log, (a,), (out,), ()) is None


def test_marked_scratch_is_allocated_by_each_replay(gen, on_a_fake_stream):
    """A buffer the call marked as its scratch (the fused attention's fp32 sums) is not held:
    each replay allocates one laid out alike and points the launch into it. An unmarked
    buffer is held, and its pointer stays."""
    a = torch.randn(4, 6, generator=gen)
    out = torch.empty(4, 6)
    sums = torch.empty(6, 4).t()  # laid out as a transpose: the replay's must be too
    unmarked = torch.empty(3)
    kernel, fn = _FakeKernel(), _FakeJit()
    log = [(fn, (1,), (a, sums[1], out, unmarked), {}, kernel)]
    plan = _launch_plans._plan(log, (a,), out, (), marked=[sums, sums])
    assert plan is not None and plan.scratch == (((4, 6), (1, 4), torch.float32),)
    assert [h.data_ptr() for h in plan.held] == [_storage_of(unmarked)]
    got = plan.replay_call((a,), ())
    (launch,) = kernel.launches
    values = launch[9:]
    assert values[0] == a.data_ptr() and values[2] == got.data_ptr()
    assert values[1] not in (0, _storage_of(sums) + 4) and values[3] == unmarked.data_ptr()
