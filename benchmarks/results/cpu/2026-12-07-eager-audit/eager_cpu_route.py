"""CPU emulation of the CUDA route of the Sparse Transformer (dense spmm/sddmm backends, Triton
densify, fused triton_flash attention) under TRITON_INTERPRET=1, instrumented:
- sync-type aten ops (would be host syncs on CUDA), with the Python frame that issued them;
- cache fills (_cache_mode.builds()), Triton JIT launches, aten ops, allocations per phase.
Run: TRITON_INTERPRET=1 PYTHONPATH=src .venv/bin/python benchmarks/results/cpu/2026-12-07-eager-audit/eager_cpu_route.py"""
import collections, os, sys, traceback
assert os.environ.get("TRITON_INTERPRET") == "1"
import torch
from torch.utils._python_dispatch import TorchDispatchMode
import sparsekernels  # noqa
from sparsekernels.ops import _dispatch, _dense
from sparsekernels import _cache_mode
from sparsekernels.models.sparse_transformer import TransformerConfig, transformer_pair

FORCED = {"spmm_csr": "dense", "sddmm_csr": "dense", "sparse_attention": "triton_flash"}
orig_first = _dispatch._first_fitting
def first_fitting(op, problem):
    return FORCED.get(op) or orig_first(op, problem)
_dispatch._first_fitting = first_fitting
_dense.triton_densifies = lambda values: True      # the CUDA densify (Triton kernel)

SYNC_OPS = {"_local_scalar_dense", "nonzero", "unique", "_unique", "_unique2", "unique_dim",
            "unique_consecutive", "masked_select", "repeat_interleave", "bincount", "item"}
class Probe(TorchDispatchMode):
    def __init__(self):
        super().__init__(); self.ops = collections.Counter(); self.syncs = collections.Counter()
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.ops[name] += 1
        sync = name in SYNC_OPS
        if name == "repeat_interleave" and (kwargs or {}).get("output_size") is not None:
            sync = False
        if name == "index" and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
                                   for i in (args[1] or [])):
            sync = True
        if name in ("_to_copy", "copy_") and any(isinstance(a, torch.device) and a.type == "cpu"
                                                 for a in (kwargs or {}).values()):
            sync = True
        if sync:
            where = [f"{f.filename.split('src/')[-1]}:{f.lineno}" for f in traceback.extract_stack()
                     if "sparsekernels" in f.filename][-2:]
            self.syncs[(name, " <- ".join(reversed(where)))] += 1
        return func(*args, **(kwargs or {}))

import triton.runtime.jit as jit
launches = collections.Counter()
orig_run = jit.JITFunction.run
def run(self, *a, **k):
    launches[self.fn.__name__] += 1
    return orig_run(self, *a, **k)
jit.JITFunction.run = run
try:
    import triton.runtime.interpreter as interp
    orig_irun = interp.InterpretedFunction.run
    def irun(self, *a, **k):
        launches[getattr(self.fn, "__name__", "?")] += 1
        return orig_irun(self, *a, **k)
    interp.InterpretedFunction.run = irun
except Exception as e:
    print("no interpreter hook", e)

L = int(os.environ.get("L", 256))
cfg = TransformerConfig(vocab=64, dim=64, heads=4, layers=2, seq_len=L, window=32, stride=32)
sparse, _ = transformer_pair(cfg, "90%", dtype=torch.float32)
x = torch.randint(0, cfg.vocab, (1, cfg.seq_len + 1))
opt = torch.optim.AdamW(sparse.parameters(), lr=1e-4)

def step():
    loss = sparse.loss(x); opt.zero_grad(set_to_none=True); loss.backward(); opt.step()

def infer():
    with torch.no_grad():
        sparse(x[:, :-1])

def measure(label, fn):
    launches.clear(); b0 = _cache_mode.builds(); p = Probe()
    with p:
        fn()
    print(f"\n## {label}: cache fills {_cache_mode.builds() - b0}, Triton launches "
          f"{sum(launches.values())} {dict(launches)}, aten ops {sum(p.ops.values())}")
    for (name, where), n in sorted(p.syncs.items(), key=lambda kv: -kv[1]):
        print(f"   sync-type op {name} x{n}: {where}")
    return p

measure("training step 1 (cold)", step)
measure("training step 2", step)
p = measure("training step 3", step)
print("   top aten ops:", p.ops.most_common(25))
sparse.eval()
measure("inference 1", infer)
measure("inference 2", infer)
p = measure("inference 3", infer)
print("   top aten ops:", p.ops.most_common(25))
