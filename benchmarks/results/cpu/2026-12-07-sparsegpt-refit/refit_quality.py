"""SparseGPT with its paper's updates (refit=False) against its mask refit exactly (the default)
on all-MiniLM-L6-v2's 36 encoder linears, calibrated as the demo calibrates (its 334 sentences,
batches of 32, one pass): each layer's relative output error on the calibration inputs
((w' - w)^T H (w' - w) / w^T H w, averaged over the layers) and the mean cosine of the
embeddings to the dense model's on the demo's 40 evaluated sentences (the pruned weights set
into the dense model: the same arithmetic as the sparse layers).
    PYTHONPATH=src python3 refit_quality.py [PATTERN ...]
DAMP=x (environment) damps H by x times its mean diagonal instead of SparseGPT's 0.01;
BLOCKSIZE=n chooses unstructured masks n columns at a time (128), PER_ROW=0 over all rows.
"""

import copy
import os
import sys
import time

import torch

import sparsekernels as sk
from sparsekernels.demo import PATTERNS, encoder_only
from sparsekernels.models import minilm
from sparsekernels.models.sentences import CALIBRATION, SENTENCES
from sparsekernels.prune import sparsegpt_prune
from sparsekernels.prune.calibrate import _collect

torch.manual_seed(0)
model, tokenizer = minilm.load("cpu")
calibration, _ = minilm.batches(tokenizer, list(CALIBRATION), 32, "cpu")
parts, order = minilm.batches(tokenizer, list(SENTENCES), 8, "cpu")
dense = minilm.embed_batches(model, parts, order)
plan = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and encoder_only(m, n)]  # fmt: skip
DAMP = float(os.environ.get("DAMP", "0.01"))
OPTIONS = {"blocksize": int(os.environ.get("BLOCKSIZE", "128"))}
if os.environ.get("PER_ROW", "1") == "0":
    OPTIONS["per_row"] = False
grams = {f: s[0] for f, s in _collect(model, plan, lambda m: [m(**b) for b in calibration], "sparsegpt", False, True).items()}  # fmt: skip


def relative_error(w, pruned, H):
    d, H = (pruned - w).double(), H.double()
    return float(torch.einsum("ri,ij,rj->", d, H, d) / torch.einsum("ri,ij,rj->", w.double(), H, w.double()))  # fmt: skip


def cosine(weights) -> float:
    pruned = copy.deepcopy(model)
    modules = dict(pruned.named_modules())
    with torch.no_grad():
        for fqn, weight in weights.items():
            modules[fqn].weight.copy_(weight)
        return float((minilm.embed_batches(pruned, parts, order) * dense).sum(1).mean())


def main() -> None:
    print(f"torch {torch.__version__}, sparsekernels {sk.__version__}, damp {DAMP}, {OPTIONS}")
    print(f"{'pattern':10s} {'paper err':>9s} {'refit err':>9s} {'paper cos':>9s} {'refit cos':>9s} {'s':>5s}")
    for pattern in sys.argv[1:] or PATTERNS:
        config = sk.SparsityConfig.parse(pattern)
        weights = {False: {}, True: {}}
        errors = {False: 0.0, True: 0.0}
        start = time.perf_counter()
        for fqn, module in plan:
            w = module.weight.detach()
            for refit in (False, True):
                kwargs = {**config.pattern_kwargs, **(OPTIONS if config.sparsity else {})}
                pruned, _ = sparsegpt_prune(w, grams[fqn], **kwargs, refit=refit, damp=DAMP)
                weights[refit][fqn] = pruned
                errors[refit] += relative_error(w, pruned, grams[fqn]) / len(plan)
        seconds = time.perf_counter() - start
        print(
            f"{pattern:10s} {errors[False]:9.5f} {errors[True]:9.5f} {cosine(weights[False]):9.4f} "
            f"{cosine(weights[True]):9.4f} {seconds:5.1f}", flush=True,
        )  # fmt: skip


if __name__ == "__main__":
    main()
