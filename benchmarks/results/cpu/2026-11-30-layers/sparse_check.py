"""The demo's distillation recipe on the sparse model itself (SparseLinear layers on the CPU
backend, prune.distill_), 3 epochs at a constant 2e-4, against the masked-dense twin's first
epochs in output_layers_cos_docs_100.txt (whose cosine rate is 2e-4 to within 0.1% there):
the same data (calibration sentences, word-mixes with seed = epoch, documentation sentences
with seed 10000 + epoch), every layer's hidden states as the target.
    PYTHONPATH=src python benchmarks/results/cpu/2026-11-30-layers/sparse_check.py
"""

import copy
import random
import time

import torch

import sparsekernels as sk
from sparsekernels.demo import encoder_only
from sparsekernels.models import minilm
from sparsekernels.models.python_docs import python_doc_sentences
from sparsekernels.models.sentences import CALIBRATION, SENTENCES, word_mixes
from sparsekernels.prune.distill import every_layer

torch.manual_seed(0)
model, tok = minilm.load("cpu")
calib, _ = minilm.batches(tok, list(CALIBRATION), 32, "cpu")
parts, order = minilm.batches(tok, list(SENTENCES), 8, "cpu")
dense_eval = minilm.embed_batches(model, parts, order)
student = copy.deepcopy(model)
cfg = sk.SparsityConfig.parse("2:4,method=sparsegpt")
sk.sparsify_(student, cfg, filter_fn=encoder_only, calibration=lambda m: [m(**b) for b in calib])


def score() -> float:
    with torch.no_grad():
        return (minilm.embed_batches(student, parts, order) * dense_eval).sum(1).mean().item()


def batches(epoch):
    sentences = list(CALIBRATION) + word_mixes(CALIBRATION, 334, random.Random(epoch))
    sentences += random.Random(10_000 + epoch).sample(python_doc_sentences(), 334)
    return minilm.batches(tok, sentences, 32, "cpu")[0]


def report(epoch: int, loss: float) -> None:
    seconds = f"{time.time() - begin:.0f}s"
    print("epoch", epoch, round(loss, 6), round(score(), 4), seconds, flush=True)


print("sparsegpt", round(score(), 4), flush=True)
begin = time.time()
sk.prune.distill_(student, model, batches, epochs=3, lr=2e-4, output=every_layer, on_epoch=report)
