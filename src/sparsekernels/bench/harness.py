"""The timing harness: check every provider against float64, then time it with cold caches.

CUDA: triton.testing.do_bench medians (it flushes L2 between reps) on rotated input copies;
calls shorter than CUDA_GRAPH_BELOW_MS (nearly all) are re-timed with CUDA graphs, because the
Python launch path (tens to hundreds of microseconds for a custom op that launches Triton, up
to a millisecond for some peers) would otherwise be what the events measure; the eager time
stays in the row as eager_ms. Graphs get no flush: the rotated copies overflow L2 twice. A
longer eager time is timed twice and the faster kept, so one transient does not become it.
CPU: a time.perf_counter median. Triton is imported only when timing on CUDA.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields

import torch

from .cases import AUTOMATIC_ROUTE, OPS, Case, Expected, measured_density
from .providers import Entry, Provider, routed_backend

# Every provider whose eager time is below this is re-timed as a CUDA graph, so that the host
# launch path (our custom ops cost ~0.1-0.2 ms of Python a call on the H200; torch's 2:4 up to
# ~1 ms) sets no figure and every ratio compares graph with graph. It was 1 ms: a peer whose
# host time alone passed it kept its eager time beside our graph (torch's 2:4 at one token,
# 1.0-1.3 ms eager against ~0.1 as a graph: ratios of 54-175x, an audit of the results).
CUDA_GRAPH_BELOW_MS = 20.0
GRAPH_REP_MS = 20.0  # one graph replays ~this long of calls (do_bench_cudagraph's default)
SLOW_CALL_S = 0.5  # a call this slow is timed with a few wall-clock runs, not hundreds
# Rotated input copies, so that small inputs are not served from L2: graphs get no flush, so
# the copies must overflow it by themselves (at most 32 copies left 2219 committed rows of
# small cases warm). Bounded by their bytes, not a count.
MAX_COPIES = 4096
MAX_COPY_BYTES = 2**30
_UNIT_ROUNDOFF = {
    torch.float64: 2.0**-53,
    torch.float32: 2.0**-24,
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
}


@dataclass
class Row:
    """One provider on one case; `speedup_vs[p]` is p's time over this row's time."""

    op: str
    format: str
    pattern: str
    shape: tuple[int, int, int]
    density: float
    dtype: str
    provider: str
    batch: int = 1
    ours: bool = False
    status: str = "ok"  # ok | wrong | error | unsupported | skipped
    error: str = ""
    time_ms: float | None = None
    tflops: float | None = None
    gbps: float | None = None
    method: str = ""  # do_bench | cudagraph | perf_counter | wallclock
    eager_ms: float | None = None  # the do_bench time when a CUDA graph time replaced it
    max_err: float | None = None  # worst |got - want| / tolerance (<= 1 passes)
    strict_err: float | None = None  # the same against fp32 accumulation alone (strict_ratio)
    flops: int = 0
    bytes: int = 0
    suite: str = ""
    source: str = ""
    note: str = ""
    copies: int = 1
    throughput: float | None = None  # items per second (e2e: tokens/s or images/s)
    unit: str = ""  # what `throughput` counts
    peak_mb: float | None = None  # CUDA: peak memory a warm call adds (MiB); CPU: None
    held_mb: float | None = None  # e2e: MiB the model holds for its weights (bench/held.py)
    extra: dict = field(default_factory=dict)  # what a provider records (e2e: loss curves)
    speedup_vs: dict[str, float] = field(default_factory=dict)

    @property
    def case(self) -> str:
        return case_key(self.to_dict())

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shape"] = list(self.shape)
        d["density"] = None if math.isnan(self.density) else self.density  # JSON has no NaN
        for peer, ratio in d.pop("speedup_vs").items():
            d[f"speedup_vs_{peer}"] = ratio
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Row:
        """The inverse of to_dict (a results.jsonl line back into a Row)."""
        names = {f.name for f in fields(cls)}
        row = cls(**{k: v for k, v in d.items() if k in names})
        row.shape = tuple(row.shape)
        row.density = math.nan if row.density is None else row.density
        prefix = "speedup_vs_"
        row.speedup_vs = {k[len(prefix) :]: v for k, v in d.items() if k.startswith(prefix)}
        return row


# ============================================================================ timing
@dataclass(frozen=True)
class Timing:
    ms: float
    method: str
    eager_ms: float | None = None
    note: str = ""


def case_key(row: dict) -> str:
    """What identifies a case across providers and runs (a Row's fields, or a JSONL row)."""
    m, k, n = row["shape"]
    shape = f"{m}x{k}x{n}x{row.get('batch', 1)}"
    # A pattern name ("random") covers several densities: the density tells those cases apart.
    density = row.get("density")
    density = "" if density is None else f"d={density:.6g}"
    fields = (row["op"], row["format"], row["pattern"], shape, density, row["dtype"])
    fields += (row.get("source", ""),)
    return "|".join(str(f) for f in fields)


def _rotate(fns: Sequence[Callable[[], object]]) -> Callable[[], object]:
    if len(fns) == 1:
        return fns[0]
    cycle = itertools.cycle(fns)
    return lambda: next(cycle)()


class Timer:
    """Median time of a callable (or of several input copies called in turn), in ms."""

    def __init__(
        self,
        device: torch.device,
        *,
        warmup_ms: float = 25.0,
        rep_ms: float = 100.0,
        graph_below_ms: float = CUDA_GRAPH_BELOW_MS,
    ):
        self.device, self.warmup_ms, self.rep_ms = torch.device(device), warmup_ms, rep_ms
        self.graph_below_ms = graph_below_ms

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def wall(self, fn: Callable[[], object]) -> float:
        """Seconds of one synchronized call."""
        self.sync()
        start = time.perf_counter()
        fn()
        self.sync()
        return time.perf_counter() - start

    def time(
        self,
        fns: Sequence[Callable[[], object]],
        call_s: float | None = None,
        graph: bool = False,
    ) -> Timing:
        """`graph`: re-time as a CUDA graph whatever the eager time (whole-model inference,
        which a serving system captures: host launch costs then count for neither side)."""
        fn = _rotate(fns)
        if (
            call_s is not None
            and call_s > SLOW_CALL_S
            and not (graph and self.device.type == "cuda")
        ):
            runs = [self.wall(fn) * 1e3 for _ in range(3)]
            return Timing(statistics.median(runs), "wallclock")
        if self.device.type != "cuda":
            return Timing(self._cpu(fn), "perf_counter")
        from triton.testing import do_bench, do_bench_cudagraph

        for each in fns[1:]:  # every copy's first call (its caches' fills) before any timing
            each()  # and outside any capture: a fill captured would rerun in every replay

        def eager() -> float:
            return do_bench(fn, warmup=self.warmup_ms, rep=self.rep_ms, return_mode="median")

        ms = eager()
        if ms >= self.graph_below_ms and not graph:
            # An eager time this long is final (no graph), so a transient stays in the results
            # (bf16 SDDMM at 2%: 2.63 ms once, 15 us as a graph in the rerun; results/
            # nvidia-h200/2026-11-30/at-c6174e6): timed once more, the faster counts, and a
            # fast second run goes on to the graph like any short call.
            ms = min(ms, eager())
            if ms >= self.graph_below_ms:
                return Timing(ms, "do_bench")

        # A graph replays the calls it captured (20 ms of them): one call of every copy each,
        # so that the copies, not a warm few, are what it reads (graphs get no L2 flush).
        def every_copy() -> None:
            for each in fns:
                each()

        try:
            graph_ms = do_bench_cudagraph(every_copy, rep=GRAPH_REP_MS, return_mode="median")
        except Exception as error:  # capture can fail (host syncs, uncapturable libraries)
            self.sync()
            return Timing(ms, "do_bench", note=f"CUDA graph failed: {type(error).__name__}")
        return Timing(graph_ms / len(fns), "cudagraph", eager_ms=ms)

    def _cpu(self, fn: Callable[[], object]) -> float:
        start = time.perf_counter()
        while True:  # warm up: at least one call, then until warmup_ms has passed
            fn()
            if (time.perf_counter() - start) * 1e3 >= self.warmup_ms:
                break
        runs: list[float] = []
        start = time.perf_counter()
        while len(runs) < 3 or (
            (time.perf_counter() - start) * 1e3 < self.rep_ms and len(runs) < 1000
        ):
            t0 = time.perf_counter()
            fn()
            runs.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(runs)


def copies_for(case_bytes: int, device: torch.device) -> int:
    """How many input copies to rotate so that together they overflow the GPU's L2 twice."""
    if device.type != "cuda" or case_bytes <= 0:
        return 1
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 * 2**20)
    most = min(MAX_COPIES, MAX_COPY_BYTES // case_bytes)
    return max(1, min(most, math.ceil(2 * l2 / case_bytes)))


# ============================================================================ correctness
def unit_roundoff(dtype: torch.dtype) -> float:
    return _UNIT_ROUNDOFF.get(dtype, 2.0**-24)


def check(got: object, want: Expected, dtype: torch.dtype, eps: float = 0.0) -> tuple[float, str]:
    """(worst error / tolerance, description); the provider is right when the first is <= 1.

    Tolerance per element: mult * u * (|want| + scale) for rounding in the dtype (u: its unit
    roundoff, or the provider's coarser arithmetic), plus terms * 2^-24 * scale for an fp32
    accumulation of `terms` products. Structural mistakes (a wrong row) exceed it by far.
    """
    if not isinstance(got, torch.Tensor):
        return math.inf, f"returned {type(got).__name__}, not a tensor"
    if tuple(got.shape) != tuple(want.value.shape):
        return math.inf, f"shape {tuple(got.shape)}, expected {tuple(want.value.shape)}"
    got64, err = _abs_error(got, want)
    u = max(unit_roundoff(dtype), eps, want.floor)
    bound = want.mult * u * (want.value.abs() + want.scale) + want.terms * 2.0**-24 * want.scale
    ratio = err / bound.clamp_min(1e-300)
    if ratio.numel() == 0:
        return 0.0, ""
    worst = int(ratio.reshape(-1).argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), ratio.shape))
    value = float(ratio.reshape(-1)[worst])
    g, w = float(got64.reshape(-1)[worst]), float(want.value.reshape(-1)[worst])
    return (
        value,
        f"max |got - want| / tolerance = {value:.3g} at {index}: got {g:.6g}, want {w:.6g}",
    )


