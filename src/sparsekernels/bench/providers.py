"""Who competes on each case: our backends and the peers a PyTorch user has today.

A provider's `setup(case, inputs)` does every conversion up front and returns a zero-argument
callable, so only the computation itself is timed. `extract` turns what the callable returned
into the tensor that is compared with the float64 answer (outside the timed region).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import sparsekernels as sk

from ..ops import _dispatch
from .cases import Case, Expected, attention_expected

# On CUDA the reference backend (the CPU path and test oracle) is timed only when nothing else of
# ours can run the case and it is small enough not to stall the run.
REFERENCE_MAX_FLOPS_CUDA = 2**32
BSR_BLOCK = 32  # torch's Triton BSR kernels are tuned for blocks of 16-128


def _none(case: Case) -> list[str]:
    return []


def _same(out, inputs: dict) -> torch.Tensor:
    return out


@dataclass(frozen=True)
class Provider:
    name: str
    setup: Callable[[Case, dict], Callable[[], object]]
    reasons: Callable[[Case], list[str]] = _none
    extract: Callable[[object, dict], torch.Tensor] = _same
    expected: Callable[[Case, dict], Expected] | None = None  # when it computes something else
    ours: bool = False
    eps: float = 0.0  # rounding unit of its arithmetic when coarser than the dtype's (TF32)
    note: str = ""


@dataclass(frozen=True)
class Entry:
    """A provider and whether it runs on a case: 'ready', 'unsupported' or 'skipped' (and why)."""

    provider: Provider
    status: str = "ready"
    reason: str = ""


# ============================================================================ ours
# Which dispatch ops a public op goes through, and the facts each op's backends look at.
def _dispatch_problems(case: Case) -> dict[str, _dispatch.Problem]:
    M, K, N = case.shape

    def problem(**facts) -> _dispatch.Problem:
        return _dispatch.Problem(case.device, case.dtype, facts)

    if case.op in ("spmm", "linear"):
        if case.format == "nm":
            return {"spmm_nm": problem(n=N, pattern=case.nm)}
        return {"spmm_csr": problem(n=N, batch=1)}
    if case.op == "sddmm":
        return {"sddmm_csr": problem(k=K)}
    if case.op == "softmax":
        return {"sparse_softmax": problem()}
    if case.op == "attention":
        return {
            "sddmm_csr": problem(k=K),
            "sparse_softmax": problem(),
            "spmm_csr": problem(n=K, batch=case.batch),
        }
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


def _ours_setup(backend: str) -> Callable[[Case, dict], Callable[[], object]]:
    def setup(case: Case, x: dict) -> Callable[[], object]:
        if case.op == "spmm":
            return lambda: sk.spmm(x["A"], x["B"], backend=backend)
        if case.op == "linear":
            return lambda: sk.linear(x["x"], x["A"], backend=backend)
        if case.op == "sddmm":
            return lambda: sk.sddmm(x["X"], x["Y"], x["P"], backend=backend)
        if case.op == "softmax":
            return lambda: sk.sparse_softmax(x["S"], 1.0, backend=backend)
        return lambda: sk.sparse_attention(x["q"], x["k"], x["v"], x["P"], backend=backend)

    return setup


def _values(out, inputs: dict) -> torch.Tensor:
    return out.values


def ours(case: Case, only: set[str] | None = None) -> list[Entry]:
    """One entry per backend every dispatch op of the case has (sk_<backend>)."""
    problems = _dispatch_problems(case)
    names = [n for n in _dispatch.backends(next(iter(problems))) if
             all(n in _dispatch.backends(op) for op in problems)]
    entries = []
    for name in names:
        label = f"sk_{name}"
        forced = only is not None and label in only
        reasons = [r for op, p in problems.items() for r in _backend_reasons(op, p, name, forced)]
        provider = Provider(label, _ours_setup(name), ours=True,
                            extract=_values if case.op in ("sddmm", "softmax") else _same)
        entries.append(Entry(provider, "unsupported" if reasons else "ready", "; ".join(reasons)))
    ready = [e for e in entries if e.status == "ready"]
    others_ready = any(e.provider.name != "sk_reference" for e in ready)
    result = []
    for entry in entries:
        named = only is not None and entry.provider.name in only
        if (entry.provider.name == "sk_reference" and entry.status == "ready" and not named
                and case.device.type == "cuda"):
            from .cases import OPS  # noqa: PLC0415 (avoid a cycle at import)

            del OPS  # the work is estimated from the shape below, before inputs exist
            flops = _flops_estimate(case)
            if others_ready or flops > REFERENCE_MAX_FLOPS_CUDA:
                why = "another backend of ours runs it" if others_ready else f"{flops:.2g} FLOPs"
                entry = Entry(entry.provider, "skipped",
                              f"the reference backend is the CPU path and oracle ({why}); "
                              "name sk_reference in --providers to time it")
        result.append(entry)
    return result


def _flops_estimate(case: Case) -> float:
    M, K, N = case.shape
    return {
        "spmm": 2 * case.density * M * K * N,
        "linear": 2 * case.density * M * K * N,
        "sddmm": 2 * case.density * M * N * K,
        "softmax": 5 * case.density * M * N * case.batch,
        "attention": 4 * case.density * M * N * K * case.batch,
    }[case.op]


# ============================================================================ peers
def _cuda(case: Case) -> list[str]:
    return [] if case.device.type == "cuda" else ["needs CUDA"]


def _half(case: Case) -> list[str]:
    ok = case.dtype in (torch.float16, torch.bfloat16)
    return [] if ok else [f"takes fp16/bf16, not {case.dtype_name}"]


def _tf32(allow: bool, fn: Callable[[], object]) -> Callable[[], object]:
    """Run fn with cuBLAS TF32 set to `allow`, restoring the caller's setting after."""
    flags = torch.backends.cuda.matmul

    def call():
        before = flags.allow_tf32
        flags.allow_tf32 = allow
        try:
            return fn()
        finally:
            flags.allow_tf32 = before

    return call


