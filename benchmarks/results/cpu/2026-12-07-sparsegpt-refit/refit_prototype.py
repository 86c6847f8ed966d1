"""Prototype: SparseGPT's mask with the kept weights refit exactly (per row least squares
against the dense row under H), measured by the demo's mean cosine."""
import copy, sys, time
import torch
import sparsekernels as sk
from sparsekernels.demo import encoder_only
from sparsekernels.models import minilm
from sparsekernels.models.sentences import CALIBRATION, SENTENCES
from sparsekernels.prune.calibrate import _collect
from sparsekernels.prune.sparsegpt import sparsegpt_prune, DAMP

torch.manual_seed(0)
torch.set_num_threads(2)
model, tok = minilm.load("cpu")
calib, _ = minilm.batches(tok, list(CALIBRATION), 32, "cpu")
parts, order = minilm.batches(tok, list(SENTENCES), 8, "cpu")
dense_eval = minilm.embed_batches(model, parts, order)
plan = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and encoder_only(m, n)]
t = time.time()
stats = {f: s[0] for f, s in _collect(model, plan, lambda m: [m(**b) for b in calib], "sparsegpt", False, True).items()}  # fmt: skip
print("collected", len(stats), round(time.time() - t, 1), "s", flush=True)


def refit(w, mask, H, damp=DAMP, chunk=64):
    """Kept weights w'_S = (H_SS)^-1 H_S: w per row (H damped), original dense w."""
    H = H.double().clone()
    dead = H.diagonal() == 0
    H[dead, dead] = 1.0
    H.diagonal().add_(damp * H.diagonal().mean())
    w = w.double()
    rhs_full = w @ H  # (rows, cols): H w per row (H symmetric)
    out = torch.zeros_like(w)
    k = int(mask.sum(1).max())
    for r0 in range(0, w.shape[0], chunk):
        m = mask[r0:r0 + chunk]
        # indices of the kept columns per row, padded with -1 -> sorted so True first
        idx = torch.sort(m.to(torch.int8), dim=1, descending=True, stable=True).indices[:, :k]
        valid = torch.gather(m, 1, idx)
        Hs = H[idx[:, :, None], idx[:, None, :]]  # (rows, k, k)
        eye = torch.eye(k, dtype=H.dtype)
        vv = valid[:, :, None] & valid[:, None, :]
        Hs = torch.where(vv, Hs, eye.expand_as(Hs))
        b = torch.gather(rhs_full[r0:r0 + chunk], 1, idx) * valid
        L = torch.linalg.cholesky(Hs)
        sol = torch.cholesky_solve(b.unsqueeze(-1), L).squeeze(-1) * valid
        out[r0:r0 + chunk].scatter_(1, idx, sol)
        out[r0:r0 + chunk] *= m
    return out


def err(w0, w1, H):
    d = (w1.double() - w0.double())
    return float(torch.einsum("ri,ij,rj->", d, H.double(), d))


def evaluate(weights):
    m2 = copy.deepcopy(model)
    mods = dict(m2.named_modules())
    with torch.no_grad():
        for fqn, w in weights.items():
            mods[fqn].weight.copy_(w)
        emb = minilm.embed_batches(m2, parts, order)
    return float((emb * dense_eval).sum(1).mean())


for pattern in (sys.argv[1:] if __name__ == '__main__' else []):
    cfg = sk.SparsityConfig.parse(pattern)
    kw = dict(sparsity=cfg.sparsity) if cfg.n is None else dict(n=cfg.n, m=cfg.m, vector=cfg.vector)
    base, fit = {}, {}
    e0 = e1 = 0.0
    t = time.time()
    for fqn, mod in plan:
        w = mod.weight.detach()
        H = stats[fqn]
        pw, mask = sparsegpt_prune(w, H, **kw)
        base[fqn] = pw
        fw = refit(w, mask, H).float()
        fit[fqn] = fw
        e0 += err(w, pw, H) / err(w, torch.zeros_like(w), H)
        e1 += err(w, fw, H) / err(w, torch.zeros_like(w), H)
    print(pattern, "prune+refit", round(time.time() - t, 1), "s; mean rel err", round(e0 / len(plan), 5), "->", round(e1 / len(plan), 5), flush=True)
    print(pattern, "cosine sparsegpt", round(evaluate(base), 4), "refit", round(evaluate(fit), 4), flush=True)
