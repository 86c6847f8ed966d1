"""_fill_streams.py's bookkeeping on the CPU, with torch.cuda's streams and events faked: which
launch waits for which fill. tests/test_gpu_streams.py runs the real thing on the H200."""

import threading

import pytest
import torch

from sparsekernels import _cache_mode, _fill_streams

GPU = torch.device("cuda", 0)


class FakeStream:
    def __init__(self, handle: int, log: list) -> None:
        self.cuda_stream, self.log = handle, log

    def wait_event(self, event) -> None:
        self.log.append((self.cuda_stream, event.recorded_on))


class FakeEvent:
    def __init__(self) -> None:
        self.recorded_on = None

    def record(self, stream) -> None:
        self.recorded_on = stream.cuda_stream


@pytest.fixture
def streams(monkeypatch):
    """A fake GPU 0 whose current stream the test sets (`streams.current`); `streams.waits`
    lists (waiting stream, stream of the fill waited for)."""

    class State:
        current = 7
        capturing = False
        waits: list = []

    state = State()
    for name, value in [("_fills", 0), ("_last", {}), ("_looked", {}), ("_waited", {})]:
        monkeypatch.setattr(_fill_streams, name, value)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(
        torch.cuda, "current_stream", lambda i=None: FakeStream(state.current, state.waits)
    )
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: state.capturing)
    monkeypatch.setattr(_fill_streams, "_raw_stream", lambda index: state.current)
    return state


def test_a_launch_waits_once_for_fills_on_other_streams(streams):
    _fill_streams.filled(GPU)  # on stream 7
    _fill_streams.before_launch(GPU)  # on 7 too: in order already
    assert streams.waits == []
    streams.current = 9
    for _ in range(3):
        _fill_streams.before_launch(GPU)
    assert streams.waits == [(9, 7)]
    _fill_streams.filled(GPU)  # a fill on 9: 9 reads it in order, 7 must wait for it
    _fill_streams.before_launch(GPU)
    assert streams.waits == [(9, 7)]
    streams.current = 7
    _fill_streams.before_launch(GPU)
    _fill_streams.before_launch(GPU)
    assert streams.waits == [(9, 7), (7, 9)]
    _fill_streams.filled(GPU)  # 7 again: 9 waits for this one too
    streams.current = 9
    _fill_streams.before_launch(GPU)
    assert streams.waits == [(9, 7), (7, 9), (9, 7)]


def test_nothing_while_a_graph_is_captured_or_off_the_gpu(streams):
    streams.capturing = True
    _fill_streams.filled(GPU)  # (ordered by the graph)
    assert _fill_streams._fills == 0
    streams.capturing = False
    _fill_streams.filled(GPU)
    streams.current, streams.capturing = 9, True
    _fill_streams.before_launch(GPU)  # (a captured stream cannot wait on it)
    streams.capturing = False
    _fill_streams.filled(torch.device("cpu"))
    _fill_streams.before_launch(torch.device("cpu"))
    assert streams.waits == []
    _fill_streams.before_launch(GPU)
    assert streams.waits == [(9, 7)]


def test_a_fill_is_marked_when_it_ends_well(monkeypatch):
    seen = []
    monkeypatch.setattr(_fill_streams, "filled", seen.append)
    with _cache_mode._Fill(GPU, None):
        assert _fill_streams._active == 1
    with pytest.raises(RuntimeError), _cache_mode._Fill(GPU, None):
        raise RuntimeError("a failed fill")
    assert seen == [GPU] and _fill_streams._active == 0
    with torch.inference_mode(), _cache_mode.building(torch.empty(2)):
        made = torch.ones(2)
    assert not made.is_inference() and seen == [GPU]  # (the CPU has no streams to mark)
    with _cache_mode.building(torch.empty(2)):  # (on the CPU outside inference mode: nothing)
        pass
    assert len(seen) == 1 and _fill_streams._mutex.acquire(blocking=False)
    _fill_streams._mutex.release()


def test_a_launch_on_another_thread_waits_for_a_fill_under_way(streams, monkeypatch):
    """Thread A fills on stream 7 and publishes its entry before its event is recorded; thread
    B finds the entry and launches on stream 9. B's launch must wait for A's fill to end, then
    queue a wait on its event (before: it saw no fill and waited for nothing)."""
    local = threading.local()
    monkeypatch.setattr(_fill_streams, "_raw_stream", lambda index: local.stream)
    monkeypatch.setattr(
        torch.cuda, "current_stream", lambda i=None: FakeStream(local.stream, streams.waits)
    )
    published, launched, finish = threading.Event(), threading.Event(), threading.Event()

    def fill():
        local.stream = 7
        with _cache_mode._Fill(GPU, None):
            _fill_streams.before_launch(GPU)  # (the fill's own kernels: no wait on itself)
            published.set()
            finish.wait(5)

    def launch():
        local.stream = 9
        published.wait(5)
        _fill_streams.before_launch(GPU)
        launched.set()

    a, b = threading.Thread(target=fill), threading.Thread(target=launch)
    a.start()
    b.start()
    held = not launched.wait(0.3)  # B is held while A's fill is under way
    finish.set()
    a.join(5)
    b.join(5)
    assert held and launched.is_set() and streams.waits == [(9, 7)]


def test_no_recompile_when_fills_happen(monkeypatch):
    """Dynamo traces _dispatch.run (sparse_attention): before_launch read its dict first, so
    each new filling stream recompiled the model. It looks at nothing while tracing now."""
    from torch._dynamo.testing import CompileCounter

    monkeypatch.setattr(_fill_streams, "_last", {})
    counter = CompileCounter()

    @torch.compile(backend=counter, fullgraph=True)
    def launch(x):
        _fill_streams.before_launch(GPU)
        return x * 2

    x = torch.ones(3)
    launch(x)
    for stream in (7, 9, 11):
        _fill_streams._last[(0, stream)] = (None, stream)
        launch(x)
    assert counter.frame_count == 1
