"""A compiled training step through sparse layers on the CPU. The CPU backends wrote linear's
product row-major, transposed and copied by linear inside the compiled graph, and under
inductor a tiny Llama with sparse q, k, v and o gave wrong gradients or aborted with heap
corruption (CSR at 70%, 2:4, 4:8; aot_eager was exact). They write it in b's order now."""

import pytest
import torch

import sparsekernels as sk
from _helpers import randn, tiny_hf_llama

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("pattern", ["2:4", "4:8", 0.7])
def test_compiled_llama_step_with_sparse_attention_matches_eager(pattern, gen):
    torch.manual_seed(0)
    model = tiny_hf_llama(vocab=128, hidden=64, layers=1, intermediate=128, positions=64)
    sk.sparsify_(model, pattern, filter_fn=lambda module, fqn: "self_attn" in fqn)
    ids = torch.randint(0, 128, (2, 12), generator=gen)
    grads = []
    for run in (model, torch.compile(model)):
        model.zero_grad()
        run(input_ids=ids, labels=ids).loss.backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    assert len(grads[0]) == len(grads[1]) > 0
    for eager, compiled in zip(*grads, strict=True):
        torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)


def test_cpu_backends_write_in_b_order(gen):
    """linear's x^T is column-major: every backend returns the product that way (spmm_out)."""
    W = sk.NMMatrix.from_dense(
        randn(8, 16, gen=gen) * sk.prune.nm_mask(randn(8, 16, gen=gen), 2, 4), 2, 4
    )
    b = randn(5, 16, gen=gen).t()  # (16, 5) column-major
    A = sk.CSRMatrix.from_dense(W.to_dense())
    for matrix in (W, A):
        for backend in ("torch_sparse", "reference", "dense"):
            out = sk.spmm(matrix, b, backend=backend)
            assert out.stride() == (1, 8), (type(matrix).__name__, backend)
            torch.testing.assert_close(out, W.to_dense() @ b)
