"""Benchmark problems: how to draw fresh random inputs, the float64 answer, and the work to do.

A Case describes one problem (op, format, pattern, shape, dtype, device) and builds its inputs
on demand, one independent copy per seed, so the harness can rotate copies through the cache.
`shape` is (M, K, N) with K the reduction: spmm/linear (M, K) @ (K, N); sddmm pattern (M, N)
reducing over K; softmax (rows, 0, cols); attention (Lq, D, Lk). `batch` counts matrices that
share one pattern (attention heads).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..formats import CSRMatrix, NMMatrix
from ..prune import magnitude_mask, nm_mask

# The note on the row of the backend automatic dispatch picks (backend=None): the summary
# reports that one, what a user gets, against the peers.
AUTOMATIC_ROUTE = "the automatic route"

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


@dataclass(frozen=True)
class Expected:
    """The float64 answer plus what its rounding error scales with."""

    value: torch.Tensor
    scale: torch.Tensor  # sum of |terms| behind each element (|A| @ |B|)
    terms: int  # the longest sum behind one element
    mult: float = 4.0  # allowed rounding units of the dtype
    floor: float = 0.0  # smallest rounding unit assumed (ops that round intermediates)


@dataclass
class Case:
    op: str
    format: str
    pattern: str
    shape: tuple[int, int, int]
    density: float
    dtype: torch.dtype
    device: torch.device
    build: Callable[[int], dict] = field(repr=False)
    batch: int = 1
    nm: tuple[int, int, int, int] | None = None  # (n, m, vector, block) for N:M weights
    causal: bool = False  # the pattern is exactly the lower triangle
    suite: str = ""
    source: str = ""  # where the pattern came from (a DLMC file)
    items: int = 0  # e2e: tokens or images one call processes (throughput = items / time)
    unit: str = ""  # e2e: what `items` counts per second ("tokens/s", "images/s")

    @property
    def dtype_name(self) -> str:
        return DTYPE_NAMES.get(self.dtype, str(self.dtype).removeprefix("torch."))

    @property
    def name(self) -> str:
        m, k, n = self.shape
        batch = f"x{self.batch}" if self.batch != 1 else ""
        density = "" if math.isnan(self.density) else f" d={self.density:.3g}"  # not drawn yet
        where = f"{self.pattern} {m}x{k}x{n}{batch}{density}"
        return f"{self.op} {self.format} {where} {self.dtype_name}"


def _generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def _randn(shape, g: torch.Generator, dtype, device) -> torch.Tensor:
    return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(dtype)


def measured_density(inputs: dict) -> float:
    """The density of the sparse operand actually drawn (patterns are only known once built)."""
    if "density" in inputs:  # e2e models state their weights' density
        return float(inputs["density"])
    sparse = inputs["A"] if "A" in inputs else inputs["P"]
    return float(sparse.density)


def pattern_bytes(P: CSRMatrix) -> int:
    """Bytes of a pattern's indices alone (its values are not read)."""
    return P.nbytes - P.values.numel() * P.values.element_size()


# ======================================================================= weights (spmm, linear)
def weight_case(
    op: str,
    M: int,
    K: int,
    N: int,
    dtype: torch.dtype,
    device: torch.device,
    *,
    sparsity: float | None = None,
    nm: tuple[int, int, int, int] | None = None,
    smtx: Callable[[], CSRMatrix] | None = None,
    density: float | None = None,
    suite: str = "",
    source: str = "",
) -> Case:
    """spmm (A @ B, B (K, N)) or linear (x @ A^T, x (N, K)) with one sparse weight A (M, K).

    The weight is unstructured at `sparsity`, N:M (`nm` = (n, m, vector, block)), or a pattern
    loaded by `smtx()` (DLMC) with fresh N(0, 1) values.
    """
    if nm is not None:
        n, m, v, b = nm
        fmt, pattern, density = "nm", nm_name(n, m, v, b), n / m
    elif smtx is not None:
        fmt, pattern = "csr", "dlmc"
    else:
        fmt, pattern, density = "csr", "random", 1.0 - sparsity

    def build(seed: int) -> dict:
        g = _generator(device, seed)
        if smtx is not None:
            base = smtx()
            # Own indices per copy: rotated copies must not share cached index arrays.
            A = CSRMatrix(
                base.row_offsets.clone(),
                base.column_indices.clone(),
                _randn((base.nnz,), g, dtype, device),
                base.shape,
                check=False,
            )
            W = A.to_dense()
        else:
            w = _randn((M, K), g, torch.float32, device)
            mask = nm_mask(w, *nm) if nm is not None else magnitude_mask(w, sparsity)
            W = (w * mask).to(dtype)
            A = (
                NMMatrix.from_dense(W, *nm, mask=mask)
                if nm is not None
                else CSRMatrix.from_dense(W, mask)
            )
        other = _randn((N, K) if op == "linear" else (K, N), g, dtype, device)
        return {"A": A, "W": W, "x" if op == "linear" else "B": other}

    return Case(
        op,
        fmt,
        pattern,
        (M, K, N),
        density,
        dtype,
        device,
        build,
        nm=nm,
        suite=suite,
        source=source,
    )


