"""Where the memory of a sparse Llama-shaped decode call goes: the e2e suite measured +145 MiB for
the sparse models at batch 16 against dense's +8 MiB. One warm eager decode call per weight
pattern runs under torch's allocator history; the largest live-at-peak allocations are printed
with the innermost sparsekernels frame that made them."""

import copy

import torch

from sparsekernels.models.llama import LlamaConfig, LlamaStack
from sparsekernels.prune.config import SparsityConfig
from sparsekernels.prune.sparsify import sparsify_

PROMPT, STEPS = 128, 32


def _frame(frames: list[dict]) -> str:
    mine = [f for f in frames if "sparsekernels" in f["filename"]]
    f = (mine or frames or [{"filename": "?", "line": 0, "name": "?"}])[0]
    return f"{f['filename'].split('sparsekernels/')[-1]}:{f['line']} {f['name']}"


def profile(model, batch: int, label: str) -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(batch, PROMPT, model.cfg.hidden, generator=g, device="cuda").bfloat16()
    model.allocate_cache(batch, PROMPT + STEPS)
    with torch.no_grad():
        first = model(x, 0)[:, -1:]
        model.decode(first, PROMPT, STEPS)  # warm: autotuning and compilation
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=200_000)
    model.decode(first, PROMPT, STEPS)
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    peak = (torch.cuda.max_memory_allocated() - before) / 2**20
    sizes: dict[str, list[int]] = {}
    for event in snapshot["device_traces"][0]:
        if event["action"] == "alloc":
            sizes.setdefault(_frame(event.get("frames", [])), []).append(event["size"])
    top = sorted(sizes.items(), key=lambda kv: -max(kv[1]))[:6]
    print(f"{label} batch {batch}: +{peak:.1f} MiB peak over the call", flush=True)
    for where, s in top:
        print(f"    {max(s) / 2**20:8.2f} MiB max, {len(s):5d} allocs  {where}", flush=True)


torch.manual_seed(0)
cfg = LlamaConfig(layers=4)
dense = LlamaStack(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
for batch in (1, 16):
    profile(dense, batch, "dense")
for pattern in ("2:8", "1:8", "70%"):
    sparse = copy.deepcopy(dense)
    sparsify_(sparse, SparsityConfig.coerce(pattern))
    for batch in (1, 16):
        profile(sparse, batch, pattern)
    del sparse
