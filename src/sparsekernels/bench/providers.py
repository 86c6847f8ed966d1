"""Who competes on each case: our backends (here) and the peers a PyTorch user has (peers.py).

A provider's `setup(case, inputs)` does every conversion up front and returns a zero-argument
callable, so only the computation itself is timed. `extract` turns what the callable returned
into the tensor that is compared with the float64 answer (outside the timed region).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

import sparsekernels as sk

from ..ops import _dispatch
from .cases import AUTOMATIC_ROUTE, Case, Expected

# On CUDA the reference backend (the CPU path and test oracle) is timed only when nothing else of
# ours can run the case and it is small enough not to stall the run.
REFERENCE_MAX_FLOPS_CUDA = 2**32


def _none(case: Case) -> list[str]:
    return []


def same(out, inputs: dict) -> torch.Tensor:
    """The identity: what the call returned is what is compared."""
    return out


@dataclass(frozen=True)
class Provider:
    name: str
    setup: Callable[[Case, dict], Callable[[], object]]
    reasons: Callable[[Case], list[str]] = _none
    extract: Callable[[object, dict], torch.Tensor] = same
    expected: Callable[[Case, dict], Expected] | None = None  # when it computes something else
    ours: bool = False
    eps: float = 0.0  # rounding unit of its arithmetic when coarser than the dtype's (TF32)
    note: str = ""
    record: Callable[[object], dict] | None = None  # what to keep of the checked call's output
    graph: bool = False  # on CUDA, time as a CUDA graph even when a call takes over 1 ms
    holds: Callable[[dict], torch.nn.Module] | None = None  # e2e: the model whose bytes to count
    strict: bool = False  # past harness.strict_ratio's bound is wrong, not only past check's


@dataclass(frozen=True)
class Entry:
    """A provider and whether it runs on a case: 'ready', 'unsupported' or 'skipped' (and why)."""

    provider: Provider
    status: str = "ready"
    reason: str = ""


# ============================================================================ ours
# Which dispatch ops a public op goes through, and the facts each op's backends look at (as the
# ops build them; every problem carries the common ones so a backend reading one more still works).
def _dispatch_problems(case: Case) -> dict[str, _dispatch.Problem]:
    M, K, N = case.shape

    def problem(**facts) -> _dispatch.Problem:
        common = {"batch": 1, "transpose": False, "density": case.density}
        return _dispatch.Problem(case.device, case.dtype, {**common, **facts})

    if case.op in ("spmm", "linear"):
        if case.format == "nm":
            return {"spmm_nm": problem(n=N, k=K, pattern=case.nm, shape=(M, K))}
        nnz = round(case.density * M * K)  # the route weighs its products (stored x N)
        # a case's weight is a CSRMatrix: spmm prepares the scatter backend's tiled copy
        return {"spmm_csr": problem(n=N, k=K, rows=M, nnz=nnz, b_dim=2, tiled=True)}
    if case.op == "sddmm":
        return {"sddmm_csr": problem(n=N, k=K)}
    if case.op == "softmax":
        return {"sparse_softmax": problem(batch=case.batch)}
    if case.op == "attention":  # shape (Lq, D, Lk); its backends: fused, composed, reference
        return {"sparse_attention": problem(batch=case.batch, d=K, dv=K, n=N, k=K)}
    raise ValueError(f"unknown op {case.op!r}")


def _backend_reasons(op: str, problem: _dispatch.Problem, name: str, forced: bool) -> list[str]:
    if name not in _dispatch.backends(op):
        return [f"{op} has no backend {name!r}"]
    try:
        if forced:  # choose() evaluates the reasons as for backend=name
            _dispatch.choose(op, problem, name)
            return []
        return _dispatch.explain(op, problem)[name]
    except ValueError as error:
        return [str(error)]
    except Exception as error:  # a backend that needs facts we do not pass
        return [f"could not ask {op}/{name}: {type(error).__name__}: {error}"]


# Our own kernels for spmm and linear accumulate in fp32 and round once, so the strict bound
# (harness.strict_ratio) is their gate: in 314 rows of dlmc, llm_linear and nm on an H100 none
# passed it (results/nvidia-h100/2026-12-05/at-55405e1 and at-ad34075). cuBLAS (the dense
# backend's product), cuSPARSE and cuSPARSELt may round partial sums, and did (dense 1 row,
# cuSPARSE 150); SDDMM, softmax and attention were not measured against it.
STRICT_BACKENDS = ("triton", "scatter")
STRICT_OPS = ("spmm", "linear")

# How each op of ours is called on a case's inputs, with a forced backend.
_OUR_CALLS: dict[str, Callable[[dict, str], object]] = {
    "spmm": lambda x, b: sk.spmm(x["A"], x["B"], backend=b),
    "linear": lambda x, b: sk.linear(x["x"], x["A"], backend=b),
    "sddmm": lambda x, b: sk.sddmm(x["X"], x["Y"], x["P"], backend=b),
    "softmax": lambda x, b: sk.sparse_softmax(x["S"], 1.0, backend=b),
    "attention": lambda x, b: sk.sparse_attention(x["q"], x["k"], x["v"], x["P"], backend=b),
}


def routed_backend(case: Case, inputs: dict) -> str | None:
    """The backend a backend=None call of the op takes on these very inputs (the facts the op
    builds from its inputs: the label from the case's shape alone missed SDDMM's tile fill),
    or None where the op is not one of ours or goes past the dispatcher."""
    call = _OUR_CALLS.get(case.op)
    if call is None:
        return None
    taken: list[str] = []
    real = _dispatch.run

    def recording(op: str, backend: str, *args):
        taken.append(backend)
        return real(op, backend, *args)

    _dispatch.run = recording
    try:
        with torch.no_grad():
            call(inputs, None)
    finally:
        _dispatch.run = real
    return taken[0] if taken else None


def _ours_setup(backend: str) -> Callable[[Case, dict], Callable[[], object]]:
    def setup(case: Case, x: dict) -> Callable[[], object]:
        call = _OUR_CALLS[case.op]
        return lambda: call(x, backend)

    return setup


def _values(out, inputs: dict) -> torch.Tensor:
    return out.values


def ours(case: Case, only: set[str] | None = None) -> list[Entry]:
    """One entry per backend every dispatch op of the case has (sk_<backend>)."""
    problems = _dispatch_problems(case)
    names = [
        n
        for n in _dispatch.backends(next(iter(problems)))
        if all(n in _dispatch.backends(op) for op in problems)
    ]
    automatic = [
        [r for op, p in problems.items() for r in _backend_reasons(op, p, name, False)]
        for name in names
    ]
    route = next((name for name, why in zip(names, automatic, strict=True) if not why), None)
    entries = []
    for name, auto_reasons in zip(names, automatic, strict=True):
        label = f"sk_{name}"
        forced = only is not None and label in only
        reasons = (
            [r for op, p in problems.items() for r in _backend_reasons(op, p, name, True)]
            if forced
            else auto_reasons
        )
        provider = Provider(
            label,
            _ours_setup(name),
            ours=True,
            extract=_values if case.op in ("sddmm", "softmax") else same,
            note=AUTOMATIC_ROUTE if name == route else "",
            strict=name in STRICT_BACKENDS and case.op in STRICT_OPS,
        )
        entries.append(Entry(provider, "unsupported" if reasons else "ready", "; ".join(reasons)))
    ready = [e for e in entries if e.status == "ready"]
    others_ready = any(e.provider.name != "sk_reference" for e in ready)
    result = []
    for entry in entries:
        named = only is not None and entry.provider.name in only
        if (
            entry.provider.name == "sk_reference"
            and entry.status == "ready"
            and not named
            and case.device.type == "cuda"
        ):
            flops = _flops_estimate(case)  # from the shape: inputs do not exist yet
            if others_ready or flops > REFERENCE_MAX_FLOPS_CUDA:
                why = "another backend of ours runs it" if others_ready else f"{flops:.2g} FLOPs"
                entry = Entry(
                    entry.provider,
                    "skipped",
                    f"the reference backend is the CPU path and oracle ({why}); "
                    "name sk_reference in --providers to time it",
                )
        result.append(entry)
    return result


def _flops_estimate(case: Case) -> float:
    M, K, N = case.shape
    d = case.density if case.density == case.density else 1.0  # NaN: pattern not drawn yet
    return {
        "spmm": 2 * d * M * K * N,
        "linear": 2 * d * M * K * N,
        "sddmm": 2 * d * M * N * K * case.batch,
        "softmax": 5 * d * M * N * case.batch,
        "attention": 4 * d * M * N * K * case.batch,
    }[case.op]


def providers_for(
    case: Case, only: set[str] | None = None, extra: tuple[Provider, ...] = ()
) -> list[Entry]:
    """Every provider of the case with its status; `only` keeps the named ones ('sk' = ours)."""
    from .peers import peers  # peers build on Provider, defined here

    if case.op.startswith("e2e_"):  # whole models: our sparse model against the dense one
        from .e2e import e2e_providers

        entries, contenders = [], [*e2e_providers(case), *extra]
    else:
        entries, contenders = ours(case, only), [*peers(case), *extra]
    for provider in contenders:
        reasons = provider.reasons(case)
        entries.append(Entry(provider, "unsupported" if reasons else "ready", "; ".join(reasons)))
    if only is not None:
        entries = [
            e for e in entries if e.provider.name in only or ("sk" in only and e.provider.ours)
        ]
    return entries


def known_names() -> list[str]:
    """Provider names the --providers option accepts (ours depend on registered backends)."""
    ops = ["spmm_csr", "spmm_nm", "sddmm_csr", "sparse_softmax"]
    backends = sorted({b for op in ops for b in _dispatch.backends(op)})
    return [
        "sk",
        "sk_model",
        *(f"sk_{b}" for b in backends),
        "dense",
        "dense_tf32",
        "cusparse",
        "torch_csr",
        "torch24",
        "torch_bsr32",
        "torch_coo",
        "sdpa",
        "sdpa_mask",
    ]