def strict_ratio(got: torch.Tensor, want: Expected, dtype: torch.dtype) -> float | None:
    """Worst error over the bound of one rounding to the dtype after an fp32 accumulation:
    mult * u * |want| + terms * 2^-24 * scale, without check's mult * u * scale.

    check's bound lets a zeroed element pass when |want| < 4u * scale (a bf16 output feature
    at one token passed it in about half the tries, fifty-first session); this one catches
    it unless |want| is about 1% of its typical size. The gate of providers marked strict
    (our own kernels: providers.STRICT_BACKENDS); recorded for the others, which may round
    partial sums rightly (cuBLAS's reduced-precision split-K). None where the op rounds
    intermediates by design (floor) or the output is not a tensor of the answer's shape.
    """
    if want.floor or not isinstance(got, torch.Tensor) or got.shape != want.value.shape:
        return None
    if got.numel() == 0:
        return 0.0
    bound = want.mult * unit_roundoff(dtype) * want.value.abs() + want.terms * 2.0**-24 * want.scale
    return float((_abs_error(got, want)[1] / bound.clamp_min(1e-300)).max())


def _abs_error(got: torch.Tensor, want: Expected) -> tuple[torch.Tensor, torch.Tensor]:
    """got in float64 and |got - want|: inf where only one of them is NaN, 0 where both are."""
    got64 = got.detach().to(torch.float64)
    err = (got64 - want.value).abs()
    err = torch.where(torch.isnan(got64) != torch.isnan(want.value), math.inf, err.nan_to_num(0.0))
    return got64, err


