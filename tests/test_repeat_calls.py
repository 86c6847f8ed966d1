"""A SparseLinear's repeat inference call replays its plan's launches straight from the layer
(nn/_repeat_calls.py). On the CPU, with stand-ins for the launch plans: each stand-in replay
gives what the recorded call gave (frozen), so a replay after anything that should end it (the
values or the pattern changed, another x, a gradient wanted, autocast) would show as a wrong
answer; each case also checks the replays counted. On the GPU: the replayed layer's bits are a
fresh weight's whole path's, and a change of its values is seen."""

import copy
import io

import pytest
import torch
import torch.nn.utils.prune
from torch import nn

import sparsekernels as sk
from _helpers import assert_close, spmm_bound, twin_weight
from sparsekernels.nn import SparseLinear, _repeat_calls
from sparsekernels.nn._weight import SparseWeightModule
from sparsekernels.ops import _dispatch, _launch_plans


class _Frozen:
    """A launch plan stand-in: replays return a copy of what the recorded call returned."""

    lean = True

    def __init__(self, out: torch.Tensor):
        self.out = out.clone()
        self.replays = 0

    def replay(self, x, bias, weight, stream=None):
        return None  # (linear's own replays: the whole path runs, and counts nothing)

    def replay_linear(self, x, bias, stream=None):
        self.replays += 1
        return self.out.clone()


@pytest.fixture
def stand_ins(monkeypatch):
    """Launch plans recorded on the CPU (their replays frozen), the backend forced: a list that
    collects the stand-ins made."""
    made = []

    def record(call, x, bias, W):
        out = call()
        made.append(_Frozen(out))
        return out, made[-1]

    monkeypatch.setattr(_repeat_calls, "on_cuda", lambda x: True)
    monkeypatch.setattr(_launch_plans, "stream_of", lambda x: (5, 0))
    monkeypatch.setattr(_launch_plans, "can_record", lambda x: True)
    monkeypatch.setattr(_launch_plans, "record", record)
    return made


def _force(monkeypatch, backend: str) -> None:
    first_fitting = _dispatch._first_fitting
    forced = {"spmm_csr": backend, "spmm_nm": backend}
    monkeypatch.setattr(
        _dispatch, "_first_fitting", lambda op, p: forced.get(op) or first_fitting(op, p)
    )


def _layer(kind: str, gen, bias: bool = True) -> SparseLinear:
    dense = nn.Linear(24, 20, bias=bias)
    with torch.no_grad():
        dense.weight.copy_(torch.randn(20, 24, generator=gen))
        if bias:
            dense.bias.copy_(torch.randn(20, generator=gen))
    if kind == "csr":
        return SparseLinear.from_dense(dense, 0.7)
    return SparseLinear.from_dense(dense, pattern="2:8")


def _exact(layer: SparseLinear, x: torch.Tensor) -> torch.Tensor:
    W = layer.to_dense().double()
    out = x.double() @ W.t()
    return out if layer.bias is None else out + layer.bias.double()


def _check(layer: SparseLinear, x: torch.Tensor) -> torch.Tensor:
    got = layer(x)
    W = layer.to_dense().float()
    bound = spmm_bound(W, x.reshape(-1, x.shape[-1]).float().t()).t().reshape(got.shape)
    bound = bound if layer.bias is None else bound + layer.bias.double().abs()
    assert_close(got, _exact(layer, x), bound, x.dtype)
    return got


def _replays(made) -> int:
    return sum(s.replays for s in made)


def _runs(layer) -> list:
    """What the layer runs again, one a call signature it keeps (nn/_repeat_calls.py)."""
    return [run for _, run, _ in layer._replays.values()]


def _warm(layer: SparseLinear, x: torch.Tensor, made) -> None:
    """Three calls: the whole path (its plan), the plan's call (its launches), then a replay."""
    for _ in range(3):
        _check(layer, x)
    assert _runs(layer) and _replays(made) == 1


