"""torch inductor (CPU, torch 2.13): a compiled training step corrupts the heap when a custom op
returns a row-major (rows, tokens) product that the model transposes and copies, as
sparsekernels' linear did with its CPU backends' products (fifty-fourth session).

Plain PyTorch, no sparsekernels: a custom op computing w @ b (row-major, fake to match) used as
the q, k, v and o projections of a one-layer Llama. Eager and aot_eager agree; inductor gives
wrong gradients or aborts (munmap_chunk(): invalid pointer, corrupted size vs. prev_size).
sparsekernels now writes such products in b's order (ops/_layout.py in_b_order), which avoids
it. Not yet reported upstream (no network here). Run:

    TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python docs/upstream/inductor_transposed_custom_op.py
"""

import torch
import transformers
from torch import nn

transformers.logging.set_verbosity_error()


@torch.library.custom_op("probe::mm_rowmajor", mutates_args=())
def mm_rowmajor(w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (w @ b).contiguous()  # (rows, tokens) row-major whatever b's order


@mm_rowmajor.register_fake
def _(w, b):
    return b.new_empty((w.shape[0], b.shape[1]))


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, g):
    w, b = ctx.saved_tensors
    return mm_rowmajor(g, b.t().contiguous()), mm_rowmajor(w.t().contiguous(), g)


mm_rowmajor.register_autograd(_backward, setup_context=_setup)


class L(nn.Module):
    def __init__(self, lin):
        super().__init__()
        self.weight = nn.Parameter(lin.weight.detach().clone())

    def forward(self, x):
        t = x.reshape(-1, x.shape[-1])
        return mm_rowmajor(self.weight, t.t()).t().contiguous().view(*x.shape[:-1], -1)


torch.manual_seed(0)
config = transformers.LlamaConfig(
    vocab_size=128,
    hidden_size=64,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    max_position_embeddings=64,
    attention_bias=False,
)
model = transformers.LlamaForCausalLM(config).eval()
attn = model.model.layers[0].self_attn
for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
    setattr(attn, name, L(getattr(attn, name)))
ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(1))
grads = []
for run in (model, torch.compile(model)):
    model.zero_grad()
    run(input_ids=ids, labels=ids).loss.backward()
    grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
worst = max((grads[0][n] - grads[1][n]).abs().max().item() for n in grads[0])
print("max grad diff", worst)
