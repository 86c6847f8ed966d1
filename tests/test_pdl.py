"""Programmatic dependent launch on the one-token routes (kernels/_pdl.py): off unless asked for
and on Hopper; on the H200 (gpu) a chain of layers each reading the last one's output gives the
same bits with it as without, eagerly and as a CUDA graph."""

import importlib

import pytest
import torch

import sparsekernels as sk
from sparsekernels.formats._pattern import Pattern
from sparsekernels.kernels import _pdl
from sparsekernels.ops import _launch_plans, _weight_pdl


def test_launch_options_checked():
    assert _pdl.launch_options(0) == {}
    assert _pdl.launch_options(2) == {"launch_pdl": True}
    with pytest.raises(ValueError, match="pdl must be 0, 1 or 2"):
        _pdl.launch_options(3)


def test_off_on_the_cpu_and_unless_asked(monkeypatch):
    monkeypatch.setenv("SPARSEKERNELS_PDL", "2")
    assert _pdl.decode_pdl(torch.device("cpu")) == 0
    monkeypatch.delenv("SPARSEKERNELS_PDL")
    assert _pdl.decode_pdl(torch.device("cpu")) == 0
    monkeypatch.setenv("SPARSEKERNELS_PDL", "yes")
    with pytest.raises(ValueError, match="SPARSEKERNELS_PDL must be 0, 1 or 2"):
        _pdl.decode_pdl(torch.device("cpu"))


def _layers(kind: str, count: int, size: int, sparsity: float, gen: torch.Generator) -> list:
    layers = []
    for _ in range(count):
        w = torch.randn(size, size, generator=gen).to("cuda", torch.bfloat16)
        if kind == "csr":
            mask = sk.prune.magnitude_mask(w.float(), sparsity)
            scale = ((1 - sparsity) * size) ** -0.5
            layers.append(sk.CSRMatrix.from_dense(w * mask * scale, mask=mask))
        else:
            n, m = (int(v) for v in kind[2:].split(":"))
            mask = sk.prune.nm_mask(w.float(), n, m)
            scale = (size * n / m) ** -0.5
            layers.append(sk.NMMatrix.from_dense(w * mask * scale, n, m, mask=mask))
    return layers


@pytest.mark.gpu
@pytest.mark.parametrize(
    "kind, rows, sparsity",
    [("csr", 4096, 0.9), ("csr", 12288, 0.95), ("nm1:8", 16384, 0), ("nm2:8", 4096, 0)],
)
@pytest.mark.parametrize("level", [1, 2])
def test_dependent_chain_same_bits(kind, rows, sparsity, level, gen, monkeypatch):
    """Six square layers (the one-token CSR kernel at 4096 rows, the stream walk at 12288 rows
    of 614 entries, 1:8 at 16384 (the TMA ring kernel) and 2:8 at 4096 (the select or mma.sp
    kernel)), each on the last's output, then the same chain captured and replayed as a CUDA
    graph three times: bitwise what the chain gives with PDL off."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs Hopper")
    layers = _layers(kind, 6, rows, sparsity, gen)
    x = torch.randn(1, rows, generator=gen).to("cuda", torch.bfloat16)

    def chain():
        y = x
        for W in layers:
            y = sk.linear(y, W)
        return y

    monkeypatch.setattr(_launch_plans, "ENABLED", False)  # a plan keeps its first launch
    monkeypatch.setenv("SPARSEKERNELS_PDL", "0")
    want = chain()
    monkeypatch.setenv("SPARSEKERNELS_PDL", str(level))
    assert _pdl.decode_pdl(x.device) == level
    assert torch.equal(chain(), want)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = chain()
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(got, want)


@pytest.fixture
def asked_for_two(monkeypatch):
    """weight_pdl as on a Hopper GPU with SPARSEKERNELS_PDL=2 (the CPU never launches with it)."""
    monkeypatch.setattr(_weight_pdl, "decode_pdl", lambda device: 2)


def test_two_only_for_a_weight_launched_before_unchanged(asked_for_two):
    values, columns = torch.randn(12), torch.arange(12)
    assert _weight_pdl.weight_pdl(values, columns) == 1  # (never launched)
    assert _weight_pdl.weight_pdl(values, columns) == 2
    values.add_(1.0)  # an optimizer step, say: the kernel just before may have written it
    assert _weight_pdl.weight_pdl(values, columns) == 1
    assert _weight_pdl.weight_pdl(values, columns) == 2
    columns.copy_(columns.flip(0))  # the indices too
    assert _weight_pdl.weight_pdl(values, columns) == 1
    assert _weight_pdl.weight_pdl(values, columns) == 2
    values.data = torch.randn(12)  # a swap bumps no version
    assert _weight_pdl.weight_pdl(values, columns) == 1
    assert _weight_pdl.weight_pdl(values, columns) == 2


def test_one_after_a_fused_optimizer_step(asked_for_two):
    """A fused step writes the values and bumps no version: a user's own parameter, launched
    before, would have taken 2 right after the step's kernel. The first launch tracks it."""
    values = torch.nn.Parameter(torch.randn(12))
    columns = torch.arange(12)
    optimizer = torch.optim.Adam([values], lr=0.1, fused=True)
    assert _weight_pdl.weight_pdl(values, columns) == 1
    assert _weight_pdl.weight_pdl(values, columns) == 2
    values.grad = torch.ones(12)
    optimizer.step()
    assert _weight_pdl.weight_pdl(values, columns) == 1
    assert _weight_pdl.weight_pdl(values, columns) == 2