@pytest.mark.parametrize("kind", ["csr", "nm"])
@pytest.mark.parametrize("backend", ["dense", "reference"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_repeat_calls_replay_from_the_layer(kind, backend, with_bias, gen, stand_ins, monkeypatch):
    _force(monkeypatch, backend)
    layer = _layer(kind, gen, with_bias)
    x = torch.randn(3, 5, 24, generator=gen)
    with torch.no_grad():
        _warm(layer, x, stand_ins)
        for calls in range(2, 5):
            _check(layer, x)
            assert _replays(stand_ins) == calls
        y = torch.randn(3, 5, 24, generator=gen)  # another x of the same shape and strides
        if backend == "dense":  # (the replay densifies; the product reads this call's x)
            _check(layer, y)
        else:  # (the frozen replay gives the first x's product: the tell that it ran)
            assert torch.equal(layer(y), layer(x))


def _in_place_values(layer, x):
    with torch.no_grad():
        layer.values.mul_(1.5)


def _swapped_values(layer, x):
    layer.values.data = layer.values.data * 0.5


def _new_values(layer, x):
    layer.values = nn.Parameter(layer.values.detach() * 2.0, requires_grad=False)


def _new_bias(layer, x):
    layer.bias = nn.Parameter(layer.bias.detach() + 1.0, requires_grad=False)


def _in_place_pattern(layer, x):
    """One kept position moved to a free column of its row (CSR), the rows' choices reversed
    (N:M): the buffers edited in place."""
    with torch.no_grad():
        if layer.format == "nm":
            layer.indices.copy_(layer.indices.flip(0))
            return
        offsets, cols = layer.row_offsets.tolist(), layer.column_indices
        row = next(r for r in range(len(offsets) - 1) if offsets[r + 1] > offsets[r])
        start, end = offsets[row], offsets[row + 1]
        free = sorted(set(range(layer.in_features)) - set(cols[start:end].tolist()))
        cols[start] = free[0]
        cols[start:end] = cols[start:end].sort().values


def _loaded(layer, x):
    other = copy.deepcopy(layer)
    with torch.no_grad():
        other.values.mul_(-1.0)
    layer.load_state_dict(other.state_dict())


def _released(layer, x):
    layer.release_caches()


CHANGES = {
    "values in place": (_in_place_values, True),
    "values swapped by .data": (_swapped_values, True),
    "a new values Parameter": (_new_values, True),
    "a new bias Parameter": (_new_bias, True),
    "the pattern in place": (_in_place_pattern, True),
    "load_state_dict": (_loaded, True),
    "release_caches": (_released, True),
}


@pytest.mark.parametrize("kind", ["csr", "nm"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_to_the_layer_ends_the_replay(kind, change, gen, stand_ins, monkeypatch):
    _force(monkeypatch, "dense")
    layer = _layer(kind, gen)
    layer.values.requires_grad_(False)
    layer.bias.requires_grad_(False)
    x = torch.randn(7, 24, generator=gen)
    with torch.no_grad():
        _warm(layer, x, stand_ins)
    apply, _ = CHANGES[change]
    apply(layer, x)
    before = _replays(stand_ins)
    with torch.no_grad():
        _check(layer, x)  # (a stale replay would give the old layer's answer)
    assert _replays(stand_ins) == before
    with torch.no_grad():
        for _ in range(3):  # the changed layer records its own and replays it
            _check(layer, x)
    assert _replays(stand_ins) > before


def test_bias_changed_in_place_is_read_by_the_replay(gen, stand_ins, monkeypatch):
    """The bias is an input of the replayed product, not part of what was recorded."""
    _force(monkeypatch, "dense")
    layer = _layer("csr", gen)
    x = torch.randn(7, 24, generator=gen)
    with torch.no_grad():
        _warm(layer, x, stand_ins)
        layer.bias.add_(3.0)
        _check(layer, x)
    assert _replays(stand_ins) == 2


@pytest.mark.parametrize(
    "other",
    [
        lambda x: x[:4],  # another shape
        lambda x: x.double(),  # another dtype
        lambda x: x.t().contiguous().t(),  # other strides
        lambda x: x.unsqueeze(0),  # another rank
    ],
    ids=["shape", "dtype", "strides", "rank"],
)
def test_another_x_takes_the_whole_path(other, gen, stand_ins, monkeypatch):
    _force(monkeypatch, "dense")
    layer = _layer("nm", gen)
    x = torch.randn(7, 24, generator=gen)
    with torch.no_grad():
        _warm(layer, x, stand_ins)
        y = other(torch.randn(7, 24, generator=gen))
        if y.dtype != x.dtype:
            layer = layer.to(y.dtype)  # (x and the weight share a dtype)
            stand_ins.clear()
        _check(layer, y)
    assert _replays(stand_ins) == (0 if y.dtype != x.dtype else 1)


def test_shapes_in_turn_each_replay(gen, stand_ins, monkeypatch):
    """Batches of several lengths in turn (the demo's sentences): each signature keeps its own
    replay; a change of the values replaces each one's entry, not adds to them."""
    _force(monkeypatch, "reference")  # (a frozen replay: a replay of another shape would show)
    layer = _layer("nm", gen)
    xs = [torch.randn(n, 24, generator=gen) for n in (3, 5, 8)]
    with torch.no_grad():
        for _ in range(4):
            for x in xs:
                _check(layer, x)
        # each: the whole path, the plan's call (recorded), then two replays
        assert len(_runs(layer)) == 3 and _replays(stand_ins) == 6
        layer.values.mul_(2.0)
        for _ in range(3):
            for x in xs:
                _check(layer, x)
    assert len(_runs(layer)) == 3 and _replays(stand_ins) == 9


def test_new_values_drop_every_signatures_old_replay(gen, stand_ins, monkeypatch):
    """A `.data` swap or a new Parameter: the next call's entry replaces its signature's, and
    the other signatures' entries (holding the old values through their plans) go with it;
    an in-place change replaces only the calling signature's."""
    _force(monkeypatch, "reference")
    layer = _layer("csr", gen)
    xs = [torch.randn(n, 24, generator=gen) for n in (3, 5, 8)]
    with torch.no_grad():
        for _ in range(3):
            for x in xs:
                _check(layer, x)
        assert len(_runs(layer)) == 3
        layer.values.mul_(0.5)
        for _ in range(2):
            _check(layer, xs[0])
        assert len(_runs(layer)) == 3  # (the same tensors: the others wait for their calls)
        old = layer.values.data
        layer.values.data = old * 2.0
        for _ in range(2):
            _check(layer, xs[0])
        assert len(_runs(layer)) == 1
        for x in xs[1:]:
            _check(layer, x)


def test_kept_signatures_stay_few(gen, stand_ins, monkeypatch):
    _force(monkeypatch, "reference")
    layer = _layer("csr", gen)
    with torch.no_grad():
        for n in range(1, 3 * _repeat_calls.MOST_SIGNATURES):
            x = torch.randn(n, 24, generator=gen)  # (the frozen replays' input)
            for _ in range(3):
                _check(layer, x)
            assert 1 <= len(_runs(layer)) <= _repeat_calls.MOST_SIGNATURES


def test_autocast_takes_the_whole_path(gen, stand_ins, monkeypatch):
    _force(monkeypatch, "dense")
    layer = _layer("csr", gen)
    x = torch.randn(7, 24, generator=gen)
    with torch.no_grad():
        _warm(layer, x, stand_ins)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = layer(x)
    assert got.dtype == torch.bfloat16
    bound = spmm_bound(layer.to_dense(), x.t()).t() + layer.bias.double().abs()
    assert_close(got, _exact(layer, x), bound, torch.bfloat16)
    assert _replays(stand_ins) == 1


@pytest.fixture
def weight_builds(monkeypatch):
    """Counts the layers' weight property's calls (a call through linear() makes one; the
    layer's own path none)."""
    calls = [0]
    built = SparseWeightModule.weight.fget

    def counted(self):
        calls[0] += 1
        return built(self)

    monkeypatch.setattr(SparseWeightModule, "weight", property(counted))
    return calls


def _csr_grads(layer, x, g):
    """float64 gradients of sum(g * layer(x)) for a CSR layer: x's, the values' (the dense
    weight's at the stored positions, in storage order) and the bias's."""
    W = layer.to_dense().double()
    d_w = g.double().reshape(-1, W.shape[0]).t() @ x.double().reshape(-1, W.shape[1])
    rows = torch.repeat_interleave(torch.arange(W.shape[0]), layer.row_offsets.long().diff())
    d_values = d_w[rows, layer.column_indices.long()]
    return g.double() @ W, d_values, g.double().reshape(-1, W.shape[0]).sum(0)


@pytest.mark.parametrize("backend", ["dense", "reference"])
def test_training_steps_take_the_layers_path(backend, gen, stand_ins, weight_builds, monkeypatch):
    """Calls recording a gradient: after the first, the layer runs its plan's autograd path
    (no weight built, no plan looked up); an optimizer step between them changes the values
    in place (no new key), and each step's output and gradients are right for the values then."""
    _force(monkeypatch, backend)
    layer = _layer("csr", gen)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    for step in range(5):
        x = torch.randn(2, 9, 24, generator=gen, requires_grad=True)
        g = torch.randn(2, 9, 20, generator=gen)
        builds = weight_builds[0]
        out = layer(x)
        assert weight_builds[0] == builds + (1 if step == 0 else 0), step
        bound = spmm_bound(layer.to_dense(), x.reshape(-1, 24).t()).t().reshape(out.shape)
        assert_close(out, _exact(layer, x), bound + layer.bias.double().abs(), torch.float32)
        opt.zero_grad()
        out.backward(g)
        d_x, d_values, d_bias = _csr_grads(layer, x, g)
        W = layer.to_dense()
        bound_x = (g.double().abs() @ W.double().abs()).reshape(x.shape)
        assert_close(x.grad, d_x, bound_x, torch.float32)
        bound_w = g.double().abs().reshape(-1, 20).t() @ x.double().abs().reshape(-1, 24)
        rows = torch.repeat_interleave(torch.arange(20), layer.row_offsets.long().diff())
        assert_close(layer.values.grad, d_values, bound_w[rows, layer.column_indices.long()],
                     torch.float32)  # fmt: skip
        bound_b = g.double().abs().reshape(-1, 20).sum(0)
        assert_close(layer.bias.grad, d_bias, bound_b, torch.float32)
        opt.step()
    assert _replays(stand_ins) == 0  # (no inference call replayed a stand-in)


@pytest.mark.parametrize("frozen", [False, True], ids=["trained", "frozen"])
def test_evaluation_between_training_steps(frozen, gen, stand_ins, monkeypatch):
    """Training and inference calls alternate (evaluations after each step): each takes the
    path of its kind, right for the values as the last step left them. Frozen: the layer's
    weight and bias want no gradient, x does (a layer below it trains): the same key but for
    what wants a gradient."""
    _force(monkeypatch, "dense")
    layer = _layer("nm", gen)
    layer.requires_grad_(not frozen)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1) if not frozen else None
    x = torch.randn(7, 24, generator=gen)
    for _ in range(4):
        x.requires_grad_(True)
        out = _check(layer, x)
        assert out.grad_fn is not None
        g = torch.randn(7, 20, generator=gen)
        out.backward(g)
        W = layer.to_dense().double()
        assert_close(x.grad, g.double() @ W, g.double().abs() @ W.abs(), torch.float32)
        x.grad = None
        if opt is not None:
            opt.step()
            opt.zero_grad()
        x.requires_grad_(False)
        with torch.no_grad():
            for _ in range(3):
                _check(layer, x)
    assert _replays(stand_ins) >= 4


def test_pruned_values_take_the_whole_path(gen, stand_ins, monkeypatch):
    """torch.nn.utils.prune puts a plain tensor in the values' place, made each forward."""
    _force(monkeypatch, "dense")
    layer = _layer("csr", gen)
    x = torch.randn(7, 24, generator=gen)
    torch.nn.utils.prune.random_unstructured(layer, "values", amount=0.5)
    with torch.no_grad():
        for _ in range(4):
            _check(layer, x)
    assert _replays(stand_ins) == 0 and not _runs(layer)


def test_copies_and_pickles_drop_the_replay(gen, stand_ins, monkeypatch):
    _force(monkeypatch, "dense")
    layer = _layer("nm", gen)
    x = torch.randn(7, 24, generator=gen)
    with torch.no_grad():
        _warm(layer, x, stand_ins)
    twin = copy.deepcopy(layer)
    assert not _runs(twin)
    buffer = io.BytesIO()
    torch.save(layer, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert not _runs(loaded)
    with torch.no_grad():
        _check(twin, x)
        _check(loaded, x)


def test_off_cuda_nothing_is_kept(gen):
    layer = _layer("csr", gen)
    x = torch.randn(7, 24, generator=gen)
    with torch.no_grad():
        for _ in range(4):
            _check(layer, x)
    assert not _runs(layer)


# ----------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize(
    ("kind", "size", "tokens", "replays"),
    [
        ("csr", 512, 1, True),  # the few-token walk (a launch plan of its own)
        ("nm", 512, 1, True),  # the decode kernel
        ("csr", 384, 160, None),  # MiniLM-sized: the dense backend's densify, then cuBLAS
        ("nm", 384, 160, None),
        ("csr", 4096, 12, None),
    ],
)
@pytest.mark.parametrize("with_bias", [False, True])
def test_replayed_layer_calls_give_the_whole_paths_bits(kind, size, tokens, replays, with_bias,
                                                         gen, replays_on):  # fmt: skip
    """Each call against a fresh weight's whole path (sk.linear on a twin) and float64; the
    layer's values changed in place midway (an optimizer step between evaluations) are seen by
    the next call."""
    dense = nn.Linear(size, size, bias=with_bias).to("cuda", torch.bfloat16)
    layer = (SparseLinear.from_dense(dense, 0.7) if kind == "csr"
             else SparseLinear.from_dense(dense, pattern="2:8"))  # fmt: skip
    before = _launch_plans.stats["replayed"]
    with torch.no_grad():
        for call in range(8):
            if call == 5:
                layer.values.mul_(-0.5)
            x = torch.randn(tokens, size, generator=gen).to("cuda", torch.bfloat16)
            got = layer(x)
            assert torch.equal(got, sk.linear(x, twin_weight(layer.weight), layer.bias)), call
            exact = x.double() @ layer.to_dense().double().t()
            bound = spmm_bound(layer.to_dense(), x.t()).t()
            if with_bias:
                exact, bound = exact + layer.bias.double(), bound + layer.bias.double().abs()
            assert_close(got, exact, bound, torch.bfloat16)
    if replays:
        assert any(callable(run) for run in _runs(layer))
        assert _launch_plans.stats["replayed"] - before >= 4, _launch_plans.stats


@pytest.mark.gpu
def test_a_side_stream_takes_the_whole_path(gen, replays_on):
    """The layer's replay is the default stream's: on a side stream the whole path runs (and
    records its own plan there), with the same bits."""
    layer = SparseLinear.from_dense(nn.Linear(512, 512).to("cuda", torch.bfloat16), 0.7)
    x = torch.randn(1, 512, generator=gen).to("cuda", torch.bfloat16)
    side = torch.cuda.Stream()
    with torch.no_grad():
        want = [layer(x) for _ in range(4)][-1]
        assert any(callable(run) for run in _runs(layer))
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            got = [layer(x) for _ in range(4)]
        torch.cuda.current_stream().wait_stream(side)
        got.append(layer(x))
    for g in got:
        assert torch.equal(g, want)


def _values_grad_on_cpu(W, x, g):
    """The values' gradient of sum(g * linear(x, W)) in float64 on the CPU (the reference
    path), and its bound: the same with |x| and |g|."""
    grads = []
    for xs, gs in ((x, g), (x.abs(), g.abs())):
        twin = twin_weight(W)
        values = twin.values.detach().double().cpu().requires_grad_(True)
        cpu = (sk.CSRMatrix(twin.row_offsets.cpu(), twin.column_indices.cpu(), values, W.shape,
                            check=False) if isinstance(W, sk.CSRMatrix)
               else sk.NMMatrix(values, twin.indices.cpu(), W.shape, W.n, W.m, W.vector,
                                W.block))  # fmt: skip
        sk.linear(xs.double().cpu(), cpu).backward(gs.double().cpu())
        grads.append(values.grad)
    return grads


@pytest.mark.gpu
@pytest.mark.parametrize(("kind", "size", "tokens"), [("csr", 384, 512), ("nm", 512, 1)])
def test_training_steps_on_the_layers_path(kind, size, tokens, gen, replays_on):
    """Training steps (SGD between them) through the layer's own path: its output and every
    gradient against float64 for the values each step had."""
    dense = nn.Linear(size, size).to("cuda", torch.bfloat16)
    layer = (SparseLinear.from_dense(dense, 0.7) if kind == "csr"
             else SparseLinear.from_dense(dense, pattern="2:8"))  # fmt: skip
    opt = torch.optim.SGD(layer.parameters(), lr=0.01)
    for _ in range(5):
        x = torch.randn(tokens, size, generator=gen).to("cuda", torch.bfloat16)
        x.requires_grad_(True)
        g = torch.randn(tokens, size, generator=gen).to("cuda", torch.bfloat16)
        W = layer.to_dense().double()
        out = layer(x)
        exact = x.double() @ W.t() + layer.bias.double()
        bound = x.double().abs() @ W.abs().t() + layer.bias.double().abs()
        assert_close(out, exact, bound, torch.bfloat16)
        out.backward(g)
        assert_close(x.grad, g.double() @ W, g.double().abs() @ W.abs(), torch.bfloat16)
        d_values, bound_values = _values_grad_on_cpu(layer.weight, x.detach(), g)
        assert_close(layer.values.grad, d_values, bound_values, torch.bfloat16)
        assert_close(layer.bias.grad, g.double().sum(0), g.double().abs().sum(0), torch.bfloat16)
        opt.step()
        opt.zero_grad()
    assert any(callable(run) for run in _runs(layer))


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_a_layer_off_the_current_device_takes_the_whole_path(gen, replays_on):
    """A layer and x on cuda:1 while cuda:0 is current: the ops launch on x's device, the
    layer keeps no replay (a plan's training path would launch on the current one)."""
    dense = nn.Linear(256, 256).to("cuda:1", torch.bfloat16)
    layer = SparseLinear.from_dense(dense, 0.7)
    with torch.cuda.device(0):
        for _ in range(4):
            x = torch.randn(64, 256, generator=gen).to("cuda:1", torch.bfloat16)
            x.requires_grad_(True)
            out = layer(x)
            W = layer.to_dense().double()
            exact = x.double() @ W.t() + layer.bias.double()
            bound = x.double().abs() @ W.abs().t() + layer.bias.double().abs()
            assert_close(out, exact, bound, torch.bfloat16)
            out.sum().backward()
    assert not _runs(layer)
