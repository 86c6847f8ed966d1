"""Host time of the layers' own replays (nn/_repeat_calls.py), emulated on the CPU: the CUDA
route's backends forced (dense linears, the fused attention), Triton launches stubbed after the
warm-up calls, the launch plans stood in for (a replay = an allocation like the recorded
output), the Sparse Transformer at a toy size (dim 16, L = 128, 3 layers), its dense twin
beside. Layer replays off and on alternate in one process, twice; each figure is the lowest of
ROUNDS medians of CALLS calls. Run:
    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/results/cpu/2026-12-07-layer-replays/emulated_layers.py
"""

import statistics
import time

import torch
import triton.runtime.interpreter as interp

from sparsekernels.models.sparse_transformer import TransformerConfig, transformer_pair
from sparsekernels.nn import _repeat_calls
from sparsekernels.ops import _dense, _dispatch, _eager_plans, _launch_plans

FORCED = {"spmm_csr": "dense", "sddmm_csr": "dense", "sparse_attention": "triton_flash"}
first_fitting = _dispatch._first_fitting
_dispatch._first_fitting = lambda op, problem: FORCED.get(op) or first_fitting(op, problem)
_dense.triton_densifies = lambda values: True
STUB = [False]
interpreted = interp.InterpretedFunction.run
interp.InterpretedFunction.run = lambda self, *a, **k: None if STUB[0] else interpreted(self, *a, **k)
ON = [False]
_repeat_calls.on_cuda = lambda x: ON[0]
ROUNDS, CALLS = 5, 200


class StandIn:
    """A launch plan stand-in: a replay allocates an output like the recorded one."""

    lean = True

    def __init__(self, out, state=None):
        outs = (out,) if isinstance(out, torch.Tensor) else out
        self.like = [(o.shape, o.stride(), o.dtype) for o in outs]
        self.single, self.state = isinstance(out, torch.Tensor), state

    def _outs(self):
        outs = [torch.empty_strided(s, st, dtype=dt) for s, st, dt in self.like]
        return outs[0] if self.single else tuple(outs)

    def replay(self, x, bias, weight, stream=None):
        return self._outs()

    def replay_linear(self, x, bias, stream=None):
        return self._outs()

    def replay_call(self, inputs, state, stream=None):
        return self._outs()


def record(call, x, bias, W):
    out = call()
    return out, StandIn(out)


def record_call(call, inputs, state, check_inputs=False):
    out = call()
    return out, StandIn(out, state)


_launch_plans.stream_of = lambda x: (1, 0)
_launch_plans.can_record = lambda x: True
_launch_plans.record = record
_launch_plans.record_call = record_call
_eager_plans._may_record = lambda plan, stream, x: stream not in plan.launches


def best_us(fn) -> float:
    rounds = []
    for _ in range(ROUNDS):
        runs = []
        for _ in range(CALLS):
            start = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - start)
        rounds.append(statistics.median(runs))
    return min(rounds) * 1e6


def main() -> None:
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)  # (stubbed launches leave garbage: denormals slow matmuls)
    cfg = TransformerConfig(vocab=16, dim=16, heads=2, layers=3, seq_len=128, window=16, stride=16)
    sparse, dense = transformer_pair(cfg, "90%", dtype=torch.float32)
    tokens = torch.randint(0, cfg.vocab, (1, cfg.seq_len + 1))
    x = torch.randn(1, cfg.seq_len, cfg.dim)
    qkv = torch.randn(1, cfg.seq_len, 3, cfg.heads, cfg.dim // cfg.heads)
    block, dense_block = sparse.blocks[0], dense.blocks[0]
    calls = {}
    for name, model, b in (("sparse", sparse, block), ("dense", dense, dense_block)):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)

        def step(model=model, opt=opt):
            loss = model.loss(tokens)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        def no_grad(fn):
            def run():
                with torch.no_grad():
                    fn()

            return run

        calls[f"{name} qkv linear, no grad"] = no_grad(lambda b=b: b.attn.qkv(x))
        if name == "sparse":
            calls["sparse attention core, no grad"] = no_grad(lambda b=b: b.attn.core(qkv))
        calls[f"{name} model inference"] = no_grad(lambda m=model: m(tokens[:, :-1]))
        calls[f"{name} model train step"] = step
    rows = {label: [] for label in calls}
    for on in (False, True, False, True):
        ON[0] = on
        for label, fn in calls.items():
            STUB[0] = False
            for _ in range(3):  # whole path, plan, record (launches real: the stand-ins' shapes)
                fn()
            STUB[0] = True
            rows[label].append((on, best_us(fn)))
    print(f"# torch {torch.__version__}, CPU emulation, launches stubbed, plans stood in for")
    print(f"{'call':34s} {'replays off us':>16s} {'replays on us':>16s}")
    for label, runs in rows.items():
        off = "-".join(f"{us:.0f}" for on, us in runs if not on)
        on_ = "-".join(f"{us:.0f}" for on, us in runs if on)
        print(f"{label:34s} {off:>16s} {on_:>16s}")


if __name__ == "__main__":
    main()
