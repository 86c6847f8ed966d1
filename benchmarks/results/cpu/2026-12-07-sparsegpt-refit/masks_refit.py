"""Which mask the exact refit works best from: magnitude's, Wanda's (|W| x the input norm, the
norm from H's diagonal, as Wanda's statistic) and SparseGPT's, each refit exactly
(sk.prune.refit_kept), on all-MiniLM-L6-v2 as refit_quality.py sets it up: the layers' mean
relative output error on the calibration inputs and the mean embedding cosine.
    PYTHONPATH=/work/main/src python3 masks_refit.py [PATTERN ...]
"""

import sys

import torch

import sparsekernels as sk
from refit_quality import cosine, grams, plan, relative_error
from sparsekernels.prune import refit_kept, sparsegpt_prune, wanda_mask

print(f"{'pattern':10s} {'mask':10s} {'err':>8s} {'cosine':>7s}")
for pattern in sys.argv[1:] or ["50%", "2:4"]:
    config = sk.SparsityConfig.parse(pattern)
    for name in ("magnitude", "wanda", "sparsegpt"):
        weights, error = {}, 0.0
        for fqn, module in plan:
            w, H = module.weight.detach(), grams[fqn]
            if name == "sparsegpt":
                pruned, _ = sparsegpt_prune(w, H, **config.pattern_kwargs)
            else:
                norm = H.diagonal().sqrt() if name == "wanda" else torch.ones(w.shape[1])
                mask = wanda_mask(w, norm, **config.pattern_kwargs)
                pruned = refit_kept(w, mask, H)
            weights[fqn] = pruned
            error += relative_error(w, pruned, H) / len(plan)
        print(f"{pattern:10s} {name:10s} {error:8.5f} {cosine(weights):7.4f}", flush=True)