def nm_name(n: int, m: int, vector: int = 1, block: int = 1) -> str:
    """The pattern's name as NMMatrix.pattern_name writes it: '2:8', '2:8,v=64', '4:16,v=4,b=4'."""
    extra = "".join(f",{k}={v}" for k, v in (("v", vector), ("b", block)) if v != 1)
    return f"{n}:{m}{extra}"


def _weight_expected(case: Case, inputs: dict) -> Expected:
    W = inputs["W"].double()
    other = inputs["x"].double().t() if case.op == "linear" else inputs["B"].double()
    value, scale = W @ other, W.abs() @ other.abs()
    if case.op == "linear":
        value, scale = value.t(), scale.t()
    terms = int((inputs["W"] != 0).sum(1).max()) if W.numel() else 0
    return Expected(value, scale, terms)


def _weight_work(case: Case, inputs: dict) -> tuple[int, int]:
    A = inputs["A"]
    M, K, N = case.shape
    es = case.dtype.itemsize
    return 2 * A.nnz * N, A.nbytes + (K * N + M * N) * es


# ============================================================ patterns (sddmm, softmax, attention)
def attention_mask(kind: str, L: int, device: torch.device, g: torch.Generator) -> torch.Tensor:
    """Boolean (L, L) pattern: 'causal', 'local:W' (causal band of width W), 'strided:W:S'
    (band plus every S-th column, Sparse Transformer's fixed pattern), 'random:D' (density D
    plus the diagonal, so no row is empty)."""
    name, *args = kind.split(":")
    i = torch.arange(L, device=device)
    diff = i[:, None] - i[None, :]
    if name == "causal":
        return diff >= 0
    if name == "local":
        return (diff >= 0) & (diff < int(args[0]))
    if name == "strided":
        width, stride = int(args[0]), int(args[1])
        return (diff >= 0) & ((diff < width) | (i[None, :] % stride == stride - 1))
    if name == "random":
        keep = torch.rand(L, L, generator=g, device=device) < float(args[0])
        return keep | (diff == 0)
    raise ValueError(f"unknown pattern kind {kind!r}")


def _pattern_from_mask(mask: torch.Tensor, dtype: torch.dtype) -> CSRMatrix:
    return CSRMatrix.from_dense(mask.to(dtype), mask)


def _row_length(P: CSRMatrix) -> int:
    return int(P.row_offsets.diff().max()) if P.shape[0] else 0


def sddmm_case(
    M: int,
    K: int,
    N: int,
    density: float,
    dtype,
    device,
    *,
    kind: str = "random",
    batch: int = 1,
    suite: str = "",
) -> Case:
    """(X @ Y^T) at a pattern (M, N): uniform random of the given density, or an attention
    pattern (`kind` as attention_mask takes it; M = N, density drawn with it) shared by `batch`
    heads; X (batch, M, K), Y (batch, N, K) (2-D when batch is 1)."""

    def build(seed: int) -> dict:
        g = _generator(device, seed)
        if kind == "random":
            mask = torch.rand(M, N, generator=g, device=device) < density
        else:
            mask = attention_mask(kind, M, device, g)
        lead = (batch,) if batch > 1 else ()
        return {
            "P": _pattern_from_mask(mask, dtype),
            "X": _randn((*lead, M, K), g, dtype, device),
            "Y": _randn((*lead, N, K), g, dtype, device),
        }

    if kind != "random":
        density = math.nan  # drawn with the pattern
    return Case(
        "sddmm", "csr", kind, (M, K, N), density, dtype, device, build, batch=batch, suite=suite
    )


def _sddmm_expected(case: Case, inputs: dict) -> Expected:
    P, X, Y = inputs["P"], inputs["X"].double(), inputs["Y"].double()
    rows, cols = P.pattern.row_indices(), P.column_indices.long()
    if X.dim() == 2:
        return Expected((X @ Y.t())[rows, cols], (X.abs() @ Y.abs().t())[rows, cols], X.shape[1])
    value = X.new_empty((X.shape[0], P.nnz))
    scale = torch.empty_like(value)
    for b in range(X.shape[0]):  # one float64 product at a time bounds memory
        value[b] = (X[b] @ Y[b].t())[rows, cols]
        scale[b] = (X[b].abs() @ Y[b].abs().t())[rows, cols]
    return Expected(value, scale, case.shape[1])


