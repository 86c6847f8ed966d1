"""Named suites: each turns a context (device, dtypes, sizes) into a list of cases.

Cases are cheap descriptions; their tensors are drawn only when the harness runs them.
On CPU every suite shrinks to sizes the reference path runs in seconds.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import torch

from ..formats import load_smtx
from . import dlmc
from .cases import Case, attention_case, sddmm_case, softmax_case, weight_case

LLM_SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]  # (out, in): attention, MLP up, down
DECODE_N, PREFILL_N = (1, 4, 8, 16, 32, 64), (2048,)  # decode: one to a few dozen sequences
# Issue 4's larger sizes, a suite of their own (minutes of cuSPARSE and CUDA-core kernels)
LARGE_SHAPES, LARGE_N = [(28672, 8192)], (1, 8, 16, 2048, 8192)
LLM_SPARSITY = (0.5, 0.7, 0.9)
LLM_NM = [(2, 4), (2, 8), (1, 8)]
# nmSPARSE's patterns: element-wise, vector-wise (VW4/32/64) and block-wise (BW4x4, BW64x64).
NM_RATIOS = [(2, 4), (1, 4), (2, 8), (1, 8), (2, 16), (1, 16)]
NM_VECTORS = (1, 4, 32, 64)
NM_BLOCKED = [(4, 8, 4, 4), (4, 16, 4, 4), (4, 32, 4, 4), (64, 128, 64, 64), (64, 256, 64, 64)]
ATTENTION_KINDS = ("causal", "local:256", "strided:128:128", "random:0.1")
# nmSPARSE's evaluation (MLSys 2023): weights (K in, N out) at batch 1 (SpMV) to 4096 (SpMM)
NMSPARSE_SHAPES = [(1024, 1024), (4096, 4096), (8192, 8192), (1024, 4096), (4096, 1024),
                   (5120, 20480), (20480, 5120)]  # fmt: skip
NMSPARSE_BATCH = (1, 256, 1024, 4096)
# Issue 4's targets by dtype: in half precision element-wise and vector-wise v = 64 (against
# dense and torch's 2:4); in strict fp32 vector-wise v = 32 at 8:32 and 4:32 (nmSPARSE's VW32:
# ~2x and ~4.3x dense on the H200) and element-wise from 75% sparsity.
NMSPARSE_HALF = [(2, 4, 1, 1), (2, 8, 1, 1), (1, 8, 1, 1), (2, 4, 64, 1), (2, 8, 64, 1),
                 (1, 8, 64, 1), (16, 32, 64, 1)]  # fmt: skip
NMSPARSE_FP32 = [(2, 8, 1, 1), (1, 8, 1, 1), (8, 32, 32, 1), (4, 32, 32, 1)]
NMSPARSE_FP32_BATCH = (1, 4096)
# Few-token N:M where the decode kernel's 8-row step spilled (336-2161 us at 9-16 tokens,
# benchmarks/NOTES_FIFTYSIXTH_TO_SIXTIETH.md, sixtieth session): vector-wise rows of 8+ (4:8,
# 16:32, 2:16), blocks of 4 columns in 8-row vectors and of 64 in 64-row ones, at the tokens
# around the routes' edges (the nm suite samples 1, 8 and 16 only).
NM_FEW_PATTERNS = [(4, 8, 8, 1), (4, 8, 16, 1), (4, 8, 64, 1), (16, 32, 64, 1), (2, 16, 8, 1),
                   (4, 8, 8, 4), (4, 16, 8, 4), (64, 128, 64, 64)]  # fmt: skip
NM_FEW_FP32 = [(2, 8, 8, 1), (4, 8, 64, 1), (8, 32, 64, 1), (1, 8, 4, 1), (2, 8, 1, 1)]
NM_FEW_TOKENS = (2, 4, 8, 12, 16, 24)


@dataclass(frozen=True)
class Context:
    device: torch.device
    dtypes: tuple[torch.dtype, ...] | None = None  # None: each suite's default
    dlmc: Path | None = None
    limit: int | None = None  # DLMC: matrices per model; other suites: cases (evenly spread)

    @property
    def cpu(self) -> bool:
        return self.device.type != "cuda"

    def pick(self, *defaults: torch.dtype) -> tuple[torch.dtype, ...]:
        """The user's dtypes, else the suite's defaults on CUDA and fp32 on CPU."""
        if self.dtypes:
            return self.dtypes
        return (torch.float32,) if self.cpu else defaults


SUITES: dict[str, Callable[[Context], list[Case]]] = {}


def suite(name: str):
    def register(fn: Callable[[Context], list[Case]]):
        SUITES[name] = fn
        return fn

    return register


def build(names: list[str], ctx: Context) -> list[Case]:
    cases = []
    for name in names:
        if name not in SUITES:
            raise ValueError(f"unknown suite {name!r}; choose from {sorted(SUITES)}")
        found = SUITES[name](ctx)
        if ctx.limit is not None and name != "dlmc":  # dlmc applies it to matrices itself
            found = spread(found, ctx.limit)
        for case in found:
            case.suite = name
            cases.append(case)
    return cases


def spread(items: list, limit: int) -> list:
    """At most `limit` items, evenly spaced (first and last kept), in their order."""
    if limit >= len(items):
        return items
    if limit == 1:
        return items[:1]
    return [items[round(i * (len(items) - 1) / (limit - 1))] for i in range(limit)]


@suite("quick")
def quick(ctx: Context) -> list[Case]:
    """Every op once: a pass under 3 minutes on an H200, seconds on a CPU."""
    d = ctx.device
    s = 16 if ctx.cpu else 1  # CPU shapes are 1/16 of the GPU ones (at least 64)
    big, mid = max(64, 4096 // s), max(64, 2048 // s)
    cases = []
    for dt in ctx.pick(torch.bfloat16, torch.float32):
        cases += [
            weight_case("spmm", big, big, max(16, 256 // s), dt, d, sparsity=0.9),
            weight_case("spmm", big, big, 16, dt, d, nm=(2, 8, 1, 1)),
            weight_case("spmm", big, big, max(32, 2048 // s), dt, d, nm=(2, 4, 1, 1)),
            weight_case("linear", big, big, 16, dt, d, sparsity=0.7),
            sddmm_case(mid, 64, mid, 0.1, dt, d),
            softmax_case(
                mid, 8 // (2 if ctx.cpu else 1), "local:256" if not ctx.cpu else "local:32", dt, d
            ),
            attention_case(
                mid,
                8 // (2 if ctx.cpu else 1),
                64 // (4 if ctx.cpu else 1),
                "local:256" if not ctx.cpu else "causal",
                dt,
                d,
            ),
        ]
    return cases


@suite("llm")
def llm(ctx: Context) -> list[Case]:
    """LLM layer shapes at decode (N = 1-64) and prefill (N = 2048) batch sizes."""
    d, s = ctx.device, (16 if ctx.cpu else 1)
    cases = []
    for dt in ctx.pick(torch.bfloat16):
        for M, K in LLM_SHAPES:
            M, K = M // s, K // s
            for N in (*DECODE_N, *(n // s for n in PREFILL_N)):
                cases += [weight_case("spmm", M, K, N, dt, d, sparsity=sp) for sp in LLM_SPARSITY]
                cases += [weight_case("spmm", M, K, N, dt, d, nm=(n, m, 1, 1)) for n, m in LLM_NM]
    return cases


@suite("llm_linear")
def llm_linear(ctx: Context) -> list[Case]:
    """linear (x @ W^T, nn.Linear's convention, the call a model makes) at decode sizes on the
    LLM shapes: its output is column-major in W @ x^T's terms, and some routes differ from
    spmm's by that (the N:M decode kernel's tall tiles at 5-8 tokens)."""
    d, s = ctx.device, (16 if ctx.cpu else 1)
    cases = []
    for dt in ctx.pick(torch.bfloat16):
        for M, K in LLM_SHAPES:
            M, K = M // s, K // s
            for N in (1, 4, 8, 16):
                cases += [weight_case("linear", M, K, N, dt, d, sparsity=sp) for sp in (0.7, 0.9)]
                cases += [weight_case("linear", M, K, N, dt, d, nm=(n, m, 1, 1)) for n, m in LLM_NM]
    return cases


@suite("llm_large")
def llm_large(ctx: Context) -> list[Case]:
    """Llama-70B's MLP shape (28672 x 8192) at 1-8192 tokens and the LLM shapes at 8192."""
    d, s = ctx.device, (64 if ctx.cpu else 1)
    plan = [(M, K, N) for M, K in LARGE_SHAPES for N in LARGE_N]
    plan += [(M, K, 8192) for M, K in LLM_SHAPES]
    cases = []
    for dt in ctx.pick(torch.bfloat16):
        for M, K, N in plan:
            M, K, N = M // s, K // s, max(1, N // s)
            cases += [weight_case("spmm", M, K, N, dt, d, sparsity=sp) for sp in LLM_SPARSITY]
            cases += [weight_case("spmm", M, K, N, dt, d, nm=(n, m, 1, 1)) for n, m in LLM_NM]
    return cases


