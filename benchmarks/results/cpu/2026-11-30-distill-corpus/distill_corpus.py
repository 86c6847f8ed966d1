"""As ../2026-11-30-distill/distill_mixes.py (2:4 SparseGPT on all-MiniLM-L6-v2, then
prune.distill_ with fresh inputs every epoch, one Adam optimizer throughout), with more varied
text: each epoch adds `mixes` word-mixes and `mixes` sentences drawn from the Python
documentation that ships with every Python (pydoc_data.topics: offline, 761 prose sentences of
6-30 words). Mean cosine to the dense embeddings on the demo's 40 evaluated sentences after
every epoch.
    PYTHONPATH=src python distill_corpus.py 2:4 EPOCHS LR MIXES [pooled]

With "pooled", the target is the sentence embedding itself (mean-pooled, normalised: the
quantity the demo scores) instead of every token's last hidden state.
"""

import copy
import random
import re
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


def python_docs() -> list[str]:
    import pydoc_data.topics

    text = re.sub(r"\s+", " ", " ".join(pydoc_data.topics.topics.values()))
    code = re.compile(r"[=_(){}\[\]<>*`|#]|\.\.\.|::|--")
    return sorted({
        s for s in re.split(r"(?<=[.!?])\s+", text)
        if 6 <= len(s.split()) <= 30 and s[0].isupper() and not code.search(s)
    })  # fmt: skip


DOCS = python_docs()
print("python doc sentences", len(DOCS), flush=True)


def batches(epoch):
    rng = random.Random(epoch)
    sentences = list(CALIBRATION) + word_mixes(CALIBRATION, mixes, rng)
    sentences += rng.sample(DOCS, min(mixes, len(DOCS)))
    return minilm.batches(tok, sentences, 32, "cpu")[0]


def report(epoch, loss):
    print("epoch", epoch, round(loss, 5), round(score(student), 4), f"{time.time() - start:.0f}s",
          flush=True)  # fmt: skip


def pooled(m, batch):
    states = m(**batch).last_hidden_state
    pool = minilm.mean_pool(states.float(), batch["attention_mask"])
    return torch.nn.functional.normalize(pool, p=2, dim=1)


output = {"output": pooled} if "pooled" in sys.argv[5:] else {}
sk.prune.distill_(student, model, batches, epochs=epochs, lr=lr, on_epoch=report, **output)
