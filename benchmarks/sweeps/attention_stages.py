"""The fused attention's pipeline stages on the Sparse Transformer's pattern, as the sm_90
compile audit suggested timing them (results/cpu/2026-12-07-attention-sm90-audit): backward at
1 stage (dK/dV 203 -> 158 registers, 3 programs an SM instead of 2) and 3, forward at 2.

Local 128 + strided 128, L = 8192, 8 heads of 64, bf16, q, k, v as views of a packed
(B, L, 3, H, D) projection (as the model's). GPU kernel time of a forward and of a forward +
backward (torch.profiler, attention_backward.py's gpu_time), each configuration on a fresh
pattern (the plans keep the configuration) and checked against the default's output and
gradients. ROUNDS rounds, configurations alternating; the lowest of each. From the repository
root on the GPU machine:
    PYTHONPATH=src python3 benchmarks/sweeps/attention_stages.py
"""

import dataclasses

import torch
from attention_backward import gpu_time

import sparsekernels as sk
from sparsekernels.kernels import attention_tuning

L, HEADS, D, ROUNDS = 8192, 8, 64, 3
DEFAULT = attention_tuning.block_attention_config
VARIANTS = {  # name -> (forward stages, backward stages); None keeps the default's
    "default": (None, None),
    "fwd s2": (2, None),
    "bwd s1": (None, 1),
    "bwd s3": (None, 3),
    "fwd s2 bwd s1": (2, 1),
}


def configured(fwd, bwd):
    def config(head_dim, on_cpu):
        base = DEFAULT(head_dim, on_cpu)
        changes = {"num_stages": fwd, "bwd_num_stages": bwd}
        return dataclasses.replace(base, **{k: v for k, v in changes.items() if v is not None})

    return config


def run(variant, qkv, grad):
    attention_tuning.block_attention_config = configured(*VARIANTS[variant])
    core = sk.nn.SparseAttention.local_strided(L, window=128, stride=128).cuda()
    try:
        with torch.no_grad():
            out = core(qkv).detach()
            forward, _ = gpu_time(lambda: core(qkv))
        qkv.grad = None
        core(qkv).backward(grad)
        dqkv = qkv.grad.clone()
        both, _ = gpu_time(lambda: core(qkv).backward(grad))
        qkv.grad = None
    finally:
        attention_tuning.block_attention_config = DEFAULT
    return forward, both, out, dqkv


def main():
    torch.manual_seed(0)
    qkv = torch.randn(1, L, 3, HEADS, D, device="cuda", dtype=torch.bfloat16).requires_grad_()
    grad = torch.randn(1, HEADS, L, D, device="cuda", dtype=torch.bfloat16)
    _, _, want_out, want_grad = run("default", qkv, grad)
    best = {name: [float("inf"), float("inf")] for name in VARIANTS}
    for _ in range(ROUNDS):
        for name in VARIANTS:
            forward, both, out, dqkv = run(name, qkv, grad)
            same = torch.equal(out, want_out) and torch.equal(dqkv, want_grad)
            close = torch.allclose(out.float(), want_out.float(), atol=2e-2) and torch.allclose(
                dqkv.float(), want_grad.float(), atol=5e-2
            )
            if not close:
                raise SystemExit(f"{name}: output or gradients differ from the default's")
            best[name] = [min(best[name][0], forward), min(best[name][1], both)]
            print(f"{name:16s} fwd {forward:7.1f} fwd+bwd {both:7.1f} bitwise {same}", flush=True)
    print(f"# {torch.cuda.get_device_name()}, local 128 + strided 128, L = {L}, {HEADS} x {D}, "
          "bf16, GPU us (lowest of rounds)")  # fmt: skip
    print(f"{'variant':16s} {'fwd':>8s} {'fwd+bwd':>8s} {'bwd':>8s}")
    for name, (forward, both) in best.items():
        print(f"{name:16s} {forward:8.1f} {both:8.1f} {both - forward:8.1f}")


if __name__ == "__main__":
    main()
