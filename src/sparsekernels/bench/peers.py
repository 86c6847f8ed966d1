"""The peers: what a PyTorch user runs today for each op, dense and sparse.

Dense matmul in the same dtype (fp32 both strict and TF32), cuSPARSE through torch sparse CSR,
2:4 semi-structured (cuSPARSELt), torch's Triton BSR, COO softmax, and SDPA for attention.
On CPU the same torch calls run torch's CPU kernels.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

import sparsekernels as sk

from .cases import Case, Expected, attention_expected
from .providers import Provider, same

BSR_BLOCK = 32  # torch's Triton BSR kernels are tuned for blocks of 16-128


def _cuda(case: Case) -> list[str]:
    return [] if case.device.type == "cuda" else ["needs CUDA"]


def _half(case: Case) -> list[str]:
    ok = case.dtype in (torch.float16, torch.bfloat16)
    return [] if ok else [f"takes fp16/bf16, not {case.dtype_name}"]


def set_tf32(allow: bool) -> Callable[[], None]:
    """Set cuBLAS TF32 for fp32 matmuls; returns the function that restores the caller's setting.

    torch >= 2.9 has `fp32_precision`, and reading the legacy `allow_tf32` raises once the new
    API was used, so the new one is preferred; older torch has only `allow_tf32`.
    """
    flags = torch.backends.cuda.matmul
    try:
        before = flags.fp32_precision
    except AttributeError:
        before = flags.allow_tf32
        flags.allow_tf32 = allow
        return lambda: setattr(flags, "allow_tf32", before)
    flags.fp32_precision = "tf32" if allow else "ieee"
    return lambda: setattr(flags, "fp32_precision", before)


def _tf32(allow: bool, fn: Callable[[], object]) -> Callable[[], object]:
    """fn run with TF32 set to `allow` (set per call: CUDA graphs capture it at capture time)."""

    def call():
        restore = set_tf32(allow)
        try:
            return fn()
        finally:
            restore()

    return call


def _matmul(case: Case, x: dict) -> Callable[[], object]:
    if case.op == "spmm":
        W, B = x["W"], x["B"]
        return lambda: W @ B
    if case.op == "linear":
        xx, W = x["x"], x["W"]
        return lambda: F.linear(xx, W)
    X, Y = x["X"], x["Y"]
    return lambda: X @ Y.transpose(-1, -2)


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
    extract = _at_pattern if case.op in ("sddmm", "softmax") else same
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
    if case.op == "linear":  # x^T made row-major in the call: cuSPARSE's layout (a strided
        T, xt = _csr_weight(x), x["x"].t()  # one ran 1.4-2x slower at 4-16 tokens)
        return lambda: (T @ xt.contiguous()).t()
    P, X, Y = x["P"].to_torch(), x["X"], x["Y"]  # sddmm
    return lambda: torch.sparse.sampled_addmm(P, X, Y.t(), beta=0.0)


def _torch_csr_reasons(case: Case) -> list[str]:
    fp32 = case.dtype == torch.float32
    if case.device.type == "cpu" and not fp32:
        return ["torch's CPU sparse CSR matmul (MKL) has no fp16/bf16 kernel"]
    if case.op == "sddmm" and not fp32:
        return ["torch.sparse.sampled_addmm (cuSPARSE SDDMM) takes fp32/fp64 only"]
    if case.op == "sddmm" and case.batch > 1:
        return ["torch.sparse.sampled_addmm takes one pattern per matrix (a batched CSR)"]
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
    csr = Provider(
        csr_name,
        _torch_csr_setup,
        _torch_csr_reasons,
        extract=_sparse_values if case.op == "sddmm" else same,
    )
    if case.op in ("spmm", "linear"):
        found = [
            *_dense(case),
            csr,
            Provider(
                "torch24",
                _semi_setup,
                _semi_ok,
                note="to_sparse_semi_structured (cuSPARSELt or CUTLASS)",
            ),
        ]
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
