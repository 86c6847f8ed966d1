"""sparse_attention_packed: packed projections (B, L, 3, H, D) against float64 dense attention
and against sparse_attention on their views; the fused kernel's backward writes qkv's gradient
whole (every element, no stack); fallbacks, errors, the layer and the models' cores."""

import math

import pytest
import torch

import sparsekernels as sk
from _attention_cases import assert_attention_close, mask_of, own_attention, pattern_of
from _helpers import assert_bitwise_equal, dense_attention, randn
from sparsekernels.kernels.attention_tuning import block_attention_config
from sparsekernels.models.masked import MaskedAttention
from sparsekernels.ops import _attention_library

CASES = [  # (pattern, L, D, batch, heads)
    ("local_strided", 160, 16, 1, 2),  # two components: the second pass sums into scratch
    ("causal", 33, 32, 2, 1),  # not a multiple of the tiles
    ("empty_rows", 48, 16, 1, 3),
    ("random", 40, 8, 2, 2),
]


def _views(qkv: torch.Tensor) -> list[torch.Tensor]:
    return [qkv[:, :, i].transpose(1, 2) for i in range(3)]


def _poisoned(monkeypatch) -> None:
    """qkv's gradient and the fp32 scratch start as NaN: every element must be written."""
    original = _attention_library._empty_packed
    monkeypatch.setattr(
        _attention_library, "_empty_packed", lambda *args: original(*args).fill_(float("nan"))
    )


@pytest.mark.parametrize("kind,L,d,batch,heads", CASES)
def test_values_and_gradient_against_float64(kind, L, d, batch, heads, gen, monkeypatch):
    _poisoned(monkeypatch)
    keep = mask_of(kind, L, L, gen)
    qkv, g = randn(batch, L, 3, heads, d, gen=gen), randn(batch, heads, L, d, gen=gen)
    scale = 1 / math.sqrt(d)
    ref = qkv.clone().requires_grad_()
    want = dense_attention(*_views(ref), keep, scale)
    want.backward(g)
    ours = qkv.float().requires_grad_()
    got = sk.sparse_attention_packed(ours, pattern_of(keep), backend="triton_flash")
    assert "Packed" in type(got.grad_fn).__name__  # the packed backward, not a stack's
    got.backward(g.float())
    own = qkv.float().requires_grad_()
    own_out = own_attention(*_views(own), keep, scale)
    own_out.backward(g.float())
    assert got.shape == (batch, heads, L, d)
    assert got.transpose(1, 2).is_contiguous()  # (B, L, H, D) in memory: the reshape is a view
    assert_attention_close(got, want, own_out)
    assert ours.grad.shape == qkv.shape and ours.grad.is_contiguous()
    for i in range(3):  # q's, k's and v's parts of the one gradient
        assert_attention_close(ours.grad[:, :, i], ref.grad[:, :, i], own.grad[:, :, i])


@pytest.mark.parametrize("kind,L", [("causal", 64), ("local_strided", 160)])
def test_same_bits_as_the_views_and_zeros_where_unseen(kind, L, gen, monkeypatch):
    """The same kernels with other output strides: the same bits as sparse_attention on q, k,
    v views of qkv (the gradient's values equal: the views' path adds the three views' zero-
    padded gradients, which turns a kernel's -0.0 into +0.0); queries that see no key and keys
    no query sees get exact zeros."""
    _poisoned(monkeypatch)
    keep = mask_of(kind, L, L)
    keep[:16] = False
    keep[:, L - 16 :] = False
    qkv = randn(1, L, 3, 2, 16, gen=gen, dtype=torch.float16)
    g = randn(1, 2, L, 16, gen=gen, dtype=torch.float16)
    packed, views = qkv.clone().requires_grad_(), qkv.clone().requires_grad_()
    a = sk.sparse_attention_packed(packed, pattern_of(keep), 0.25, backend="triton_flash")
    b = sk.sparse_attention(*_views(views), pattern_of(keep), 0.25, backend="triton_flash")
    a.backward(g)
    b.backward(g)
    assert_bitwise_equal(a, b)
    assert torch.equal(packed.grad, views.grad)
    assert (packed.grad[:, :16, 0] == 0).all() and (packed.grad[:, L - 16 :, 1:] == 0).all()


@pytest.mark.parametrize("backend", ["triton", "reference", None])
def test_other_backends_and_inference_match_the_views(backend, gen):
    keep = mask_of("local_strided", 48, 48)
    qkv, g = randn(2, 48, 3, 2, 8, gen=gen), randn(2, 2, 48, 8, gen=gen)
    packed, views = qkv.clone().requires_grad_(), qkv.clone().requires_grad_()
    a = sk.sparse_attention_packed(packed, pattern_of(keep), backend=backend)
    b = sk.sparse_attention(*_views(views), pattern_of(keep), backend=backend)
    a.backward(g)
    b.backward(g)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(packed.grad, views.grad, rtol=0, atol=0)
    with torch.no_grad():
        got = sk.sparse_attention_packed(qkv, pattern_of(keep), backend=backend)
    torch.testing.assert_close(got, b.detach(), rtol=0, atol=0)


