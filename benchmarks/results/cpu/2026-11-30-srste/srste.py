"""2:4 with the mask learned during distillation (SR-STE, Zhou et al., ICLR 2021), all-MiniLM-L6-v2.

Fixed-mask distillation after SparseGPT levels off near 0.92 mean cosine at 2:4 (../2026-11-30-
distill*/). Here the mask may move: each encoder linear keeps a dense weight, starting from
SparseGPT's (compensated kept values, zeros elsewhere); every forward takes the 2 largest of
each 4 by magnitude (prune.masks.nm_mask) and multiplies by that mask; the gradient passes
straight through to every entry, plus SR-STE's decay lam * (1 - mask) * w, which pulls pruned
entries toward zero so the mask settles. Same data and target as distill_mixes.py (the 334
calibration sentences plus 334 new word-mixes each epoch, the dense model's last hidden states,
Adam). After each epoch: mean cosine on the demo's 40 evaluated sentences, and the share of
mask entries that changed since SparseGPT's.
    PYTHONPATH=src python srste.py EPOCHS LR LAMBDA [fixed]

With "fixed", the mask stays SparseGPT's (the masked-dense twin trained as is): fixed-mask
distillation, the control at the same learning rate.
"""

import copy
import random
import sys
import time

import torch

import sparsekernels as sk
from sparsekernels.demo import encoder_only
from sparsekernels.models import minilm
from sparsekernels.models.masked import MaskedLinear, masked_dense
from sparsekernels.models.sentences import CALIBRATION, SENTENCES, word_mixes
from sparsekernels.prune.masks import nm_mask

torch.manual_seed(0)
epochs, lr, lam = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
fixed = "fixed" in sys.argv[4:]
model, tok = minilm.load("cpu")
calib, _ = minilm.batches(tok, list(CALIBRATION), 32, "cpu")
parts, order = minilm.batches(tok, list(SENTENCES), 8, "cpu")
dense_eval = minilm.embed_batches(model, parts, order)
pruned = copy.deepcopy(model)
cfg = sk.SparsityConfig.parse("2:4,method=sparsegpt")
sk.sparsify_(pruned, cfg, filter_fn=encoder_only, calibration=lambda m: [m(**b) for b in calib])
student = masked_dense(pruned, torch.float32)


class SrSte(torch.autograd.Function):
    """w * mask(w) forward; the gradient straight through, plus lam * (1 - mask) * w."""

    @staticmethod
    def forward(ctx, w):
        mask = nm_mask(w.detach(), 2, 4)
        ctx.save_for_backward(w, mask)
        return w * mask

    @staticmethod
    def backward(ctx, grad):
        w, mask = ctx.saved_tensors
        return grad + lam * (~mask) * w


def learned_forward(self, x):
    return torch.nn.functional.linear(x, SrSte.apply(self.weight), self.bias)


layers = [m for m in student.modules() if isinstance(m, MaskedLinear)]
start_masks = [layer.mask.bool().clone() for layer in layers]
for layer in layers if not fixed else []:
    layer.forward = learned_forward.__get__(layer)
train = [layer.weight for layer in layers]
for p in student.parameters():
    p.requires_grad_(False)
for p in train:
    p.requires_grad_(True)
print("masked linears", len(layers), flush=True)


def score(m) -> float:
    with torch.no_grad():
        return (minilm.embed_batches(m, parts, order) * dense_eval).sum(1).mean().item()


def moved() -> float:
    """The share of mask entries that differ from SparseGPT's."""
    if fixed:
        return 0.0
    pairs = zip(layers, start_masks, strict=True)
    changed = sum(int((nm_mask(layer.weight.detach(), 2, 4) != s).sum()) for layer, s in pairs)
    return changed / sum(s.numel() for s in start_masks)


print("sparsegpt", round(score(student), 4), "mask moved", moved(), flush=True)
optimizer = torch.optim.Adam(train, lr=lr)
student.eval()
begin = time.time()
for epoch in range(epochs):
    sentences = list(CALIBRATION) + word_mixes(CALIBRATION, 334, random.Random(epoch))
    data = minilm.batches(tok, sentences, 32, "cpu")[0]
    total = 0.0
    for batch in data:
        with torch.no_grad():
            target = model(**batch).last_hidden_state
        got = student(**batch).last_hidden_state
        weights = batch["attention_mask"].unsqueeze(-1).float().expand_as(got)
        loss = ((got - target).square() * weights).sum() / weights.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total += float(loss.detach())
    print("epoch", epoch, round(total / len(data), 5), round(score(student), 4),
          f"mask moved {moved():.4f}", f"{time.time() - begin:.0f}s", flush=True)  # fmt: skip
