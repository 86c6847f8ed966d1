"""Prototype: ADMM pruning with a gradual mask (Boza 2024, 'Fast and Effective Weight Update
for Pruned LLMs'), measured by the demo's mean cosine against SparseGPT."""
import os, sys, time
import torch
sys.path.insert(0, os.path.dirname(__file__))
from refit_prototype import plan, stats, evaluate, err, refit, sparsegpt_prune, sk  # noqa

ITERS = 20  # mask-changing iterations


def admm_prune(w, H, keep_fn, iters=ITERS, final=20, rho0=0.1, damp=0.01):
    H = H.double().clone()
    dead = H.diagonal() == 0
    H[dead, dead] = 1.0
    H.diagonal().add_(damp * H.diagonal().mean())
    W0 = w.double()
    W0[:, dead] = 0
    scale = H.diagonal().mean()
    rho = rho0 * scale
    XX = W0 @ H
    Z = W0.clone()
    U = torch.zeros_like(W0)
    inv = torch.linalg.inv(H + rho * torch.eye(H.shape[0], dtype=H.dtype))
    norm = H.diagonal().sqrt()
    for it in range(iters + final):
        W = (XX + rho * (Z - U)) @ inv
        frac = min(1.0, (it + 1) / iters)
        frac = 1 - (1 - frac) ** 3  # cubic ramp of sparsity
        V = W + U
        mask = keep_fn((V * norm).abs(), frac) if it < iters else mask
        Z = V * mask
        U = U + W - Z
    return Z, mask


def unstructured(s):
    def keep(score, frac):
        k = round((1 - s * frac) * score.shape[1])
        m = torch.zeros_like(score, dtype=torch.bool)
        return m.scatter_(1, score.topk(k, dim=1).indices, True)
    return keep


def nm(n, mm):
    def keep(score, frac):
        rows, cols = score.shape
        g = score.view(rows, cols // mm, mm)
        if frac < 1:  # unstructured ramp first
            k = round((1 - (1 - n / mm) * frac) * cols)
            m = torch.zeros_like(score, dtype=torch.bool)
            return m.scatter_(1, score.topk(k, dim=1).indices, True)
        m = torch.zeros_like(g, dtype=torch.bool)
        return m.scatter_(2, g.topk(n, dim=2).indices, True).view(rows, cols)
    return keep


for pattern in sys.argv[1:]:
    cfg = sk.SparsityConfig.parse(pattern)
    keep = unstructured(cfg.sparsity) if cfg.n is None else nm(cfg.n, cfg.m)
    out, fit = {}, {}
    e = ef = 0.0
    t = time.time()
    for fqn, mod in plan:
        w = mod.weight.detach()
        H = stats[fqn]
        z, mask = admm_prune(w, H, keep)
        out[fqn] = z.float()
        fit[fqn] = refit(w, mask, H).float()
        zero = err(w, torch.zeros_like(w), H)
        e += err(w, z, H) / zero
        ef += err(w, fit[fqn], H) / zero
    print(pattern, "admm", round(time.time() - t, 1), "s; mean rel err", round(e / len(plan), 5), "refit", round(ef / len(plan), 5), flush=True)
    print(pattern, "cosine admm", round(evaluate(out), 4), "admm+refit", round(evaluate(fit), 4), flush=True)
