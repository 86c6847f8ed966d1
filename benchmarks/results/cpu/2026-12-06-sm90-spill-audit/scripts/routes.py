"""Route simulator for linear(x, W) with an NMMatrix W on an assumed H100 (sm_90, 132 SMs).

Runs ops/_triton_nm.spmm_nm itself on meta tensors, called as linear calls it (B = x^T,
column-major, out column-major from 2 tokens), after the dispatch's own automatic choice
(cusparselt -> dense -> triton, via _dense.nm_prefers_dense and tuning.spmm_nm_prefers_cusparselt).
Gluon launchers (mma.sp, wgmma, select ring) are stubbed to record their config. Every Triton
launch (JITFunction.run) is intercepted: the real binder of Triton 3.6's CUDA backend
(GPUTarget cuda 90) computes the launch's signature, specialization (divisibility 16, ones),
constexprs and options (num_warps, num_stages) exactly as a launch would; nothing runs.

    PYTHONPATH=/tmp/t36/lib/python3.11/site-packages:.venv/lib/python3.11/site-packages:src \
        /tmp/t36/bin/python scratch/spill61/routes.py
-> scratch/spill61/routes.jsonl (one line a case), configs.pkl (distinct Triton launches)
"""

import hashlib
import itertools
import json
import os
import pickle
import sys
import traceback
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import make_backend  # noqa: E402
from triton.runtime.jit import JITFunction, create_function_from_signature  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "src"))

from sparsekernels.kernels import spmm_nm_mma_sp as mma_sp  # noqa: E402
from sparsekernels.kernels import spmm_nm_wgmma as wgmma  # noqa: E402
from sparsekernels.kernels import tuning  # noqa: E402
from sparsekernels.ops import _dense, _dispatch  # noqa: E402
from sparsekernels.ops import _triton_nm as T  # noqa: E402

SM = 132
TARGET = GPUTarget("cuda", 90, 32)
BACKEND = make_backend(TARGET)
launches = []  # this case's launches
gluon = {}  # this case's Gluon kernel (stubbed)


def spec_value(v):
    if isinstance(v, tl.dtype):
        return f"tl.{v.name}"
    return v


_BINDERS = {}


def fake_run(self, *args, grid, warmup, **kwargs):
    kwargs["debug"] = kwargs.get("debug", self.debug) or False
    kwargs["instrumentation_mode"] = ""
    binder = _BINDERS.get(id(self))
    if binder is None:
        binder = create_function_from_signature(self.signature, self.params, BACKEND)
        _BINDERS[id(self)] = binder
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = self._pack_args(
        BACKEND, kwargs, bound, specialization, options
    )
    launches.append(
        dict(
            fn=self,
            name=self.fn.__name__,
            signature=signature,
            constexprs=constexprs,
            attrs=attrs,
            options=options,
            grid=tuple(int(g) for g in grid) if not callable(grid) else None,
        )
    )
    return None


JITFunction.run = fake_run


# Hopper assumed: supports() without the device checks (the rest of their logic kept)
def _mma_sp_supports(n, m, block, dtype, k, device):
    half = dtype in (torch.float16, torch.bfloat16)
    pattern = (n, m) in ((2, 4), (2, 8)) or ((n, m) == (1, 8) and k % 16 == 0)
    return pattern and block == 1 and half and k < 2**31


def _wgmma_supports(n, m, block, dtype, k, device):
    half = dtype in (torch.float16, torch.bfloat16)
    return block == 1 and half and n in (1, 2) and m in (4, 8) and k < 2**31


def _ring_supports(values, words, n, m, bits):
    # (TMA alignment assumed: values and words 16-byte aligned rows on the GPU)
    if values.dtype not in (torch.bfloat16, torch.float16) or m != 8 or n not in (1, 2):
        return False
    return bits == 4 and values.shape[1] % 2 == 0


mma_sp.supports = _mma_sp_supports
T.mma_sp.supports = _mma_sp_supports
wgmma.supports = _wgmma_supports
T.wgmma.supports = _wgmma_supports
T.select_ring.supports = _ring_supports
T.hopper = lambda device: True
T._sm_count = lambda device: SM
T.metadata_words = lambda *a, **k: None
T.class_words = lambda *a, **k: None
T.aliased_indices = lambda indices, m: indices


def _stub(kind, keys):
    def f(*a, **k):
        gluon["kernel"] = kind
        gluon["config"] = {key: k.get(key) for key in keys if key in k}
        return k.get("out")

    return f


