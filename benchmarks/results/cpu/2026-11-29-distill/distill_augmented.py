"""2:4 SparseGPT on all-MiniLM-L6-v2, then distill_ over calibration sentences plus fresh
word-mixes of them each epoch (the teacher labels any input), cosine on the 40 eval sentences."""
import copy, random, sys, time, torch
import sparsekernels as sk
from sparsekernels.models import minilm
from sparsekernels.models.sentences import CALIBRATION, SENTENCES
from sparsekernels.demo import encoder_only
torch.manual_seed(0); rng = random.Random(0)
pattern, epochs, lr, mixes = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
model, tok = minilm.load("cpu")
calib_sentences = list(CALIBRATION)
calib, _ = minilm.batches(tok, calib_sentences, 32, "cpu")
parts, order = minilm.batches(tok, list(SENTENCES), 8, "cpu")
dense_eval = minilm.embed_batches(model, parts, order)
student = copy.deepcopy(model)
cfg = sk.SparsityConfig.parse(pattern + ",method=sparsegpt")
sk.sparsify_(student, cfg, filter_fn=encoder_only, calibration=lambda m: [m(**b) for b in calib])
score = lambda m: (minilm.embed_batches(m, parts, order) * dense_eval).sum(1).mean().item()
print("sparsegpt", round(score(student), 4), flush=True)

def mix():
    a, b = rng.sample(calib_sentences, 2)
    wa, wb = a.split(), b.split()
    cut_a, cut_b = rng.randint(1, len(wa)), rng.randint(0, len(wb) - 1)
    return " ".join(wa[:cut_a] + wb[cut_b:])

t0 = time.time()
for ep in range(epochs):
    sentences = calib_sentences + [mix() for _ in range(mixes)]
    data, _ = minilm.batches(tok, sentences, 32, "cpu")
    loss = sk.prune.distill_(student, model, data, epochs=1, lr=lr)[0]
    print("aug", ep, round(loss, 5), round(score(student), 4), f"{time.time() - t0:.0f}s", flush=True)