@suite("nm")
def nm(ctx: Context) -> list[Case]:
    """Every N:M pattern: element-wise and vector-wise at several ratios, and block-wise."""
    patterns = [(n, m, v, 1) for n, m in NM_RATIOS for v in NM_VECTORS] + NM_BLOCKED
    d, s = ctx.device, (16 if ctx.cpu else 1)
    cases = []
    for dt in ctx.pick(torch.bfloat16):
        for M, K in LLM_SHAPES[:2]:
            M, K = max(64, M // s), max(256, K // s)
            for N in (1, 8, 16, 2048 // s):  # (issue 4: 1, 8 and 16 tokens, and a batch)
                cases += [weight_case("spmm", M, K, N, dt, d, nm=p) for p in patterns]
    return cases


@suite("nmfew")
def nm_few(ctx: Context) -> list[Case]:
    """linear at 2-24 tokens on the LLM shapes with the patterns whose few-token routes spilled
    (NM_FEW_PATTERNS in bf16 and fp16, NM_FEW_FP32 in strict fp32)."""
    d, s = ctx.device, (16 if ctx.cpu else 1)
    cases = []
    for dt in ctx.pick(torch.bfloat16, torch.float16, torch.float32):
        patterns = NM_FEW_FP32 if dt == torch.float32 else NM_FEW_PATTERNS
        for M, K in LLM_SHAPES:
            M, K = max(64, M // s), max(256, K // s)
            for N in NM_FEW_TOKENS:
                cases += [weight_case("linear", M, K, N, dt, d, nm=p) for p in patterns]
    return cases


@suite("nmsparse")
def nmsparse(ctx: Context) -> list[Case]:
    """nmSPARSE's weight shapes at its batch sizes with issue 4's patterns: half precision at
    batch 1-4096, strict fp32 at 1 and 4096 (`--dtype fp32` runs those alone)."""
    d, s = ctx.device, (16 if ctx.cpu else 1)
    cases = []
    for dt in ctx.pick(torch.bfloat16, torch.float32):
        fp32 = dt == torch.float32
        patterns = NMSPARSE_FP32 if fp32 else NMSPARSE_HALF
        for K, N_out in NMSPARSE_SHAPES:
            M, K = max(64, N_out // s), max(256, K // s)
            for batch in NMSPARSE_FP32_BATCH if fp32 else NMSPARSE_BATCH:
                cases += [
                    weight_case("spmm", M, K, max(1, batch // s), dt, d, nm=p) for p in patterns
                ]
    return cases


@suite("sddmm")
def sddmm(ctx: Context) -> list[Case]:
    """SDDMM at Sputnik's sparsities; K of attention (64, 256) and of backward (2048); and the
    Sparse Transformer's attention patterns over 16 heads at K = 64 and 256."""
    d, s = ctx.device, (16 if ctx.cpu else 1)
    size = 4096 // s
    heads = 2 if ctx.cpu else 16
    kinds = ("local:32",) if ctx.cpu else ("local:256", "strided:128:128")
    return [
        *(
            sddmm_case(size, K if not ctx.cpu else max(16, K // s), size, 1 - sp, dt, d)
            for dt in ctx.pick(torch.bfloat16, torch.float32)
            for K in (64, 256, 2048)
            for sp in (0.5, 0.7, 0.9, 0.98)
        ),
        *(
            sddmm_case(size, K // s, size, math.nan, dt, d, kind=kind, batch=heads)
            for dt in ctx.pick(torch.bfloat16, torch.float32)
            for K in (64, 256)
            for kind in kinds
        ),
    ]


@suite("softmax")
def softmax(ctx: Context) -> list[Case]:
    d = ctx.device
    lengths = (128, 256) if ctx.cpu else (1024, 4096)
    heads = 2 if ctx.cpu else 16
    kinds = ("causal", "local:32", "random:0.1") if ctx.cpu else ATTENTION_KINDS
    return [
        softmax_case(L, heads, k, dt, d)
        for dt in ctx.pick(torch.bfloat16, torch.float32)
        for L in lengths
        for k in kinds
    ]


@suite("attention")
def attention(ctx: Context) -> list[Case]:
    d = ctx.device
    if ctx.cpu:
        plan = [(L, k) for L in (128, 256) for k in ("causal", "local:32", "random:0.1")]
        heads, D = 2, 16
    else:  # the long length only with patterns whose cost grows linearly
        plan = [(L, k) for L in (1024, 4096) for k in ATTENTION_KINDS]
        plan += [(16384, k) for k in ("local:256", "strided:128:128")]
        heads, D = 16, 64
    return [
        attention_case(L, heads, D, k, dt, d)
        for dt in ctx.pick(torch.float16, torch.bfloat16)
        for L, k in plan
    ]


@suite("dlmc")
def dlmc_suite(ctx: Context) -> list[Case]:
    """DLMC: Transformer at N = 256 and 2048, ResNet-50 at its layers' N (one image)."""
    matrices, sizes = dlmc.find(ctx.dlmc)
    chosen = dlmc.sample(matrices, ctx.limit)
    if ctx.cpu and ctx.limit is None:
        chosen = dlmc.sample(matrices, 4)  # the full collection takes hours on the CPU path
    missing = [m.name for m in chosen if m.model == "rn50" and m.name not in sizes]
    if missing:
        warnings.warn(
            f"no N for rn50 layers {missing[:3]}... in rn50_batchsizes.txt: skipped", stacklevel=2
        )
    cases = []
    for dt in ctx.pick(torch.float32, torch.bfloat16):
        for m in chosen:
            if m.model == "rn50":
                ns = (sizes[m.name],) if m.name in sizes else ()
            else:
                ns = (16, 64) if ctx.cpu else (256, 2048)
            loader = _loader(m.path, dt, ctx.device)  # shared by the N values of one matrix
            cases += [
                weight_case(
                    "spmm",
                    m.rows,
                    m.cols,
                    n,
                    dt,
                    ctx.device,
                    smtx=loader,
                    density=m.nnz / max(1, m.rows * m.cols),
                    source=m.label,
                )
                for n in ns
            ]
    return cases


def _loader(path: Path, dtype: torch.dtype, device: torch.device) -> Callable:
    """A function reading the pattern once, on first use (the values are redrawn per copy)."""

    @cache
    def load():
        return load_smtx(path, dtype=dtype, device=device)

    return load


@suite("e2e")
def e2e(ctx: Context) -> list[Case]:
    """Whole models, sparse against dense (bench/e2e.py). GPU: the Sparse Transformer at
    L = 8192 (3 layers, dim 512; 90% unstructured weights, and 1:8 v=64 for inference, both
    also at L = 16384 with 90%'s training step, and 1:8 v=64 at 32768), MobileNetV1 width 1.0
    and 1.8 at batch 1 and 32, a 4-layer Llama-3-8B-shaped stack decoding 32 tokens after a
    128-token prompt; CPU: tiny sizes."""
    from ..models.llama import LlamaConfig
    from ..models.sparse_transformer import TransformerConfig
    from . import e2e as e2e_cases

    d, cpu = ctx.device, ctx.cpu
    if cpu:
        tcfg = TransformerConfig(vocab=32, dim=32, heads=2, layers=2, seq_len=128, window=16,
                                 stride=16)  # fmt: skip
        widths, resolution, images = (0.25,), 32, (1, 4)
        lcfg, prompt, steps = LlamaConfig(64, 224, heads=4, kv_heads=2, layers=2), 8, 4
    else:
        tcfg = TransformerConfig(vocab=256, dim=512, heads=8, layers=3, seq_len=8192)
        widths, resolution, images = (1.0, 1.8), 224, (1, 32)
        lcfg, prompt, steps = LlamaConfig(layers=4), 128, 32
    curve = TransformerConfig(vocab=16, dim=32, heads=2, layers=1, seq_len=64, window=8, stride=8)
    cases = []
    # tensor-core sparse weights too: at 8192 tokens the 90% CSR linears densify for cuBLAS
    vector_nm = "1:8,v=16" if cpu else "1:8,v=64"
    for dt in ctx.pick(torch.bfloat16):
        cases += [e2e_cases.transformer_case(tcfg, 1, "90%", dt, d, train=t) for t in (0, 1)]
        cases += [e2e_cases.transformer_case(tcfg, 1, vector_nm, dt, d)]
        if not cpu:  # where attention's share grows (dense attention is quadratic in L)
            longer = [(16384, "90%", 0), (16384, "90%", 1), (16384, vector_nm, 0)]
            longer += [(32768, vector_nm, 0)]
            cases += [
                e2e_cases.transformer_case(replace(tcfg, seq_len=L), 1, weights, dt, d, train=t)
                for L, weights, t in longer
            ]
    for dt in ctx.pick(torch.float32, torch.bfloat16):
        cases += [e2e_cases.mobilenet_case(w, b, resolution, dt, d) for w in widths for b in images]
    for dt in ctx.pick(torch.bfloat16):
        cases += [
            e2e_cases.llama_case(lcfg, b, w, dt, d, prompt=prompt, steps=steps)
            for b in (1, 16)
            for w in ("2:8", "1:8", "70%")
        ]
    cases.append(e2e_cases.train_curve_case(curve, 4, "80%", torch.float32, d))
    return cases
