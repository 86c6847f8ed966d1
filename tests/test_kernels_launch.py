"""Fast launches (kernels/_launch.py): a Triton kernel's repeat specialization goes through its
compiled kernel's launcher. On the GPU, with VERIFY on (the JIT function's own lookup must find
the kernel launched): densify and the block attention's forward and backward give the bits of
launches through the JIT function, over calls that change the specialization (dtypes, sizes
equal to 1 or divisible by 16 or not, misaligned pointers) and calls that only change values."""

import pytest
import torch

import sparsekernels as sk
from _helpers import random_csr, random_nm
from sparsekernels.kernels import _launch
from sparsekernels.models.sparse_transformer import TransformerConfig, transformer_pair
from sparsekernels.ops import _dense

pytestmark = pytest.mark.gpu


@pytest.fixture
def verified(monkeypatch):
    if not _launch._USABLE:
        pytest.skip(f"fast launches need Triton {_launch.SUPPORTED_TRITON}, no interpreter")
    monkeypatch.setattr(_launch, "VERIFY", True)
    before = dict(_launch.stats)
    yield
    assert _launch.stats["fast"] > before["fast"]  # (the fast path ran)


def _through_jit(monkeypatch, call):
    with monkeypatch.context() as m:
        m.setattr(_launch, "_USABLE", False)
        return call()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_densify_csr_gives_the_jit_launchs_bits(dtype, gen, verified, monkeypatch):
    for rows, cols, density in [(37, 50, 0.3), (64, 64, 0.1), (1, 16, 1.0), (33, 1, 0.5)] * 2:
        W = random_csr(rows, cols, density, gen, dtype, device="cuda")
        for values in (W.values, torch.cat([W.values.new_zeros(1), W.values])[1:]):  # misaligned

            def call(v=values, W=W):
                return _dense.densify_csr(W.row_offsets, W.column_indices, v, W.shape[1])

            fast = call()
            assert torch.equal(fast, _through_jit(monkeypatch, call))
            want = sk.CSRMatrix(W.row_offsets, W.column_indices, values, W.shape).to_dense()
            assert torch.equal(fast, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_densify_nm_gives_the_jit_launchs_bits(dtype, gen, verified, monkeypatch):
    for rows, cols, n, m in [(37, 48, 2, 8), (16, 64, 1, 4), (1, 32, 2, 4)] * 2:
        W = random_nm(rows, cols, n, m, gen, dtype=dtype, device="cuda")

        def call(W=W):
            return _dense.densify_nm(W.values, W.indices, W.n, W.m, W.vector, W.block)

        fast = call()
        assert torch.equal(fast, _through_jit(monkeypatch, call))
        assert torch.equal(fast, W.to_dense())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_sparse_transformer_step_gives_the_jit_launchs_results(dtype, verified, monkeypatch):
    """The Sparse Transformer's training step (densify in its linears, the block attention's
    forward and backward over two components), three steps of fresh tokens at two lengths:
    fast launches against JIT ones (the loss bit for bit; gradients within rounding, as the
    backward's sums may be ordered otherwise)."""
    torch.manual_seed(0)
    for length in (256, 192, 256):
        cfg = TransformerConfig(vocab=32, dim=64, heads=2, layers=1, seq_len=length, window=32,
                                stride=32)  # fmt: skip
        model, _ = transformer_pair(cfg, "90%", dtype=dtype, device="cuda")
        tokens = torch.randint(0, 32, (1, length + 1), device="cuda")

        def step(model=model, tokens=tokens):
            loss = model.loss(tokens)
            grads = torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad])
            return loss.detach(), grads

        fast_loss, fast = step()
        jit_loss, jit = _through_jit(monkeypatch, step)
        assert torch.equal(fast_loss, jit_loss)
        for a, b in zip(fast, jit, strict=True):
            torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-3)
