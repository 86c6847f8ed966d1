"""Launch plans (ops/_launch_plans.py): a repeat eager linear replays the Triton launches its
backend made, with this call's x, bias and a new output. On the CPU: the guard that refuses a
backend doing device work other than Triton launches, and that nothing records off CUDA. On the
GPU: every replayed call gives the same bits as a weight without plans, new x each call (some
at other addresses, one misaligned), the outputs independent, and side streams untouched."""

import pytest
import torch

import sparsekernels as sk
from _helpers import random_csr, random_nm
from sparsekernels.ops import _launch_plans


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
    """(off by default until these tests have run on the H200)"""
    monkeypatch.setattr(_launch_plans, "ENABLED", True)


def _twin(W):
    """The same weight in new tensors: no plan of W's applies to it."""
    if isinstance(W, sk.CSRMatrix):
        return sk.CSRMatrix(W.row_offsets.clone(), W.column_indices.clone(), W.values.clone(),
                            W.shape, check=False)  # fmt: skip
    return sk.NMMatrix(W.values.clone(), W.indices.clone(), W.shape, W.n, W.m, W.vector, W.block)


CASES = [  # (weight, tokens, a replay is expected)
    ("csr 70% 512", 1, True),
    ("csr 70% 512", 4, None),
    ("csr 90% 4096", 12, None),
    ("nm 2:8 512", 1, True),
    ("nm 2:4 1024", 8, None),
    ("nm 1:8 2048", 16, None),
    ("nm 2:8 v64 512", 16, None),
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
def test_replayed_calls_give_the_backends_bits(name, tokens, replays, with_bias, gen):
    W = _weight(name, gen)
    K = W.shape[1]
    bias = torch.randn(W.shape[0], generator=gen, device="cuda").bfloat16() if with_bias else None
    before = dict(_launch_plans.stats)
    results = []
    with torch.no_grad():
        for call in range(7):
            # x's rows from another place each call (its shape and strides kept): 16-byte steps,
            # and at call 5 two bytes off, which a replay must leave to the backend
            flat = torch.randn((tokens + 4) * K, generator=gen, device="cuda").bfloat16()
            start = 8 * (call % 3) + (1 if call == 5 else 0)
            x = flat[start : start + tokens * K].view(tokens, K)
            got = sk.linear(x, W, bias)
            want = sk.linear(x, _twin(W), bias)  # a fresh weight: the whole path
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
def test_a_side_stream_takes_the_backend(gen):
    W = _weight("csr 70% 512", gen)
    x = torch.randn(1, 512, generator=gen, device="cuda").bfloat16()
    with torch.no_grad():
        for _ in range(3):
            want = sk.linear(x, W)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        before = _launch_plans.stats["replayed"]
        with torch.cuda.stream(side):
            got = sk.linear(x, W)
        torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(got, want) and _launch_plans.stats["replayed"] == before


@pytest.mark.gpu
def test_a_changed_pattern_takes_the_backend(gen):
    """An in-place change to the weight's indices (not in the eager plan's signature) ends the
    replays: the plan's pointers may hold what the old indices gave (packed words)."""
    W = _weight("nm 2:8 512", gen)
    x = torch.randn(1, 512, generator=gen, device="cuda").bfloat16()
    with torch.no_grad():
        for _ in range(4):
            sk.linear(x, W)
        W.indices.add_(0)  # the same offsets, a new version
        before = _launch_plans.stats["replayed"]
        got = sk.linear(x, W)
        want = sk.linear(x, _twin(W))
    assert torch.equal(got, want) and _launch_plans.stats["replayed"] == before
