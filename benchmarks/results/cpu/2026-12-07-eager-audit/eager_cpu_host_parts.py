"""Unprofiled host time per call of the library's entry points on the CUDA route (forced on the
CPU, Triton launches stubbed, tiny sizes so CPU compute is ~0), against torch's nn.Linear /
SDPA at the same sizes. TRITON_INTERPRET=1 PYTHONPATH=src .venv/bin/python benchmarks/results/cpu/2026-12-07-eager-audit/eager_cpu_host_parts.py"""
import collections, statistics, time, functools
import torch, torch.nn.functional as F
import sparsekernels  # noqa
from sparsekernels.ops import _dispatch, _dense, _library, _attention_library
from sparsekernels.nn import SparseLinear, SparseAttention
from sparsekernels.models.sparse_transformer import TransformerConfig, transformer_pair
import triton.runtime.interpreter as interp
FORCED = {"spmm_csr": "dense", "sddmm_csr": "dense", "sparse_attention": "triton_flash"}
orig_first = _dispatch._first_fitting
_dispatch._first_fitting = lambda op, problem: FORCED.get(op) or orig_first(op, problem)
_dense.triton_densifies = lambda values: True
STUB = [False]; orig_irun = interp.InterpretedFunction.run
nlaunch = [0]
def irun(self, *a, **k):
    nlaunch[0] += 1
    return None if STUB[0] else orig_irun(self, *a, **k)
interp.InterpretedFunction.run = irun
torch.set_num_threads(1)
times = collections.defaultdict(list)
def timed(name, fn):
    @functools.wraps(fn)
    def wrapper(*a, **k):
        t = time.perf_counter(); out = fn(*a, **k); times[name].append(time.perf_counter() - t); return out
    return wrapper
SparseLinear.forward = timed("SparseLinear.forward (train)", SparseLinear.forward)
SparseAttention.forward = timed("SparseAttention.forward (train)", SparseAttention.forward)
bw = _library.spmm_csr_eager  # the twin's backward is a staticmethod on its class
cls = [c for c in torch.autograd.Function.__subclasses__() if c.__name__ == "SpmmCsrEager"][0]
cls.backward = staticmethod(timed("SpmmCsrEager.backward", cls.backward))
B = _attention_library.BlockAttentionPackedEager
B.backward = staticmethod(timed("BlockAttentionPackedEager.backward", B.backward))
B.forward = staticmethod(timed("  of which BlockAttentionPackedEager.forward", B.forward))
cls.forward = staticmethod(timed("  of which SpmmCsrEager.forward", cls.forward))
cfg = TransformerConfig(vocab=16, dim=16, heads=2, layers=3, seq_len=32, window=16, stride=16)
model, dense = transformer_pair(cfg, "90%", dtype=torch.float32)
x = torch.randint(0, cfg.vocab, (1, cfg.seq_len + 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
opt.step = timed("AdamW.step (+ stepped_values hook)", opt.step)
def step():
    loss = model.loss(x); opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
STUB[0] = False; step(); step(); STUB[0] = True
for _ in range(10): step()
times.clear(); nlaunch[0] = 0
for _ in range(200): step()
print(f"Triton launches a training step: {nlaunch[0] / 200:.0f}")
for k, v in times.items():
    print(f"{k:45s} {statistics.median(v) * 1e6:7.1f} us a call  ({len(v) // 200} a step)")
# torch's own at the same sizes, for scale
lin = torch.nn.Linear(16, 64); xx = torch.randn(1, 32, 16, requires_grad=True)
def t_lin():
    t = time.perf_counter(); y = lin(xx); t1 = time.perf_counter() - t
    t = time.perf_counter(); y.sum().backward(); return t1, time.perf_counter() - t
r = [t_lin() for _ in range(500)][50:]
print(f"nn.Linear forward {statistics.median(a for a, _ in r) * 1e6:.1f} us; sum+backward {statistics.median(b for _, b in r) * 1e6:.1f} us")
qkv = torch.randn(1, 32, 3, 2, 8, requires_grad=True)
def t_sdpa():
    q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
    t = time.perf_counter(); y = F.scaled_dot_product_attention(q, k, v, is_causal=True); return time.perf_counter() - t
print(f"SDPA forward {statistics.median([t_sdpa() for _ in range(500)][50:]) * 1e6:.1f} us")