def test_one_after_any_cache_fill(asked_for_two):
    """A fill (here a pattern's row order) may be the kernel just before the launch, whatever
    weight it was for."""
    values = torch.randn(6)
    _weight_pdl.weight_pdl(values)
    assert _weight_pdl.weight_pdl(values) == 2
    Pattern(torch.tensor([0, 2, 6]), torch.tensor([0, 1, 0, 1, 2, 3]), (2, 4)).row_order()
    assert _weight_pdl.weight_pdl(values) == 1
    assert _weight_pdl.weight_pdl(values) == 2


def test_a_fill_counts_for_every_weight_launched_before_it(asked_for_two):
    """A fill, then V's launch (1), then W's: W took 2 (the one signal was V's), two kernels
    after a fill whose writes only a wait guarantees to see. It takes 1 once now."""
    v, w = torch.randn(6), torch.randn(6)
    for values in (v, w, v, w):
        _weight_pdl.weight_pdl(values)
    assert _weight_pdl.weight_pdl(v) == _weight_pdl.weight_pdl(w) == 2
    Pattern(torch.tensor([0, 1]), torch.tensor([0]), (1, 2)).row_order()
    assert _weight_pdl.weight_pdl(v) == 1
    assert _weight_pdl.weight_pdl(w) == 1
    assert _weight_pdl.weight_pdl(v) == _weight_pdl.weight_pdl(w) == 2


def test_one_for_copies_and_inference_tensors(asked_for_two):
    strided = torch.randn(4, 6)[:, 0]  # the route launches on a contiguous copy made just now
    for _ in range(3):
        assert _weight_pdl.weight_pdl(strided) == 1
    with torch.inference_mode():
        made = torch.randn(6)  # no version: a change could not be told
    for _ in range(3):
        assert _weight_pdl.weight_pdl(made) == 1


def test_level_one_and_off_pass_through(monkeypatch):
    values = torch.randn(6)
    for level in (0, 1):
        monkeypatch.setattr(_weight_pdl, "decode_pdl", lambda device, level=level: level)
        assert [_weight_pdl.weight_pdl(values) for _ in range(3)] == [level] * 3


def test_a_first_call_launches_its_one_token_kernel_waiting(asked_for_two, gen, monkeypatch):
    """Through linear: the first one-token call of a CSR weight fills its caches and launches
    with 1, the next with 2; an in-place update of the weight makes the next 1 again."""
    spmm_module = importlib.import_module("sparsekernels.ops.spmm")  # (ops.spmm: the function)
    seen = []
    real = spmm_module.spmm_csr_token.spmm_csr_token

    def recording(**kwargs):
        seen.append(kwargs["pdl"])
        kwargs["pdl"] = 0  # (the interpreter takes no launch_pdl)
        return real(**kwargs)

    monkeypatch.setattr(spmm_module.spmm_csr_token, "spmm_csr_token", recording)
    monkeypatch.setattr(_launch_plans, "ENABLED", False)
    dense = torch.randn(8, 24, generator=gen) * (torch.rand(8, 24, generator=gen) < 0.4)
    W, x = sk.CSRMatrix.from_dense(dense), torch.randn(1, 24, generator=gen)
    want = x @ dense.T  # (before the calls: W.to_dense() would fill a cache between them)
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(sk.linear(x, W, backend="triton"), want)
        W.values.mul_(2.0)
        torch.testing.assert_close(sk.linear(x, W, backend="triton"), 2 * want)
    assert seen == [1, 2, 1]


@pytest.mark.gpu
@pytest.mark.parametrize("kind, rows, sparsity", [("csr", 4096, 0.9), ("nm1:8", 16384, 0)])
def test_pdl_two_on_first_calls_and_after_updates(kind, rows, sparsity, monkeypatch):
    """With SPARSEKERNELS_PDL=2 from the first call: each layer's first call fills its caches
    just before its launch, and an in-place update of the weights comes just before the next.
    Each gives the bits of a twin chain run with PDL off."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs Hopper")
    chains = [_layers(kind, 4, rows, sparsity, torch.Generator().manual_seed(5)) for _ in "ab"]
    x = torch.randn(1, rows, generator=torch.Generator().manual_seed(6)).to("cuda", torch.bfloat16)

    def run(layers):
        y = x
        for W in layers:
            y = sk.linear(y, W)
        return y

    monkeypatch.setattr(_launch_plans, "ENABLED", False)
    for step in range(3):
        monkeypatch.setenv("SPARSEKERNELS_PDL", "0")
        want = run(chains[0])
        monkeypatch.setenv("SPARSEKERNELS_PDL", "2")
        assert torch.equal(run(chains[1]), want), f"step {step}"
        for layers in chains:
            for W in layers:
                W.values.mul_(0.5)  # (exact: the twins stay equal)
