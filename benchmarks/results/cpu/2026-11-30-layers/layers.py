"""2:4 fixed-mask distillation of all-MiniLM-L6-v2 toward every layer's hidden states, with a
cosine-decaying learning rate: the two levers the seventh session's long runs left untried
(../2026-11-30-srste/: last-layer target at a constant 2e-4 levels off at 0.940-0.944).

Same set-up as ../2026-11-30-srste/srste.py "fixed": 2:4 SparseGPT on the encoder's 36
linears, the masked-dense twin (models.masked), each epoch the 334 calibration sentences plus
334 new word-mixes, Adam over the 36 weights, the mean cosine to the dense embeddings on the
demo's 40 evaluated sentences after each epoch.
    PYTHONPATH=src python layers.py EPOCHS LR TARGET DECAY [docs]
TARGET: "last" (the last hidden state, as distill_ by default) or "layers" (every layer's hidden
states, prune.distill.every_layer, each layer's error weighted alike); DECAY: "cos" (cosine to
zero over the run) or "none"; "docs" adds 334 sentences a epoch drawn from the Python
documentation shipped with Python (as ../2026-11-30-distill-corpus/: 750 prose sentences).
PATTERN=50% (environment) prunes to another pattern than 2:4; SEQUENTIAL=1 prunes with
sparsify_(..., sequential=True) (later layers fitting the dense outputs, since 2026-12-07).
"""

import copy
import math
import os
import random
import re
import sys
import time

import torch

import sparsekernels as sk
from sparsekernels.demo import encoder_only
from sparsekernels.models import minilm
from sparsekernels.models.masked import MaskedLinear, masked_dense
from sparsekernels.models.sentences import CALIBRATION, SENTENCES, word_mixes
from sparsekernels.prune.distill import every_layer

torch.manual_seed(0)
epochs, lr, target, decay = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
docs = "docs" in sys.argv[5:]
model, tok = minilm.load("cpu")
calib, _ = minilm.batches(tok, list(CALIBRATION), 32, "cpu")
parts, order = minilm.batches(tok, list(SENTENCES), 8, "cpu")
dense_eval = minilm.embed_batches(model, parts, order)
pruned = copy.deepcopy(model)
PATTERN = os.environ.get("PATTERN", "2:4")  # e.g. PATTERN=50% for the unstructured target
cfg = sk.SparsityConfig.parse(f"{PATTERN},method=sparsegpt")
sequential = os.environ.get("SEQUENTIAL", "0") == "1"
sk.sparsify_(pruned, cfg, filter_fn=encoder_only, calibration=lambda m: [m(**b) for b in calib], sequential=sequential)  # fmt: skip
student = masked_dense(pruned, torch.float32)
layers = [m for m in student.modules() if isinstance(m, MaskedLinear)]
train = [layer.weight for layer in layers]
for p in student.parameters():
    p.requires_grad_(False)
for p in train:
    p.requires_grad_(True)


def python_docs() -> list[str]:
    import pydoc_data.topics

    text = re.sub(r"\s+", " ", " ".join(pydoc_data.topics.topics.values()))
    code = re.compile(r"[=_(){}\[\]<>*`|#]|\.\.\.|::|--")
    return sorted({
        s for s in re.split(r"(?<=[.!?])\s+", text)
        if 6 <= len(s.split()) <= 30 and s[0].isupper() and not code.search(s)
    })  # fmt: skip


DOCS = python_docs() if docs else []


def states(m, batch):
    if target == "layers":
        return every_layer(m, batch)
    return m(**batch).last_hidden_state


def score(m) -> float:
    with torch.no_grad():
        return (minilm.embed_batches(m, parts, order) * dense_eval).sum(1).mean().item()


print("masked linears", len(layers), "sparsegpt", round(score(student), 4), flush=True)
optimizer = torch.optim.Adam(train, lr=lr)
student.eval()
begin = time.time()
for epoch in range(epochs):
    rate = lr * 0.5 * (1 + math.cos(math.pi * epoch / epochs)) if decay == "cos" else lr
    for group in optimizer.param_groups:
        group["lr"] = rate
    sentences = list(CALIBRATION) + word_mixes(CALIBRATION, 334, random.Random(epoch))
    if docs:
        sentences += random.Random(10_000 + epoch).sample(DOCS, 334)
    data = minilm.batches(tok, sentences, 32, "cpu")[0]
    total = 0.0
    for batch in data:
        with torch.no_grad():
            want = states(model, batch)
        got = states(student, batch)
        weights = batch["attention_mask"].unsqueeze(-1).float().expand_as(got)
        loss = ((got - want).square() * weights).sum() / weights.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total += float(loss.detach())
    print("epoch", epoch, f"lr {rate:.2e}", round(total / len(data), 6), round(score(student), 4),
          f"{time.time() - begin:.0f}s", flush=True)  # fmt: skip
