"""sparsify_'s SparseGPT in one pass against sequential=True (later stages fitting the dense
model's outputs, prune/dense_target.py), on all-MiniLM-L6-v2 as the demo prunes it: mean cosine
to the dense embeddings on the demo's 40 evaluated sentences, and seconds.
    PYTHONPATH=src python3 sequential_dense_target.py [PATTERN ...]
TARGET_DAMPS=a,b (environment): the ridges toward w to try (the library's TARGET_DAMP alone).
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
from sparsekernels.prune import calibrate, dense_target

torch.manual_seed(0)
model, tokenizer = minilm.load("cpu")
calibration, _ = minilm.batches(tokenizer, list(CALIBRATION), 32, "cpu")
parts, order = minilm.batches(tokenizer, list(SENTENCES), 8, "cpu")
dense = minilm.embed_batches(model, parts, order)
damps = os.environ.get("TARGET_DAMPS", str(dense_target.TARGET_DAMP)).split(",")


def cosine(pattern: str, sequential: bool) -> tuple[float, float]:
    sparse = copy.deepcopy(model)
    start = time.perf_counter()
    sk.sparsify_(
        sparse, f"{pattern},method=sparsegpt", filter_fn=encoder_only,
        calibration=lambda m: [m(**b) for b in calibration], sequential=sequential,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    with torch.no_grad():
        return float((minilm.embed_batches(sparse, parts, order) * dense).sum(1).mean()), seconds


print(f"torch {torch.__version__}, sparsekernels {sk.__version__}")
for pattern in sys.argv[1:] or ["50%", "2:4"]:
    cos, seconds = cosine(pattern, False)
    print(f"{pattern:6s} one pass                     cosine {cos:.4f} {seconds:6.1f} s", flush=True)
    for damp in damps:
        calibrate.TARGET_DAMP = float(damp)
        cos, seconds = cosine(pattern, True)
        print(f"{pattern:6s} sequential, target damp {float(damp):4.2f} cosine {cos:.4f} {seconds:6.1f} s", flush=True)  # fmt: skip