# ============================================================================ one case
def _short(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".replace("\n", " ")
    return text if len(text) <= 300 else text[:297] + "..."


def _row(case: Case, provider: Provider, work: tuple[int, int]) -> Row:
    return Row(
        op=case.op,
        format=case.format,
        pattern=case.pattern,
        shape=case.shape,
        density=case.density if math.isnan(case.density) else round(case.density, 6),
        dtype=case.dtype_name,
        provider=provider.name,
        batch=case.batch,
        ours=provider.ours,
        flops=work[0],
        bytes=work[1],
        suite=case.suite,
        source=case.source,
        note=provider.note,
        unit=case.unit,
    )


def _measure(
    row: Row,
    entry: Entry,
    case: Case,
    copies: list[dict],
    timer: Timer,
    expected: Callable[[Provider], Expected],
) -> None:
    """Fill row: check the provider on the first copy, then time it over all copies."""
    provider = entry.provider
    try:
        fns = [provider.setup(case, inputs) for inputs in copies]
        out = fns[0]()
        timer.sync()
        got = provider.extract(out, copies[0])
        want = expected(provider)
        row.max_err, message = check(got, want, case.dtype, provider.eps)
        row.strict_err = None if provider.eps else strict_ratio(got, want, case.dtype)
        if provider.record is not None:
            row.extra = provider.record(out)
        del out, got
        if not row.max_err <= 1.0:
            row.status, row.error = "wrong", message
            return
        if provider.strict and row.strict_err is not None and not row.strict_err <= 1.0:
            row.status = "wrong"
            row.error = (
                f"past the strict bound (fp32 accumulation, one rounding) {row.strict_err:.3g}x"
                f" though within the tolerance ({message})"
            )
            return
        call_s, row.peak_mb = _peak_memory(timer, fns[0])
        timing = timer.time(fns, call_s=call_s, graph=provider.graph)
    except torch.cuda.OutOfMemoryError as error:
        row.status, row.error = "error", _short(error)
        torch.cuda.empty_cache()
        return
    except Exception as error:
        row.status, row.error = "error", _short(error)
        return
    row.time_ms, row.method, row.eager_ms, row.copies = (
        timing.ms,
        timing.method,
        timing.eager_ms,
        len(fns),
    )
    if timing.note:
        row.note = "; ".join(filter(None, [row.note, timing.note]))
    if provider.holds is not None:  # (after the timed calls: every route has built its forms)
        from .held import held_bytes

        row.held_mb = held_bytes(provider.holds(copies[0])) / 2**20
    seconds = timing.ms * 1e-3
    if seconds > 0:
        row.tflops = row.flops / seconds / 1e12 if row.flops else None
        row.gbps = row.bytes / seconds / 1e9 if row.bytes else None
        row.throughput = case.items / seconds if case.items else None


def _peak_memory(timer: Timer, fn: Callable[[], object]) -> tuple[float, float | None]:
    """(seconds of one warm call, MiB it allocates above what was allocated before; None on
    CPU): the memory a call needs beyond its inputs (activations, workspaces, gradients)."""
    if timer.device.type != "cuda":
        return timer.wall(fn), None
    timer.sync()
    before = torch.cuda.memory_allocated(timer.device)
    torch.cuda.reset_peak_memory_stats(timer.device)
    seconds = timer.wall(fn)
    return seconds, (torch.cuda.max_memory_allocated(timer.device) - before) / 2**20


def _route(case: Case, entries: Sequence[Entry], inputs: dict) -> str | None:
    """The backend of ours the op itself takes on `inputs`, where one of the entries is it."""
    if not any(e.provider.ours and e.status == "ready" for e in entries):
        return None  # (the route could be the float64 oracle at full size)
    try:
        route = routed_backend(case, inputs)
    except Exception as error:  # (the label then stays the one from the case's shape)
        if isinstance(error, torch.cuda.OutOfMemoryError):
            torch.cuda.empty_cache()
        return None
    names = {e.provider.name for e in entries}
    return route if f"sk_{route}" in names else None


def run_case(case: Case, entries: Sequence[Entry], timer: Timer, *, seed: int = 0) -> list[Row]:
    """Every provider on one case (fresh random inputs), with speedups between them."""
    try:
        first = case.build(seed)
        case.density = measured_density(first)
        work = OPS[case.op].work(case, first)
        copies = [first] + [
            case.build(seed + i) for i in range(1, copies_for(work[1], case.device))
        ]
    except Exception as error:  # inputs that cannot be drawn (memory): every provider fails
        if isinstance(error, torch.cuda.OutOfMemoryError):
            torch.cuda.empty_cache()
        rows = [_row(case, e.provider, (0, 0)) for e in entries]
        for row in rows:
            row.status, row.error = "error", f"building inputs: {_short(error)}"
        return rows
    answers: dict[object, Expected] = {}

    def expected(provider: Provider) -> Expected:  # float64 answers are costly: once per case
        fn = provider.expected or OPS[case.op].expected
        if fn not in answers:
            answers[fn] = fn(case, first)
        return answers[fn]

    rows = []
    route = _route(case, entries, first)
    with torch.no_grad():
        for entry in entries:
            row = _row(case, entry.provider, work)
            if route is not None and entry.provider.ours:  # (the op's own choice, on its inputs)
                routed = entry.provider.name == f"sk_{route}"
                row.note = AUTOMATIC_ROUTE if routed else row.note.replace(AUTOMATIC_ROUTE, "")
            if entry.status != "ready":
                row.status, row.error = entry.status, entry.reason
            else:
                _measure(row, entry, case, copies, timer, expected)
            rows.append(row)
    add_ratios(rows)
    return rows


def add_ratios(rows: Sequence[Row]) -> None:
    """speedup_vs[peer] = peer's time / this row's time, for every timed pair in one case."""
    timed = [r for r in rows if r.status == "ok" and r.time_ms]
    for row in timed:
        row.speedup_vs = {p.provider: p.time_ms / row.time_ms for p in timed if p is not row}
