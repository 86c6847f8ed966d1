"""Per-function host cost of one training step / inference call (CUDA route forced, Triton
stubbed, tiny sizes), library functions only, by own time. TRITON_INTERPRET=1 PYTHONPATH=src"""
import cProfile, io, pstats, sys
import torch
import sparsekernels  # noqa
from sparsekernels.ops import _dispatch, _dense
from sparsekernels.models.sparse_transformer import TransformerConfig, transformer_pair
import triton.runtime.interpreter as interp
FORCED = {"spmm_csr": "dense", "sddmm_csr": "dense", "sparse_attention": "triton_flash"}
orig_first = _dispatch._first_fitting
_dispatch._first_fitting = lambda op, problem: FORCED.get(op) or orig_first(op, problem)
_dense.triton_densifies = lambda values: True
STUB = [False]; orig_irun = interp.InterpretedFunction.run
interp.InterpretedFunction.run = lambda self, *a, **k: None if STUB[0] else orig_irun(self, *a, **k)
cfg = TransformerConfig(vocab=16, dim=16, heads=2, layers=3, seq_len=32, window=16, stride=16)
model, _ = transformer_pair(cfg, "90%", dtype=torch.float32)
x = torch.randint(0, cfg.vocab, (1, cfg.seq_len + 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
def step():
    loss = model.loss(x); opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
def infer():
    with torch.no_grad():
        model(x[:, :-1])
fn = step if sys.argv[1] == "train" else infer
STUB[0] = False; fn(); fn(); STUB[0] = True
prof = cProfile.Profile(); prof.enable()
for _ in range(50): fn()
prof.disable()
st = pstats.Stats(prof)
rows = []
for k, v in st.stats.items():
    if "sparsekernels" in k[0]:
        rows.append((v[2] / 50 * 1e6, v[3] / 50 * 1e6, v[1] // 50, f"{k[0].split('sparsekernels/')[-1]}:{k[1]}({k[2]})"))
rows.sort(reverse=True)
print(f"{'own us/step':>11} {'cum us/step':>11} {'calls/step':>10}  function")
for own, cum, n, name in rows[:int(sys.argv[2])]:
    print(f"{own:11.1f} {cum:11.1f} {n:10d}  {name}")
