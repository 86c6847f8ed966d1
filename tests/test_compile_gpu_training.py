"""A compiled training step through sparse layers on the GPU. On the CPU, inductor gave wrong
gradients when a custom op's product came back row-major and was transposed inside the graph
(test_compile_cpu_training.py); on the GPU the CSR kernels past the few-token walk still write
row-major, so every route a Llama's linears take is compared here, compiled against eager."""

import pytest
import torch

import sparsekernels as sk
from _helpers import tiny_hf_llama

transformers = pytest.importorskip("transformers")

TOKENS = [pytest.param((1, 4), id="4-tokens"), pytest.param((2, 40), id="80-tokens"),
          pytest.param((4, 128), id="512-tokens")]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("shape", TOKENS)
@pytest.mark.parametrize("pattern", ["2:4", "4:8", 0.7, 0.9])
def test_compiled_llama_step_matches_eager_on_gpu(pattern, shape):
    torch.manual_seed(0)
    model = tiny_hf_llama(vocab=256, hidden=128, layers=2, intermediate=384, positions=256).cuda()
    sk.sparsify_(model, pattern, filter_fn=lambda module, fqn: "lm_head" not in fqn)
    ids = torch.randint(0, 256, shape, device="cuda")
    grads, losses = [], []
    previous_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for run in (model, torch.compile(model)):
            model.zero_grad()
            loss = run(input_ids=ids, labels=ids).loss
            loss.backward()
            losses.append(loss.detach())
            grads.append(
                {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
            )
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous_tf32
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    assert grads[0].keys() == grads[1].keys() and any("mlp" in n for n in grads[0])
    for name, eager in grads[0].items():
        assert eager.abs().sum() > 0, name
        torch.testing.assert_close(grads[1][name], eager, rtol=1e-4, atol=1e-5, msg=name)
