"""Version-keyed caches against AdamW's in-place steps (CUDA route forced on the CPU, Triton in
its interpreter): does a training step rebuild anything, and what does an eval call between
steps redo? TRITON_INTERPRET=1 PYTHONPATH=src .venv/bin/python benchmarks/results/cpu/2026-12-07-eager-audit/eager_cpu_versions.py"""
import torch
import sparsekernels  # noqa
from sparsekernels import _cache_mode
from sparsekernels.ops import _dispatch, _dense, _eager_plans
from sparsekernels.models.sparse_transformer import TransformerConfig, transformer_pair
FORCED = {"spmm_csr": "dense", "sddmm_csr": "dense", "sparse_attention": "triton_flash"}
orig_first = _dispatch._first_fitting
_dispatch._first_fitting = lambda op, problem: FORCED.get(op) or orig_first(op, problem)
_dense.triton_densifies = lambda values: True
calls = {"remember": 0, "whole path": 0}
orig_remember = _eager_plans.remember
def remember(*a):
    calls["remember"] += not torch.is_grad_enabled(); return orig_remember(*a)
_eager_plans.remember = remember
import sparsekernels.ops.linear as lin
lin._eager_plans = _eager_plans
cfg = TransformerConfig(vocab=16, dim=16, heads=2, layers=1, seq_len=32, window=16, stride=16)
model, _ = transformer_pair(cfg, "90%", dtype=torch.float32)
x = torch.randint(0, cfg.vocab, (1, cfg.seq_len + 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=False)
lin_layer = model.blocks[0].mlp[0]
def step():
    loss = model.loss(x); opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
def infer():
    with torch.no_grad():
        model(x[:, :-1])
for i in range(4):
    b0, r0 = _cache_mode.builds(), calls["remember"]
    step()
    b1 = _cache_mode.builds()
    infer(); r1 = calls["remember"]; infer()
    plans = _eager_plans._PLANS.get(lin_layer.values)
    print(f"step {i}: values._version {lin_layer.values._version}, cache fills in the step "
          f"{b1 - b0}, in 2 eval calls after it {_cache_mode.builds() - b1}; eval linear calls taking "
          f"the whole path + remember: 1st eval {r1 - r0}, 2nd {calls['remember'] - r1}; plans kept for "
          f"one layer's values {len(plans) if plans else 0}")