T.mma_sp.spmm_nm_mma_sp = _stub(
    "mma.sp (Gluon)",
    ["n", "m", "m_tiles", "blocks", "n_tiles", "split", "natural_b", "wide_b_stores",
     "out_m_fastest"],
)  # fmt: skip
T.wgmma.spmm_nm_wgmma = _stub(
    "wgmma (Gluon)", ["n", "m", "bits", "block_m", "block_g", "block_n", "split"]
)
T.select_ring.spmm_nm_select_ring = _stub(
    "select ring (Gluon)", ["n", "rows", "warps", "stages", "programs_per_sm"]
)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]
TOKENS = [1, 2, 4, 8, 9, 12, 16, 17, 24, 32, 33, 48, 64]
PATTERNS = [(1, 2), (2, 4), (1, 4), (2, 8), (1, 8), (4, 8), (4, 16), (8, 16), (2, 16),
            (16, 32), (8, 32), (4, 32), (1, 32)]  # fmt: skip
VECTORS = [1, 4, 8, 16, 64]


def pattern_space():
    for n, m in PATTERNS:
        for v in VECTORS:
            yield n, m, v, 1
            if n % 4 == 0 and m % 4 == 0:
                yield n, m, v, 4
    for n, m in ((64, 128), (64, 256)):
        for v in VECTORS:
            yield n, m, v, 64


def launch_key(l):
    opts = l["options"]
    sig = tuple(l["signature"].items())
    const = tuple(sorted((str(k), repr(spec_value(v))) for k, v in l["constexprs"].items()))
    attrs = tuple(sorted((str(k), repr(v)) for k, v in l["attrs"].items()))
    o = (opts.num_warps, opts.num_stages, opts.maxnreg, opts.launch_pdl)
    return hashlib.sha1(repr((l["name"], sig, const, attrs, o)).encode()).hexdigest()[:12]


def named_constexprs(l):
    names = l["fn"].arg_names
    return {names[k[0]]: spec_value(v) for k, v in l["constexprs"].items()}


def route(dtype, rows, k, tokens, n, m, vector, block):
    dt = DTYPES[dtype]
    dev = "meta"
    values = torch.empty((rows, k // m * n), dtype=dt, device=dev)
    indices = torch.empty((-(-rows // vector), k // m * n // block), dtype=torch.uint8, device=dev)
    x = torch.empty((tokens, k), dtype=dt, device=dev)
    b = x.t()  # linear: spmm(W, tokens.t())
    facts = dict(n=tokens, pattern=(n, m, vector, block), transpose=False, shape=(rows, k),
                 expanded=False)  # fmt: skip
    problem = _dispatch.Problem(torch.device("cuda"), dt, facts)
    if (n, m, vector, block) == (2, 4, 1, 1) and tuning.spmm_nm_prefers_cusparselt(
        rows, k, tokens, dt
    ):
        return dict(backend="cusparselt")
    if _dense.nm_prefers_dense(problem):
        return dict(backend="dense")
    launches.clear()
    gluon.clear()
    T.spmm_nm(values, indices, b, None, "none", n, m, vector, block, False)
    res = dict(backend="triton")
    if gluon:
        res["kernel"] = gluon["kernel"]
        res["gluon_config"] = gluon["config"]
    res["launches"] = [dict(l) for l in launches]
    return res


def main():
    out = open(HERE / "routes.jsonl", "w")
    configs = {}
    count = 0
    for (n, m, v, blk), (rows, k), dtype, tokens in itertools.product(
        list(pattern_space()), SHAPES, DTYPES, TOKENS
    ):
        if k % m or m % blk or n % blk:
            continue
        case = dict(dtype=dtype, rows=rows, k=k, tokens=tokens, n=n, m=m, v=v, b=blk)
        try:
            r = route(dtype, rows, k, tokens, n, m, v, blk)
        except Exception as e:  # noqa: BLE001
            case["error"] = f"{type(e).__name__}: {e}"
            case["trace"] = traceback.format_exc()[-1500:]
            out.write(json.dumps(case) + "\n")
            continue
        case["backend"] = r["backend"]
        if "kernel" in r:
            case["kernel"] = r["kernel"]
            case["gluon_config"] = r["gluon_config"]
        keys = []
        for l in r.get("launches", []):
            key = launch_key(l)
            keys.append(key)
            if key not in configs:
                configs[key] = dict(
                    key=key,
                    name=l["name"],
                    module=l["fn"].fn.__module__,
                    signature=l["signature"],
                    constexprs=l["constexprs"],
                    attrs=l["attrs"],
                    options=l["options"].__dict__,
                    named=named_constexprs(l),
                )
        case["launches"] = keys
        if "kernel" not in case:
            case["kernel"] = r["launches"][0]["name"] if r.get("launches") else case["backend"]
        case["grid"] = [l["grid"] for l in r.get("launches", [])]
        out.write(json.dumps(case, default=str) + "\n")
        count += 1
    out.close()
    for c in configs.values():
        c["constexprs"] = {k: spec_value(v) for k, v in c["constexprs"].items()}
    with open(HERE / "configs.pkl", "wb") as f:
        pickle.dump(configs, f)
    print(count, "cases,", len(configs), "distinct Triton launches")


if __name__ == "__main__":
    main()
