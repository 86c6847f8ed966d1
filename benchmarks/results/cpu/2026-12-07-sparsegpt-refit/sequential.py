"""SparseGPT (with the exact refit, the default) through sparsify_ in one calibration pass
against sequential=True (each stage calibrated on the model whose earlier layers are pruned),
on all-MiniLM-L6-v2 as the demo prunes it: mean cosine to the dense embeddings, and seconds.
    PYTHONPATH=/work/main/src python3 sequential.py [PATTERN ...]
"""

import copy
import sys
import time

import torch

import sparsekernels as sk
from sparsekernels.demo import encoder_only
from sparsekernels.models import minilm
from sparsekernels.models.sentences import CALIBRATION, SENTENCES

torch.manual_seed(0)
model, tokenizer = minilm.load("cpu")
calibration, _ = minilm.batches(tokenizer, list(CALIBRATION), 32, "cpu")
parts, order = minilm.batches(tokenizer, list(SENTENCES), 8, "cpu")
dense = minilm.embed_batches(model, parts, order)

print(f"torch {torch.__version__}, sparsekernels {sk.__version__}")
for pattern in sys.argv[1:] or ["50%", "2:4"]:
    for sequential in (False, True):
        sparse = copy.deepcopy(model)
        start = time.perf_counter()
        sk.sparsify_(
            sparse, f"{pattern},method=sparsegpt", filter_fn=encoder_only,
            calibration=lambda m: [m(**b) for b in calibration], sequential=sequential,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        with torch.no_grad():
            cosine = float((minilm.embed_batches(sparse, parts, order) * dense).sum(1).mean())
        print(f"{pattern:6s} sequential={sequential!s:5s} cosine {cosine:.4f} {seconds:6.1f} s")
