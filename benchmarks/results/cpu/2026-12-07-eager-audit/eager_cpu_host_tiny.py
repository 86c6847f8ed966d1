"""Host time of the library's own path (CUDA route forced, Triton launches stubbed), tiny sizes so
that CPU compute is negligible: wall time a step/call, sparse against its dense twin, and cProfile
cumulative time per call of the library's entry points.
Run: TRITON_INTERPRET=1 PYTHONPATH=src .venv/bin/python benchmarks/results/cpu/2026-12-07-eager-audit/eager_cpu_host_tiny.py"""
import cProfile, io, pstats, statistics, time
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
torch.set_num_threads(1)
cfg = TransformerConfig(vocab=16, dim=16, heads=2, layers=3, seq_len=32, window=16, stride=16)
sparse, dense = transformer_pair(cfg, "90%", dtype=torch.float32)
x = torch.randint(0, cfg.vocab, (1, cfg.seq_len + 1))
res = {}
for name, model in (("sparse", sparse), ("dense", dense)):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    def step():
        loss = model.loss(x); opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    def infer():
        with torch.no_grad():
            model(x[:, :-1])
    for label, fn in (("train", step), ("infer", infer)):
        STUB[0] = False; fn(); fn(); STUB[0] = True
        for _ in range(20): fn()
        runs = []
        for _ in range(200):
            t = time.perf_counter(); fn(); runs.append(time.perf_counter() - t)
        res[(name, label)] = statistics.median(runs) * 1e3
        if name == "sparse":
            prof = cProfile.Profile(); prof.enable()
            for _ in range(50): fn()
            prof.disable()
            s = io.StringIO(); st = pstats.Stats(prof, stream=s)
            keys = ("linear.py:52(forward)", "_library.py:47(run_forward)", "_library.py:182(_spmm_csr_backward)",
                    "attention.py:176(forward)", "_attention_library.py:336(forward)", "_attention_library.py:343(backward)",
                    "attention_packed.py:14(sparse_attention_packed)", "optimizer.py", "_eager_plans.py:94(run)",
                    "jit.py:", "stepped_values.py:40(_after_step)")
            for k, v in st.stats.items():
                tag = f"{k[0].split('/')[-1]}:{k[1]}({k[2]})"
                if any(t in tag for t in keys[:7] + keys[8:9] + keys[10:]):
                    print(f"  {label}: {tag:55s} calls/step {v[1] // 50:3d}  cum us/call (profiled) {v[3] / v[1] * 1e6:7.1f}")
for k, v in res.items():
    print(f"{k[0]:7s} {k[1]}: {v:.3f} ms a call (unprofiled, Triton launches stubbed)")