def _matmul(case: Case, x: dict) -> Callable[[], object]:
    if case.op == "spmm":
        W, B = x["W"], x["B"]
        return lambda: W @ B
    if case.op == "linear":
        xx, W = x["x"], x["W"]
        return lambda: F.linear(xx, W)
    X, Y = x["X"], x["Y"]
    return lambda: X @ Y.t()


def _at_pattern(out, x: dict) -> torch.Tensor:
    P = x["P"]
    return out[..., P.pattern.row_indices(), P.column_indices.long()]


def _dense_setup(allow_tf32: bool | None):
    def setup(case: Case, x: dict) -> Callable[[], object]:
        if case.op == "softmax":
            P, values = x["P"], x["S"].values
            dense = values.new_full((case.batch, *P.shape), float("-inf"))
            dense[:, P.pattern.row_indices(), P.column_indices.long()] = values
            return lambda: torch.softmax(dense, -1)
        fn = _matmul(case, x)
        if case.device.type == "cuda" and case.dtype == torch.float32:
            fn = _tf32(bool(allow_tf32), fn)
        return fn

    return setup


def _dense(case: Case) -> list[Provider]:
    extract = _at_pattern if case.op in ("sddmm", "softmax") else _same
    providers = [Provider("dense", _dense_setup(False), extract=extract)]
    if case.device.type == "cuda" and case.dtype == torch.float32 and case.op != "softmax":
        providers.append(Provider("dense_tf32", _dense_setup(True), extract=extract, eps=2.0**-11))
    return providers


def _csr_weight(x: dict) -> torch.Tensor:
    A = x["A"]
    return (A.to_csr() if isinstance(A, sk.NMMatrix) else A).to_torch()


def _torch_csr_setup(case: Case, x: dict) -> Callable[[], object]:
    if case.op == "spmm":
        T, B = _csr_weight(x), x["B"]
        return lambda: T @ B
    if case.op == "linear":
        T, xt = _csr_weight(x), x["x"].t()
        return lambda: (T @ xt).t()
    P, X, Y = x["P"].to_torch(), x["X"], x["Y"]  # sddmm
    return lambda: torch.sparse.sampled_addmm(P, X, Y.t(), beta=0.0)


def _torch_csr_reasons(case: Case) -> list[str]:
    fp32 = case.dtype == torch.float32
    if case.device.type == "cpu" and not fp32:
        return ["torch's CPU sparse CSR matmul (MKL) has no fp16/bf16 kernel"]
    if case.op == "sddmm" and not fp32:
        return ["torch.sparse.sampled_addmm (cuSPARSE SDDMM) takes fp32/fp64 only"]
    return []


def _sparse_values(out, x: dict) -> torch.Tensor:
    return out.values()


