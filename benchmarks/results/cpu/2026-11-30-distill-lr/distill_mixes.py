"""2:4 SparseGPT on all-MiniLM-L6-v2, then prune.distill_ with fresh inputs every epoch (the 334
calibration sentences plus `mixes` new word-mixes of them, models.sentences.word_mixes) and one
Adam optimizer throughout; mean cosine to the dense embeddings on the demo's 40 evaluated
sentences after every epoch.
    PYTHONPATH=src python distill_mixes.py 2:4 EPOCHS LR MIXES
"""

import copy
import random
import sys
import time

import torch

import sparsekernels as sk
from sparsekernels.demo import encoder_only
from sparsekernels.models import minilm
from sparsekernels.models.sentences import CALIBRATION, SENTENCES, word_mixes

torch.manual_seed(0)
pattern, epochs, lr, mixes = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
model, tok = minilm.load("cpu")
calib, _ = minilm.batches(tok, list(CALIBRATION), 32, "cpu")
parts, order = minilm.batches(tok, list(SENTENCES), 8, "cpu")
dense_eval = minilm.embed_batches(model, parts, order)
student = copy.deepcopy(model)
cfg = sk.SparsityConfig.parse(pattern + ",method=sparsegpt")
sk.sparsify_(student, cfg, filter_fn=encoder_only, calibration=lambda m: [m(**b) for b in calib])


def score(m) -> float:
    return (minilm.embed_batches(m, parts, order) * dense_eval).sum(1).mean().item()


print("sparsegpt", round(score(student), 4), flush=True)
start = time.time()


def batches(epoch):
    sentences = list(CALIBRATION) + word_mixes(CALIBRATION, mixes, random.Random(epoch))
    return minilm.batches(tok, sentences, 32, "cpu")[0]


def report(epoch, loss):
    print("epoch", epoch, round(loss, 5), round(score(student), 4), f"{time.time() - start:.0f}s",
          flush=True)  # fmt: skip


sk.prune.distill_(student, model, batches, epochs=epochs, lr=lr, on_epoch=report)
