"""Cache fills and the CUDA streams that read them.

What the ops keep per weight (a row order, the line form, packed offsets, a cast copy) is filled
by kernels queued on the stream current at its first call. A later call on another stream reads
it with nothing ordering the two: its kernels could run before the fill's. So every fill on a
GPU ends by recording an event on its stream (`filled`), and each launch first makes its stream
wait for the fills of other streams it has not yet waited for (`before_launch`). Fills on the
launching stream are in order already; when no fill happened since the stream last looked, the
check is a counter's compare.

Not while a CUDA graph is captured: torch.cuda.graph synchronizes the device before capturing
(so earlier fills are done), and a captured stream cannot wait on an event recorded outside
it. A fill inside a capture is ordered for the graph's own kernels only: its arrays are
written when the graph replays (call a layer once before capturing it).

Threads: a fill publishes its entry before its event is recorded, so another thread could
find the entry and launch with nothing to wait for. A fill holds `_mutex` from `begin` to
`end` (fills of several threads run one at a time), and a launch while any fill is under way
takes it first: it goes on once that fill's event is recorded.

Not covered: memory. An entry dropped (`sk.nn.release_caches`, the weight's death, a refill
after an update) while another stream still reads it goes back to the allocator of the stream
that filled it, as the weight itself would: free weights only after the streams reading them
are done.
"""

from __future__ import annotations

import threading

import torch

_mutex = threading.RLock()  # held by a fill from begin() to end() (a fill may launch kernels)
_active = 0  # fills under way (changed only under _mutex)
_fills = 0  # fills recorded on GPUs so far
_last: dict[tuple[int, int], tuple[torch.cuda.Event, int]] = {}  # (device, stream) -> its last
# fill's event (re-recorded by each fill) and number
_looked: dict[tuple[int, int], int] = {}  # (device, stream) -> _fills when it last looked
_waited: dict[tuple[int, int, int], int] = {}  # (device, reader, filler) -> fill waited for


def begin() -> None:
    """At a GPU fill's start: other threads' launches wait from now until its end()."""
    global _active
    _mutex.acquire()
    _active += 1


def end(device: torch.device, done: bool) -> None:
    """At a GPU fill's end: its event recorded (when it finished), then launches go on."""
    global _active
    try:
        if done:
            filled(device)
    finally:
        _active -= 1
        _mutex.release()


def filled(device: torch.device) -> None:
    """At a fill's end: mark it on the current stream of `device`."""
    if device.type != "cuda" or torch.cuda.is_current_stream_capturing():
        return
    global _fills
    index = device.index if device.index is not None else torch.cuda.current_device()
    stream = torch.cuda.current_stream(index)
    key = (index, stream.cuda_stream)
    entry = _last.get(key)
    event = torch.cuda.Event() if entry is None else entry[0]
    event.record(stream)  # (re-recorded: a wait already queued keeps the fill it saw)
    _fills += 1
    _last[key] = (event, _fills)


def before_launch(device: torch.device) -> None:
    """Before a launch on `device`'s current stream: order it after every fill on another
    stream of that device that this stream has not waited for yet."""
    if torch.compiler.is_compiling():  # (first: dynamo would guard on the dict, recompile)
        return
    if _active:  # a fill under way, maybe another thread's whose entry this call found
        with _mutex:  # (this thread's own fill: reentrant, no wait)
            pass
    if not _last or device.type != "cuda":
        return
    index = device.index if device.index is not None else torch.cuda.current_device()
    raw = _raw_stream(index)
    fills = _fills  # (a snapshot: a fill made meanwhile is looked at next time)
    if _looked.get((index, raw)) == fills:
        return
    if torch.cuda.is_current_stream_capturing():
        return
    stream = None
    for (filler_device, filler), (event, number) in list(_last.items()):
        if filler_device != index or filler == raw:
            continue
        key = (index, raw, filler)
        if _waited.get(key, 0) < number:
            stream = stream or torch.cuda.current_stream(index)
            stream.wait_event(event)
            _waited[key] = number
    _looked[(index, raw)] = fills


def _raw_stream(index: int) -> int:
    """The current stream's handle on device `index` (torch.cuda.current_stream() builds a
    Stream object: microseconds on every launch)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(index) if raw is not None else torch.cuda.current_stream(index).cuda_stream