def _semi_ok(case: Case) -> list[str]:
    reasons = _cuda(case) + _half(case)
    n, m, _, _ = case.nm or (0, 0, 1, 1)
    # Every aligned group of 4 must hold at most 2: true for n <= 2 when groups tile by 4.
    if case.nm is None or n > 2 or (m % 4 and 4 % m) or (m < 4 and n * 4 // m > 2):
        reasons.append("needs a weight with at most 2 of every 4 (an N:M pattern with n <= 2)")
    M, K, _ = case.shape
    if M % 32 or K % 64:
        reasons.append(f"weight {M}x{K} must be a multiple of 32x64")
    return reasons


def _semi_setup(case: Case, x: dict) -> Callable[[], object]:
    Ws = torch.sparse.to_sparse_semi_structured(x["W"])
    if case.op == "linear":
        xx = x["x"]
        return lambda: F.linear(xx, Ws)
    B = x["B"]
    return lambda: torch.mm(Ws, B)


def _bsr_reasons(case: Case) -> list[str]:
    reasons = _cuda(case) + _half(case)
    M, K, N = case.shape
    if M % BSR_BLOCK or K % BSR_BLOCK:
        reasons.append(f"weight {M}x{K} must divide into {BSR_BLOCK}x{BSR_BLOCK} blocks")
    if N % 16:
        reasons.append(f"bsr_dense_mm needs N divisible by 16, got {N}")
    return reasons


def _bsr_setup(case: Case, x: dict) -> Callable[[], object]:
    from torch.sparse._triton_ops import bsr_dense_mm

    if bsr_dense_mm is None:
        raise RuntimeError("torch.sparse._triton_ops.bsr_dense_mm is unavailable (no Triton)")
    Wb, B = x["W"].to_sparse_bsr((BSR_BLOCK, BSR_BLOCK)), x["B"]
    return lambda: bsr_dense_mm(Wb, B)


def _coo_setup(case: Case, x: dict) -> Callable[[], object]:
    P, values = x["P"], x["S"].values
    batch = torch.arange(case.batch, device=values.device).repeat_interleave(P.nnz)
    rows = P.pattern.row_indices().repeat(case.batch)
    cols = P.column_indices.long().repeat(case.batch)
    S = torch.sparse_coo_tensor(
        torch.stack([batch, rows, cols]), values.reshape(-1), (case.batch, *P.shape)
    ).coalesce()
    return lambda: torch.sparse.softmax(S, -1)


def _coo_values(out, x: dict) -> torch.Tensor:
    return out.coalesce().values().view(x["S"].values.shape)


def _sdpa_setup(masked: bool):
    def setup(case: Case, x: dict) -> Callable[[], object]:
        q, k, v = x["q"], x["k"], x["v"]
        if masked:
            mask = x["mask"]
            return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=case.causal)

    return setup


def _sdpa_expected(case: Case, x: dict) -> Expected:
    return attention_expected(case, x, dense=not case.causal)


def peers(case: Case) -> list[Provider]:
    csr_name = "cusparse" if case.device.type == "cuda" else "torch_csr"
    csr = Provider(csr_name, _torch_csr_setup, _torch_csr_reasons,
                   extract=_sparse_values if case.op == "sddmm" else _same)
    if case.op in ("spmm", "linear"):
        found = [*_dense(case), csr, Provider("torch24", _semi_setup, _semi_ok,
                                              note="to_sparse_semi_structured (cuSPARSELt or CUTLASS)")]
        if case.op == "spmm":
            found.append(Provider(f"torch_bsr{BSR_BLOCK}", _bsr_setup, _bsr_reasons))
        return found
    if case.op == "sddmm":
        return [*_dense(case), csr]
    if case.op == "softmax":
        return [*_dense(case), Provider("torch_coo", _coo_setup, extract=_coo_values)]
    if case.op == "attention":
        note = "" if case.causal else "full dense attention: ignores the pattern"
        return [
            Provider("sdpa", _sdpa_setup(False), expected=_sdpa_expected, note=note),
            Provider("sdpa_mask", _sdpa_setup(True)),
        ]
    raise ValueError(f"unknown op {case.op!r}")


def providers_for(case: Case, only: set[str] | None = None,
                  extra: tuple[Provider, ...] = ()) -> list[Entry]:
    """Every provider of the case with its status; `only` keeps the named ones ('sk' = ours)."""
    entries = ours(case, only)
    for provider in [*peers(case), *extra]:
        reasons = provider.reasons(case)
        entries.append(Entry(provider, "unsupported" if reasons else "ready", "; ".join(reasons)))
    if only is not None:
        entries = [e for e in entries if e.provider.name in only or ("sk" in only and e.provider.ours)]
    return entries


def known_names() -> list[str]:
    """Provider names the --providers option accepts (ours depend on registered backends)."""
    ops = ["spmm_csr", "spmm_nm", "sddmm_csr", "sparse_softmax"]
    backends = sorted({b for op in ops for b in _dispatch.backends(op)})
    return ["sk", *(f"sk_{b}" for b in backends), "dense", "dense_tf32", "cusparse", "torch_csr",
            "torch24", f"torch_bsr{BSR_BLOCK}", "torch_coo", "sdpa", "sdpa_mask"]