def test_half_precision_and_autocast(gen):
    keep = mask_of("local_strided", 64, 64)
    qkv, g = randn(1, 64, 3, 2, 32, gen=gen), randn(1, 2, 64, 32, gen=gen)
    ref = qkv.clone().requires_grad_()
    want = dense_attention(*_views(ref), keep, 0.2)
    want.backward(g)
    for dtype in (torch.bfloat16, torch.float16):
        ours = qkv.to(dtype).requires_grad_()
        got = sk.sparse_attention_packed(ours, pattern_of(keep), 0.2, backend="triton_flash")
        got.backward(g.to(dtype))
        own = qkv.to(dtype).requires_grad_()
        own_out = own_attention(*_views(own), keep, 0.2)
        own_out.backward(g.to(dtype))
        assert got.dtype == dtype and ours.grad.dtype == dtype
        assert_attention_close(got, want, own_out)
        assert_attention_close(ours.grad, ref.grad, own.grad)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = sk.sparse_attention_packed(qkv.float(), pattern_of(keep))
    assert out.dtype == torch.bfloat16


def test_empty_sizes_and_head_dimension_zero(gen):
    keep = mask_of("causal", 16, 16)
    for shape in [(0, 16, 3, 2, 8), (1, 16, 3, 0, 8), (1, 16, 3, 2, 0)]:
        qkv = randn(*shape, gen=gen).float().requires_grad_()
        out = sk.sparse_attention_packed(qkv, pattern_of(keep), backend="triton_flash")
        assert out.shape == (shape[0], shape[3], 16, shape[4])
        out.sum().backward()
        assert qkv.grad.shape == qkv.shape and (qkv.grad == 0).all()


def test_second_derivatives_refused_on_the_fused_kernel(gen):
    keep = mask_of("causal", 32, 32)
    qkv = randn(1, 32, 3, 1, 8, gen=gen).float().requires_grad_()
    out = sk.sparse_attention_packed(qkv, pattern_of(keep), backend="triton_flash")
    with pytest.raises(RuntimeError, match="differentiable once"):
        torch.autograd.grad(out.sum(), qkv, create_graph=True)


def test_bad_inputs_are_named(gen):
    P = pattern_of(mask_of("causal", 8, 8))
    qkv = randn(1, 8, 3, 2, 4, gen=gen)
    with pytest.raises(TypeError, match="qkv"):
        sk.sparse_attention_packed(qkv.numpy(), P)
    with pytest.raises(ValueError, match="qkv"):
        sk.sparse_attention_packed(qkv[:, :, 0], P)
    with pytest.raises(ValueError, match=r"qkv must be \(batch, length, 3"):
        sk.sparse_attention_packed(qkv[:, :, :2], P)
    with pytest.raises(ValueError, match="pattern must have shape"):
        sk.sparse_attention_packed(qkv[:, :6], P)
    with pytest.raises(TypeError, match="pattern must be a CSRMatrix"):
        sk.sparse_attention_packed(qkv, torch.ones(8, 8))
    with pytest.raises(TypeError, match="float"):
        sk.sparse_attention_packed(qkv.long(), P)


def test_layer_and_masked_twin_take_packed_projections(gen):
    keep = mask_of("local_strided", 48, 48)
    attn, twin = sk.nn.SparseAttention(keep), MaskedAttention(keep)
    qkv = randn(2, 48, 3, 2, 8, gen=gen)
    want = attn(*_views(qkv))
    torch.testing.assert_close(attn(qkv), want, rtol=0, atol=0)
    torch.testing.assert_close(twin(qkv), twin(*_views(qkv)), rtol=0, atol=0)
    torch.testing.assert_close(twin(qkv), want, rtol=1e-12, atol=1e-12)
    with pytest.raises(TypeError, match="packed qkv alone"):
        attn(qkv, qkv)


def test_opcheck_and_compile_write_the_gradient_whole(gen):
    keep = mask_of("local_strided", 48, 48)
    pattern = pattern_of(keep)
    config = block_attention_config(16, on_cpu=True)
    layout = pattern.pattern.block_layout(config.block_m, config.block_n, 1 / 8)
    qkv = randn(2, 48, 3, 2, 16, gen=gen, dtype=torch.float32).requires_grad_()
    torch.library.opcheck(
        torch.ops.sparsekernels.block_attention_packed.default,
        (qkv, layout.tensors(), 0.25, config.as_list()),
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
    )

    def f(qkv):
        return sk.sparse_attention_packed(qkv, pattern, 0.25, backend="triton_flash")

    g = randn(2, 2, 48, 16, gen=gen, dtype=torch.float32)
    eager = qkv.detach().clone().requires_grad_()
    want = f(eager)
    want.backward(g)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    got = compiled(qkv)
    got.backward(g)
    assert_bitwise_equal(got, want)
    assert_bitwise_equal(qkv.grad, eager.grad)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpu_local_strided_4096_same_bits_as_the_views(dtype, gen, monkeypatch):
    """The H200's tiles (64 x 64, several mask words a row, two components) at L = 4096 with
    poisoned buffers: the packed backward's values are the views' (fp16 on an H100: 61 of
    6.3M gradient elements -0.0 here, +0.0 there, the views' path adding zeros)."""
    _poisoned(monkeypatch)
    attn = sk.nn.SparseAttention.local_strided(4096, window=128, stride=128, device="cuda")
    qkv = randn(2, 4096, 3, 4, 64, gen=gen, dtype=dtype, device="cuda")
    g = randn(2, 4, 4096, 64, gen=gen, dtype=dtype, device="cuda")
    packed, views = qkv.clone().requires_grad_(), qkv.clone().requires_grad_()
    a = sk.sparse_attention_packed(packed, attn.pattern, backend="triton_flash")
    b = sk.sparse_attention(*_views(views), attn.pattern, backend="triton_flash")
    assert "Packed" in type(a.grad_fn).__name__
    a.backward(g)
    b.backward(g)
    assert_bitwise_equal(a, b)
    assert torch.equal(packed.grad, views.grad)
    assert torch.isfinite(packed.grad).all()
