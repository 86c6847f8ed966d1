"""SparseGPT's mask refit with the bias free as well (the inputs augmented by a constant 1: the
least-squares optimum over the kept weights and the bias together) against the refit of the kept
weights alone, on all-MiniLM-L6-v2's 36 encoder linears calibrated as the demo calibrates.
    PYTHONPATH=src python3 bias_refit.py [PATTERN ...]
"""

import copy
import sys

import torch

import sparsekernels as sk
from sparsekernels.demo import encoder_only
from sparsekernels.models import minilm
from sparsekernels.models.sentences import CALIBRATION, SENTENCES
from sparsekernels.prune import refit_kept, sparsegpt_prune

torch.manual_seed(0)
model, tokenizer = minilm.load("cpu")
calibration, _ = minilm.batches(tokenizer, list(CALIBRATION), 32, "cpu")
parts, order = minilm.batches(tokenizer, list(SENTENCES), 8, "cpu")
dense = minilm.embed_batches(model, parts, order)
modules = dict(model.named_modules())
names = [n for n, m in modules.items() if isinstance(m, torch.nn.Linear) and encoder_only(m, n)]
grams = {}


def hook(m, a, f):
    x = a[0].reshape(-1, a[0].shape[-1]).double()
    x = torch.cat([x, torch.ones_like(x[:, :1])], 1)  # (the bias's input)
    grams[f] = grams.get(f, 0) + x.T @ x


hooks = [modules[f].register_forward_pre_hook(lambda m, a, f=f: hook(m, a, f)) for f in names]
with torch.no_grad():
    for b in calibration:
        model(**b)
for h in hooks:
    h.remove()


def cosine(params) -> float:
    pruned = copy.deepcopy(model)
    mods = dict(pruned.named_modules())
    with torch.no_grad():
        for f, (weight, bias) in params.items():
            mods[f].weight.copy_(weight)
            mods[f].bias.copy_(bias)
        return float((minilm.embed_batches(pruned, parts, order) * dense).sum(1).mean())


print(f"torch {torch.__version__}, sparsekernels {sk.__version__}")
for pattern in sys.argv[1:] or ["50%", "2:4"]:
    config = sk.SparsityConfig.parse(pattern)
    plain, with_bias = {}, {}
    for f in names:
        w, b, H = modules[f].weight.detach(), modules[f].bias.detach(), grams[f].float()
        pruned, mask = sparsegpt_prune(w, H[:-1, :-1], **config.pattern_kwargs)
        plain[f] = pruned, b
        both = refit_kept(torch.cat([w, b[:, None]], 1), torch.cat([mask, mask[:, :1] | True], 1), H)
        with_bias[f] = both[:, :-1], both[:, -1]
    print(f"{pattern:8s} refit {cosine(plain):.4f}  refit with the bias {cosine(with_bias):.4f}", flush=True)
