import copy, time, sys, torch
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
with torch.no_grad():
    targets = [model(**b).last_hidden_state for b in calib]
sparse = copy.deepcopy(model)
cfg = sk.SparsityConfig.parse(pattern + ",method=sparsegpt")
sk.sparsify_(sparse, cfg, filter_fn=encoder_only, calibration=lambda m: [m(**b) for b in calib])
def score(m):
    return (minilm.embed_batches(m, parts, order) * dense_eval).sum(1).mean().item()
print("sparsegpt", round(score(sparse), 4), flush=True)
params = [p for n, p in sparse.named_parameters() if p.requires_grad]
for p in sparse.parameters(): p.requires_grad_(False)
train = [m.values for m in sparse.modules() if hasattr(m, "values") and isinstance(m.values, torch.nn.Parameter)]
for p in train: p.requires_grad_(True)
print(len(train), "sparse value tensors trained")
opt = torch.optim.Adam(train, lr=lr)
sparse.train(False)
t0 = time.time()
for ep in range(epochs):
    tot = 0
    for b, tgt in zip(calib, targets):
        out = sparse(**b).last_hidden_state
        mask = b["attention_mask"].unsqueeze(-1).float()
        loss = (((out - tgt) ** 2) * mask).sum() / mask.sum() / out.shape[-1]
        opt.zero_grad(); loss.backward(); opt.step(); tot += loss.item()
    print(ep, round(tot / len(calib), 5), round(score(sparse), 4), f"{time.time()-t0:.0f}s", flush=True)