def _sddmm_work(case: Case, inputs: dict) -> tuple[int, int]:
    P = inputs["P"]
    M, K, N = case.shape
    es, b = case.dtype.itemsize, case.batch
    return 2 * P.nnz * K * b, (M * K + N * K + P.nnz) * es * b + pattern_bytes(P)


def softmax_case(L: int, batch: int, kind: str, dtype, device, *, suite: str = "") -> Case:
    """Row softmax over a batch of score matrices sharing one (L, L) pattern."""

    def build(seed: int) -> dict:
        g = _generator(device, seed)
        P = _pattern_from_mask(attention_mask(kind, L, device, g), dtype)
        values = _randn((batch, P.nnz), g, torch.float32, device).mul_(2.0).to(dtype)
        return {"P": P, "S": P.with_values(values)}

    return Case(
        "softmax",
        "csr",
        kind,
        (L, 0, L),
        math.nan,
        dtype,
        device,
        build,
        batch=batch,
        causal=kind == "causal",
        suite=suite,
    )


def _softmax_expected(case: Case, inputs: dict) -> Expected:
    P, values = inputs["P"], inputs["S"].values.double()
    rows, cols = P.pattern.row_indices(), P.column_indices.long()
    out = torch.empty_like(values)
    for b in range(values.shape[0]):  # one dense float64 matrix at a time bounds memory
        dense = values.new_full(P.shape, float("-inf"))
        dense[rows, cols] = values[b]
        out[b] = torch.softmax(dense, -1)[rows, cols]
    return Expected(out, out.abs(), _row_length(P), floor=2.0**-20)


def _softmax_work(case: Case, inputs: dict) -> tuple[int, int]:
    P = inputs["P"]
    elements = case.batch * P.nnz
    # max, subtract, exp, sum, divide per stored score
    return 5 * elements, 2 * elements * case.dtype.itemsize + pattern_bytes(P)


def attention_case(
    L: int, heads: int, D: int, kind: str, dtype, device, *, batch: int = 1, suite: str = ""
) -> Case:
    """softmax(Q K^T / sqrt(D) at the pattern) V for q, k, v (batch, heads, L, D)."""

    def build(seed: int) -> dict:
        g = _generator(device, seed)
        mask = attention_mask(kind, L, device, g)
        qkv = {name: _randn((batch, heads, L, D), g, dtype, device) for name in "qkv"}
        return {**qkv, "mask": mask, "P": _pattern_from_mask(mask, dtype)}

    return Case(
        "attention",
        "csr",
        kind,
        (L, D, L),
        math.nan,
        dtype,
        device,
        build,
        batch=batch * heads,
        causal=kind == "causal",
        suite=suite,
    )


def attention_expected(case: Case, inputs: dict, *, dense: bool = False) -> Expected:
    """The float64 answer; `dense` ignores the pattern (full attention, what SDPA computes)."""
    q, k, v = (inputs[n].double().flatten(0, 1) for n in "qkv")
    mask = None if dense else inputs["mask"]
    scale = 1.0 / math.sqrt(q.shape[-1])
    out, size = torch.empty_like(q[..., : v.shape[-1]]), torch.empty_like(q[..., : v.shape[-1]])
    for h in range(q.shape[0]):  # one head at a time: (L, L) float64 scores are large
        s = (q[h] @ k[h].t()) * scale
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        p = torch.softmax(s, -1)
        out[h], size[h] = p @ v[h], p @ v[h].abs()
    terms = q.shape[-2] if mask is None else _row_length(inputs["P"])
    shape = inputs["q"].shape[:2] + out.shape[-2:]
    # Scores and probabilities are rounded to the dtype between steps: allow a few units more.
    return Expected(
        out.view(shape), size.view(shape), terms + q.shape[-1], mult=8.0, floor=2.0**-16
    )


def _attention_work(case: Case, inputs: dict) -> tuple[int, int]:
    P = inputs["P"]
    L, D, _ = case.shape
    es = case.dtype.itemsize
    return 4 * case.batch * P.nnz * D, 4 * case.batch * L * D * es + pattern_bytes(P)


# ============================================================================ per-op table
@dataclass(frozen=True)
class OpMath:
    expected: Callable[[Case, dict], Expected]
    work: Callable[[Case, dict], tuple[int, int]]  # (useful FLOPs, fewest bytes moved)


OPS: dict[str, OpMath] = {
    "spmm": OpMath(_weight_expected, _weight_work),
    "linear": OpMath(_weight_expected, _weight_work),
    "sddmm": OpMath(_sddmm_expected, _sddmm_work),
    "softmax": OpMath(_softmax_expected, _softmax_work),
    "attention": OpMath(attention_expected, _attention_work),
}
