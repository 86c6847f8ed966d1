"""Sequential SparseGPT whose every layer fits the DENSE model's outputs from the pruned model's
inputs (an asymmetric target), against plain sequential (each layer fits its own dense weight on
the pruned model's inputs) and one pass, on all-MiniLM-L6-v2 as the demo prunes it.

For a layer with inputs X_s in the partly pruned model and X_d in the dense one, the best dense
weight for the target X_d w is t = (X_s^T X_s)^-1 X_s^T X_d w; pruning t with SparseGPT on
H = X_s^T X_s (mask, then the exact refit) solves min ||X_s w' - X_d w|| over the mask, since
H_S: t = (X_s^T X_d w)_S. Layers are taken a stage at a time (those fed one input tensor).
    PYTHONPATH=src python3 asymmetric_prototype.py [PATTERN ...]
"""

import copy
import os
import sys
import time

import torch

import sparsekernels as sk
from sparsekernels.demo import encoder_only
from sparsekernels.models import minilm
from sparsekernels.models.sentences import CALIBRATION, SENTENCES
from sparsekernels.prune import sparsegpt_prune

torch.manual_seed(0)
model, tokenizer = minilm.load("cpu")
calibration, _ = minilm.batches(tokenizer, list(CALIBRATION), 32, "cpu")
parts, order = minilm.batches(tokenizer, list(SENTENCES), 8, "cpu")
dense = minilm.embed_batches(model, parts, order)
names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and encoder_only(m, n)]  # fmt: skip
SHRINK = float(os.environ.get("SHRINK", "0.01"))  # damping of the target's solve
BLEND = float(os.environ.get("BLEND", "1"))  # the target's share moved from w to the ridge's t


def inputs(net, fqns):
    """fqn -> list of the inputs (tokens, features) each calibration call fed it."""
    modules = dict(net.named_modules())
    seen = {f: [] for f in fqns}
    hooks = [modules[f].register_forward_pre_hook(lambda m, a, f=f: seen[f].append(a[0].reshape(-1, a[0].shape[-1]).float())) for f in fqns]  # fmt: skip
    with torch.no_grad():
        for b in calibration:
            net(**b)
    for h in hooks:
        h.remove()
    return seen


def stages():
    """Layers grouped by the input they share (query, key, value), in forward order."""
    modules = dict(model.named_modules())
    first, groups, held = {}, [], []  # (held: ids stay unique while the pass runs)
    hooks = []
    for f in names:
        def hook(m, a, f=f):
            key = id(a[0])
            held.append(a[0])
            if key not in first:
                first[key] = len(groups)
                groups.append([])
            if f not in sum(groups, []):
                groups[first[key]].append(f)
        hooks.append(modules[f].register_forward_pre_hook(hook))
    with torch.no_grad():
        model(**calibration[0])
    for h in hooks:
        h.remove()
    print("stages:", [len(g) for g in groups])
    return groups


def run(pattern, mode):
    config = sk.SparsityConfig.parse(pattern)
    sparse = copy.deepcopy(model)
    modules = dict(sparse.named_modules())
    dense_modules = dict(model.named_modules())
    groups = stages() if mode != "one pass" else [names]
    for group in groups:
        xs = inputs(sparse, group)
        xd = inputs(model, group) if mode == "asymmetric" else None
        for f in group:
            H = sum(x.T @ x for x in xs[f]).double()
            w = dense_modules[f].weight.detach().double()
            if mode == "asymmetric":
                G = sum(a.T @ b for a, b in zip(xs[f], xd[f])).double()
                lam = SHRINK * H.diagonal().mean()  # (pulls the target toward w, not 0)
                damped = H + lam * torch.eye(H.shape[0], dtype=H.dtype)
                target = torch.linalg.solve(damped, G @ w.T + lam * w.T).T
                target = BLEND * target + (1 - BLEND) * w
            else:
                target = w
            pruned, _ = sparsegpt_prune(target.float(), H.float(), **config.pattern_kwargs)
            with torch.no_grad():
                modules[f].weight.copy_(pruned)
    with torch.no_grad():
        return float((minilm.embed_batches(sparse, parts, order) * dense).sum(1).mean())


print(f"torch {torch.__version__}, sparsekernels {sk.__version__}, target damping {SHRINK}, blend {BLEND}")
for pattern in sys.argv[1:] or ["50%", "2:4"]:
    for mode in os.environ.get("MODES", "one pass,sequential,asymmetric").split(","):
        start = time.perf_counter()
        cos = run(pattern, mode)
        print(f"{pattern:8s} {mode:11s} cosine {cos:.4f} {time.perf_counter() - start:6.1f} s", flush=True)
