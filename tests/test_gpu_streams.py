"""Kept arrays and CUDA streams (_fill_streams.py): a weight's first call fills its caches on
one stream and a call on another stream reads them; the reader must wait for the fill. The
fill is held back behind a long sleep on its stream, so a reader that did not wait would read
the arrays unfilled. Also split-K's counters while a CUDA graph is captured. On the H200."""

import threading
import time

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, random_csr, random_nm, spmm_bound
from sparsekernels import _cache_mode, _fill_streams
from sparsekernels.kernels import split_k

SLEEP_CYCLES = 2_000_000_000  # ~1 s at the H200's clock: the fill waits behind it


def _want(W, x):
    dense = W.to_dense().double()
    return x.double() @ dense.t(), spmm_bound(x, W.to_dense().t())


def _first_call_behind_a_sleep(call, twin):
    """`call()` on a stream held back by a sleep, then again on another stream at once. First
    `twin()`, the same call on another weight of the same shape: its kernels are compiled
    before the sleep (a compile takes longer than the sleep). (A fill that syncs the host, as
    the line form's does, waits out the sleep: only the silent ones race.)"""
    twin()
    torch.cuda.synchronize()
    filler, reader = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(filler):
        torch.cuda._sleep(SLEEP_CYCLES)
        first = call()
    with torch.cuda.stream(reader):
        second = call()
    torch.cuda.synchronize()
    return first, second


@pytest.mark.gpu
def test_a_launch_waits_for_a_fill_on_another_stream():
    """The mechanism alone: a fill (a copy in `building`) held behind a sleep on one stream, a
    launch's `before_launch` then a read on another stream: the read sees the filled values."""
    src = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    kept = torch.zeros_like(src)
    torch.cuda.synchronize()
    filler, reader = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(filler):
        torch.cuda._sleep(SLEEP_CYCLES)
        with _cache_mode.building(kept):
            kept.copy_(src)
    assert not filler.query()  # (the fill is still queued)
    with torch.cuda.stream(reader):
        _fill_streams.before_launch(kept.device)
        read = kept.clone()
    torch.cuda.synchronize()
    assert torch.equal(read, src)


@pytest.mark.gpu
def test_a_launch_on_another_thread_waits_for_a_fill_under_way():
    """Thread A's fill (held behind a sleep) publishes before its event is recorded; thread B
    finds it then and reads on another stream: B's launch waits for A's fill to end."""
    src = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    kept = torch.zeros_like(src)
    torch.cuda.synchronize()
    filler, reader = torch.cuda.Stream(), torch.cuda.Stream()
    published, read = threading.Event(), []

    def fill():
        with torch.cuda.stream(filler):
            torch.cuda._sleep(SLEEP_CYCLES)
            with _cache_mode.building(kept):
                kept.copy_(src)
                published.set()
                time.sleep(0.2)  # (B looks while this fill is under way)

    def launch():
        published.wait(10)
        with torch.cuda.stream(reader):
            _fill_streams.before_launch(kept.device)
            read.append(kept.clone())

    threads = [threading.Thread(target=fill), threading.Thread(target=launch)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    torch.cuda.synchronize()
    assert read and torch.equal(read[0], src)


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", [(2, 8), (1, 8), (2, 4)])
@pytest.mark.parametrize("tokens", [1, 16])
def test_packed_offsets_filled_on_another_stream(pattern, tokens, gen):
    """N:M at one token reads packed offsets filled at the first call."""
    W, twin = (random_nm(4096, 4096, *pattern, gen, dtype=torch.bfloat16, device="cuda")
               for _ in "ab")  # fmt: skip
    x = torch.randn(tokens, 4096, generator=gen).to("cuda", torch.bfloat16)
    want, bound = _want(W, x)
    first, second = _first_call_behind_a_sleep(lambda: sk.linear(x, W), lambda: sk.linear(x, twin))
    assert_close(first, want, bound, torch.bfloat16)
    assert_close(second, want, bound, torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["csr", "nm"])
def test_autocast_copy_filled_on_another_stream(kind, gen):
    """Under autocast a float32 weight's bf16 copy is filled at its first call."""
    if kind == "csr":
        W, twin = (random_csr(2048, 2048, 0.3, gen, torch.float32, "cuda") for _ in "ab")
    else:
        W, twin = (random_nm(2048, 2048, 2, 8, gen, dtype=torch.float32, device="cuda")
                   for _ in "ab")  # fmt: skip
    x = torch.randn(4, 2048, generator=gen).cuda()
    rounded = x.bfloat16().double()
    dense = W.to_dense().bfloat16().double()  # (autocast rounds both to bf16)
    want, bound = rounded @ dense.t(), spmm_bound(rounded, dense.t())

    def call(weight=W):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return sk.linear(x, weight)

    for got in _first_call_behind_a_sleep(call, lambda: call(twin)):
        assert_close(got, want, bound, torch.bfloat16)


@pytest.mark.gpu
def test_a_stream_waits_once_per_fill(gen, monkeypatch):
    """A reader waits for another stream's fill at its first call after it; with no new fill,
    later calls only compare a counter."""
    W = random_nm(512, 512, 2, 8, gen, dtype=torch.bfloat16, device="cuda")
    x = torch.randn(1, 512, generator=gen).to("cuda", torch.bfloat16)
    filler, reader = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(filler):
        sk.linear(x, W)
    waits = []
    real = torch.cuda.Stream.wait_event
    monkeypatch.setattr(torch.cuda.Stream, "wait_event", lambda s, e: waits.append(1) or real(s, e))
    with torch.cuda.stream(reader):
        counts = []
        for _ in range(3):
            sk.linear(x, W)
            counts.append(len(waits))
    assert counts[0] >= 1 and counts[1] == counts[2] == counts[0]


@pytest.mark.gpu
def test_split_k_counters_of_a_captured_graph_are_its_own(gen, monkeypatch):
    """A captured fused split-K launch gets counters of its own, zeroed in the graph: the kept
    buffer of the capture's stream was shared with every graph captured there and freed under
    them when it grew. A 70% CSR weight at 16 tokens takes the scatter kernel's split."""
    monkeypatch.setattr(split_k, "_COUNTERS", {})
    handed = []
    real = split_k.tile_counters
    monkeypatch.setattr(split_k, "tile_counters", lambda *a: handed.append(1) or real(*a))
    W = random_csr(4096, 4096, 0.3, gen, torch.bfloat16, "cuda")
    x = torch.randn(16, 4096, generator=gen).to("cuda", torch.bfloat16)
    want, bound = _want(W, x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # (warm-up: the fills and plans outside the capture)
            sk.linear(x, W)
    torch.cuda.current_stream().wait_stream(side)
    kept = dict(split_k._COUNTERS)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = sk.linear(x, W)
    assert handed, "no split-K launch: the test checks nothing"
    assert set(split_k._COUNTERS) == set(kept)  # (none kept for the capture's stream)
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert_close(got, want, bound, torch.bfloat16)
