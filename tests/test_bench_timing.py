"""The harness's timer (eager, then a CUDA graph over every input copy, with triton's timers
stubbed: no GPU here), how many copies a case rotates, what a results file records, how cases
are seeded and which backend is labelled the automatic route."""

from __future__ import annotations

import io
import math

import pytest
import torch
from rich.console import Console

import sparsekernels
from sparsekernels.bench import harness, runner
from sparsekernels.bench.cases import weight_case

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    ("eager", "method", "ms"),
    [
        ((26.0, 3.0), "cudagraph", 0.015),  # a transient: the rerun is short, so the graph
        ((26.0, 25.0), "do_bench", 25.0),  # slow both times: the faster eager time, no graph
        ((0.3,), "cudagraph", 0.015),  # short at once: one eager run, then the graph
        ((1.2,), "cudagraph", 0.015),  # host-bound (torch's 2:4 at one token): a graph too
    ],
)
def test_cuda_timer_retimes_a_slow_eager_call(monkeypatch, eager, method, ms):
    """The CUDA path with triton's timers stubbed (no GPU here): a slow eager time is timed
    once more before it is final, and the graph takes over when the rerun is short."""
    import triton.testing

    runs = iter(eager)
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **kw: next(runs))
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", lambda fn, **kw: 0.015)
    monkeypatch.setattr(harness.Timer, "sync", lambda self: None)
    timing = harness.Timer(torch.device("cuda")).time([lambda: None])
    assert (timing.method, timing.ms) == (method, ms)
    assert next(runs, None) is None  # every eager run the case expects was made
    if method == "cudagraph":
        assert timing.eager_ms == eager[-1]


def test_a_graph_replays_every_copy(monkeypatch):
    """do_bench_cudagraph captures ~20 ms of calls: rotated one a call, a few warm copies were
    all it read. It captures one call of every copy a call now (divided back), each copy
    called once before any timing (its fills outside the capture)."""
    import triton.testing

    calls = [0, 0, 0]
    fns = [lambda i=i: calls.__setitem__(i, calls[i] + 1) for i in range(3)]
    seen = []

    def graph(fn, **kw):
        before = list(calls)
        fn()
        seen.append([a - b for a, b in zip(calls, before, strict=True)])
        return 0.03

    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **kw: 0.3)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", graph)
    monkeypatch.setattr(harness.Timer, "sync", lambda self: None)
    timing = harness.Timer(torch.device("cuda")).time(fns)
    assert timing.method == "cudagraph" and timing.ms == pytest.approx(0.01)
    assert seen == [[1, 1, 1]] and calls[1:] == [2, 2]  # (first calls, then the graph's)


def test_copies_overflow_l2_within_a_memory_budget(monkeypatch):
    """Graph timings get no flush: small cases rotate enough copies to overflow L2 twice (at
    most 32 copies left them warm), within MAX_COPY_BYTES."""

    class Props:
        L2_cache_size = 60 * 2**20

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: Props())
    gpu = torch.device("cuda")
    assert harness.copies_for(100_000, gpu) == math.ceil(2 * 60 * 2**20 / 100_000)  # 1259
    assert harness.copies_for(16, gpu) == harness.MAX_COPIES
    assert harness.copies_for(2**29, gpu) == 1  # (two would pass the budget)
    assert harness.copies_for(2**20, gpu) * 2**20 <= harness.MAX_COPY_BYTES


def test_cpu_timer_and_no_rotation_on_cpu():
    timer = harness.Timer(CPU, warmup_ms=1, rep_ms=2)
    timing = timer.time([lambda: torch.ones(8).sum()])
    assert timing.ms > 0 and timing.method == "perf_counter"
    assert harness.copies_for(1024, CPU) == 1


def test_run_metadata_records_code_and_precision():
    """What a figure needs beside it: our version (None from a source checkout before), the
    local changes' hash ('+dirty' alone named no code), torch's precision switches, load."""
    from sparsekernels.bench import metadata

    meta = metadata.run_metadata(CPU, [])
    assert meta["sparsekernels"] == sparsekernels.__version__
    assert "diff_sha256" in meta and len(meta["load_average"]) == 3
    precision = meta["precision"]
    assert precision["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    assert precision["cuda_matmul_allow_tf32"] == torch.backends.cuda.matmul.allow_tf32


def test_a_case_draws_the_same_data_in_a_subset(monkeypatch, tmp_path):
    """Seeds came from a case's place in the run, so --match drew other data (another measured
    density: --compare dropped the case). Each case now seeds from its name."""
    seeds: dict[str, int] = {}

    def record(case, entries, timer, *, seed):
        seeds.setdefault(case.name, seed)
        assert seeds[case.name] == seed
        return []

    monkeypatch.setattr(harness, "run_case", record)
    monkeypatch.setattr(runner, "measure_ceilings", lambda timer, dtypes: {})
    quiet = Console(file=io.StringIO())
    runner.run(runner.RunConfig(["quick"], CPU, out=tmp_path / "a", plots=False), quiet)
    names = sorted(seeds)
    assert len(set(seeds.values())) == len(names) > 2
    last = names[-1]
    subset = runner.RunConfig(["quick"], CPU, out=tmp_path / "b", plots=False, match=(last,))
    runner.run(subset, quiet)  # (asserts inside: the same seed as in the whole run)


def test_the_route_label_is_the_ops_own_choice(monkeypatch):
    """The automatic-route label came from facts of the case's shape alone (SDDMM's tile fill
    was missing: four GPU cases named the dense backend where the op ran Triton). It is now
    the backend a backend=None call takes on the case's inputs."""
    import dataclasses as dc

    from sparsekernels.bench.cases import AUTOMATIC_ROUTE
    from sparsekernels.bench.providers import Entry, providers_for, routed_backend

    case = weight_case("spmm", 48, 64, 8, torch.float32, CPU, sparsity=0.5)
    entries = [e for e in providers_for(case) if e.provider.ours and e.status == "ready"]
    assert len(entries) >= 2
    wrong = next(e for e in entries if AUTOMATIC_ROUTE not in e.provider.note)
    misled = [
        Entry(dc.replace(e.provider, note=AUTOMATIC_ROUTE if e is wrong else ""), e.status)
        for e in entries
    ]
    timer = harness.Timer(CPU, warmup_ms=1, rep_ms=2)
    rows = harness.run_case(case, misled, timer, seed=1)
    routed = [r.provider for r in rows if AUTOMATIC_ROUTE in r.note]
    assert routed == [f"sk_{routed_backend(case, case.build(1))}"] != [wrong.provider.name]
