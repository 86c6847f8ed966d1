"""Host (Python) work of the CUDA route, emulated on the CPU: the routes forced as on CUDA
(dense spmm/sddmm, Triton densify, fused attention) and every Triton launch stubbed to a no-op
(what is left is the library's own host path; kernels' outputs are garbage, nothing reads them
on the host in steady state). Per steady-state training step / inference call: Python function
calls (cProfile), aten ops, gc collections, at two sequence lengths.
Run: TRITON_INTERPRET=1 PYTHONPATH=src .venv/bin/python benchmarks/results/cpu/2026-12-07-eager-audit/eager_cpu_host.py"""
import collections, cProfile, gc, io, os, pstats, time
import torch
from torch.utils._python_dispatch import TorchDispatchMode
import sparsekernels  # noqa
from sparsekernels.ops import _dispatch, _dense
from sparsekernels.models.sparse_transformer import TransformerConfig, transformer_pair
import triton.runtime.interpreter as interp

FORCED = {"spmm_csr": "dense", "sddmm_csr": "dense", "sparse_attention": "triton_flash"}
orig_first = _dispatch._first_fitting
_dispatch._first_fitting = lambda op, problem: FORCED.get(op) or orig_first(op, problem)
_dense.triton_densifies = lambda values: True
STUB = [False]
launches = collections.Counter()
orig_irun = interp.InterpretedFunction.run
def irun(self, *a, **k):
    launches[self.fn.__name__] += 1
    return None if STUB[0] else orig_irun(self, *a, **k)
interp.InterpretedFunction.run = irun

class Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__(); self.n = collections.Counter()
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

gcs = collections.Counter()
gc.callbacks.append(lambda phase, info: phase == "start" and gcs.update([info["generation"]]))
TOP = int(os.environ.get("TOP", 0))
for L in (256, 1024):
    cfg = TransformerConfig(vocab=64, dim=64, heads=4, layers=3, seq_len=L, window=32, stride=32)
    model, _ = transformer_pair(cfg, "90%", dtype=torch.float32)
    x = torch.randint(0, cfg.vocab, (1, L + 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    def step():
        loss = model.loss(x); opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    def infer():
        with torch.no_grad():
            model(x[:, :-1])
    for label, fn in (("train step", step), ("inference", infer)):
        STUB[0] = False; fn(); fn()          # real run: caches built, first calls done
        STUB[0] = True; fn()
        launches.clear(); gcs.clear(); ops = Ops()
        with ops:
            fn()
        n = 5; prof = cProfile.Profile(); prof.enable()
        for _ in range(n):
            fn()
        prof.disable()
        st = pstats.Stats(prof); total_calls = st.total_calls // n
        sk = sum(v[1] for k, v in st.stats.items() if "sparsekernels" in k[0]) // n
        print(f"L={L} {label}: Python calls/step {total_calls} (in sparsekernels: {sk}), "
              f"aten ops {sum(ops.n.values())}, Triton launches {sum(launches.values())} "
              f"{dict(launches)}, gc runs (5 steps + 1) {dict(gcs)}")
        if TOP and L == 256:
            s = io.StringIO(); pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(TOP)
            print(s.getvalue())
