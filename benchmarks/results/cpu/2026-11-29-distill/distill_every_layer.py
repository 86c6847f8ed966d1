"""2:4 SparseGPT on all-MiniLM-L6-v2, then distill_ toward the last hidden state or every
layer's, one epoch per call (Adam restarts each epoch, the same for both), cosine per epoch."""
import copy, sys, time, torch
import sparsekernels as sk
from sparsekernels.models import minilm
from sparsekernels.models.sentences import CALIBRATION, SENTENCES
from sparsekernels.demo import encoder_only
torch.manual_seed(0)
pattern, epochs, lr = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
model, tok = minilm.load("cpu")
calib, _ = minilm.batches(tok, list(CALIBRATION), 32, "cpu")
parts, order = minilm.batches(tok, list(SENTENCES), 8, "cpu")
dense_eval = minilm.embed_batches(model, parts, order)
base = copy.deepcopy(model)
cfg = sk.SparsityConfig.parse(pattern + ",method=sparsegpt")
sk.sparsify_(base, cfg, filter_fn=encoder_only, calibration=lambda m: [m(**b) for b in calib])
score = lambda m: (minilm.embed_batches(m, parts, order) * dense_eval).sum(1).mean().item()
print("sparsegpt", round(score(base), 4), flush=True)
for name, output in (("every", sk.prune.every_layer), ("last", sk.prune.distill._hidden_states)):
    student, t0 = copy.deepcopy(base), time.time()
    for ep in range(epochs):
        loss = sk.prune.distill_(student, model, calib, epochs=1, lr=lr, output=output)[0]
        print(name, ep, round(loss, 5), round(score(student), 4), f"{time.time() - t0:.0f}s", flush=True)
