"""Fused block-sparse attention (backend triton_flash): the block layout, the kernels in the
interpreter against float64, gradients, dispatch, registration; GPU checks at L = 8192."""

import math

import pytest
import torch

import sparsekernels as sk
from _attention_cases import (
    assert_attention_close,
    local_strided_gpu,
    mask_of,
    own_attention,
    pattern_of,
)
from _helpers import dense_attention, randn
from sparsekernels.formats._block_layout import to_dense_mask
from sparsekernels.kernels import attention_block as kernel
from sparsekernels.kernels.attention_tuning import (
    BLOCK_ATTENTION_SPLIT_FILL,
    block_attention_config,
)
from sparsekernels.ops import _attention_library, _dispatch


# ============================================================================ layout
@pytest.mark.parametrize("kind", ["causal", "local_strided", "summary", "block", "random"])
@pytest.mark.parametrize("shape", [(45, 45), (40, 56), (64, 33)])
@pytest.mark.parametrize("tile", [(16, 16), (16, 32), (32, 16)])
def test_layout_covers_each_entry_once(kind, shape, tile, gen):
    keep = mask_of(kind, *shape, gen)
    layout = pattern_of(keep).pattern.block_layout(*tile, BLOCK_ATTENTION_SPLIT_FILL)
    assert torch.equal(to_dense_mask(layout), keep)  # also: no entry in two tiles, none past L
    assert layout.nnz == int(keep.sum())


def test_layout_full_tiles_skip_the_mask():
    keep = mask_of("block", 64, 64)
    layout = pattern_of(keep).pattern.block_layout(16, 16, BLOCK_ATTENTION_SPLIT_FILL)
    (component,) = layout.components
    assert component.row_perm is None and component.col_perm is None
    assert component.tiles == 4 and component.partial == 0 and (component.masks == -1).all()
    assert layout.fill == 1.0


def test_layout_splits_strided_patterns_and_is_cached():
    L = 512
    i = torch.arange(L)
    d = i[:, None] - i[None, :]
    strided = pattern_of((d >= 0) & ((d < 32) | (d % 64 == 0))).pattern
    layout = strided.block_layout(16, 16, BLOCK_ATTENTION_SPLIT_FILL)
    assert len(layout.components) == 2 and layout.components[1].row_perm is not None
    assert layout.tiles < 32 * 33 // 4  # a quarter of the causal tiles at most
    assert strided.block_layout(16, 16, BLOCK_ATTENTION_SPLIT_FILL) is layout
    summary = pattern_of((d >= 0) & ((d < 32) | (i[None, :] % 64 == 63))).pattern
    layout = summary.block_layout(16, 16, BLOCK_ATTENTION_SPLIT_FILL)
    assert len(layout.components) == 2 and layout.components[1].col_perm is not None
    assert layout.components[1].row_perm is None


# ============================================================================ kernels
CASES = [  # (pattern, Lq, Lk, D, batch, heads)
    ("local_strided", 160, 160, 16, 1, 1),  # two passes: natural and residue order
    ("summary", 80, 80, 32, 1, 2),  # two passes: natural and summary columns first
    ("block", 45, 45, 16, 2, 1),
    ("random", 40, 56, 16, 1, 1),
    ("causal", 33, 33, 64, 1, 1),
    ("empty_rows", 48, 48, 32, 1, 1),
]


@pytest.mark.parametrize("kind,lq,lk,d,batch,heads", CASES)
def test_forward_and_gradients(kind, lq, lk, d, batch, heads, gen):
    keep = mask_of(kind, lq, lk, gen)
    pattern = pattern_of(keep)
    q = randn(batch, heads, lq, d, gen=gen)
    k, v = randn(batch, heads, lk, d, gen=gen), randn(batch, heads, lk, d, gen=gen)
    g = randn(batch, heads, lq, d, gen=gen)
    scale = 1 / math.sqrt(d)
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    want = dense_attention(*ref, keep, scale)
    want.backward(g)
    ours = [t.float().requires_grad_() for t in (q, k, v)]
    got = sk.sparse_attention(*ours, pattern, backend="triton_flash")
    got.backward(g.float())
    own = [t.float().requires_grad_() for t in (q, k, v)]
    own_out = own_attention(*own, keep, scale)
    own_out.backward(g.float())
    assert_attention_close(got, want, own_out)
    for a, b, c in zip(ours, ref, own, strict=True):
        assert_attention_close(a.grad, b.grad, c.grad)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision(dtype, gen):
    keep = mask_of("local_strided", 64, 64)
    q, k, v, g = (randn(1, 2, 64, 32, gen=gen).to(dtype) for _ in range(4))
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    want = dense_attention(*ref, keep, 0.2)
    want.backward(g.double())
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    got = sk.sparse_attention(*ours, pattern_of(keep), 0.2, backend="triton_flash")
    got.backward(g)
    assert got.dtype == dtype and all(t.grad.dtype == dtype for t in ours)
    own = [t.clone().requires_grad_() for t in (q, k, v)]
    own_out = own_attention(*own, keep, 0.2)
    own_out.backward(g)
    assert_attention_close(got, want, own_out)
    for a, b, c in zip(ours, ref, own, strict=True):
        assert_attention_close(a.grad, b.grad, c.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("kind,L,passes", [("causal", 64, 1), ("local_strided", 160, 2)])
def test_backward_writes_every_gradient_element(kind, L, passes, dtype, gen, monkeypatch):
    """The gradients start unfilled: poisoned (NaN), every element must be written, zeros for
    keys no query sees and for queries that see none, with q, k, v strided as a projection's
    (B, L, H, D) views leave them. In fp16 two passes sum in fp32 scratch (poisoned too) and
    the last stores the fp16 gradients."""
    original = _attention_library._output_like
    monkeypatch.setattr(
        _attention_library, "_output_like", lambda *args: original(*args).fill_(float("nan"))
    )
    d, scale = 16, 0.25
    keep = mask_of(kind, L, L)
    keep[:16] = False  # a query tile with no keys
    keep[:, L - 16 :] = False  # a key tile no query sees
    config = block_attention_config(d, True)
    layout = pattern_of(keep).pattern.block_layout(
        config.block_m, config.block_n, BLOCK_ATTENTION_SPLIT_FILL
    )
    assert len(layout.components) == passes
    leaves = [randn(1, L, 2, d, gen=gen, dtype=torch.float32).to(dtype) for _ in range(3)]
    g = randn(1, 2, L, d, gen=gen, dtype=torch.float32).to(dtype)
    ref = [t.double().transpose(1, 2).requires_grad_() for t in leaves]
    dense_attention(*ref, keep, scale).backward(g.double())
    ours = [t.transpose(1, 2).requires_grad_() for t in leaves]
    sk.sparse_attention(*ours, pattern_of(keep), scale, backend="triton_flash").backward(g)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    for a, b in zip(ours, ref, strict=True):
        assert a.grad.dtype == dtype
        torch.testing.assert_close(a.grad.double(), b.grad, rtol=tol, atol=tol / 10)
    assert (ours[0].grad[:, :, :16] == 0).all() and (ours[1].grad[:, :, L - 16 :] == 0).all()


@pytest.mark.parametrize("tile", [(16, 64), (32, 128)])
@pytest.mark.parametrize("kind", ["local_strided", "random", "empty_rows"])
def test_tiles_of_several_mask_words(tile, kind, gen):
    """Tiles 64 and 128 keys wide hold 2 and 4 mask words a row (the H200's tiles; the CPU's
    are 16 wide, one word): each column takes its own word's bit, forward and gradients."""
    L, d, scale = 150, 16, 0.25
    keep = mask_of(kind, L, L, gen)
    layout = pattern_of(keep).pattern.block_layout(*tile, BLOCK_ATTENTION_SPLIT_FILL)
    assert any(c.partial for c in layout.components)
    q, k, v, g = (randn(1, 2, L, d, gen=gen, dtype=torch.float32) for _ in range(4))
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    want = dense_attention(*ref, keep, scale)
    want.backward(g.double())
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    got, _ = _attention_library.block_attention(*ours, layout.tensors(), scale, [*tile, 1, 1, 1, 1])
    got.backward(g)
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a.grad.double(), b.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["empty_rows", "summary"])
def test_every_output_written_and_lse(kind, gen):
    """Poisoned outputs (NaN) must all be overwritten; LSE = logsumexp(scale * scores)."""
    L, d, scale = 48, 16, 0.3
    keep = mask_of(kind, L, L)
    pattern = pattern_of(keep)
    config = block_attention_config(d, on_cpu=True)
    layout = pattern.pattern.block_layout(config.block_m, config.block_n, 1 / 8)
    q, k, v = (randn(1, 2, L, d, gen=gen, dtype=torch.float32) for _ in range(3))
    out = torch.full((1, 2, L, d), float("nan"))
    lse = torch.full((2, L), float("nan"))
    components = _attention_library._components(layout.tensors())
    for i, component in enumerate(components):
        kernel.block_attention_forward(
            q=q, k=k, v=v, out=out, lse=lse, component=component, merge=i > 0, scale=scale,
            block_m=config.block_m, block_n=config.block_n, num_warps=1, num_stages=1,
        )  # fmt: skip
    want = dense_attention(q, k, v, keep, scale)
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-6)
    scores = (q.double() @ k.double().transpose(-1, -2)) * scale
    want = scores.masked_fill(~keep, float("-inf")).logsumexp(-1).reshape(2, L)
    torch.testing.assert_close(kernel.log2_lse_to_natural(lse.double()), want, rtol=1e-5, atol=0)


def test_scale_and_strided_inputs(gen):
    """Non-contiguous q, k, v (a (B, L, H, D) view) and a custom scale; the output follows q's
    layout."""
    keep = mask_of("causal", 32, 32)
    q, k, v = (randn(1, 32, 2, 16, gen=gen, dtype=torch.float32).transpose(1, 2) for _ in "qkv")
    got = sk.sparse_attention(q, k, v, pattern_of(keep), scale=0.5, backend="triton_flash")
    want = dense_attention(q, k, v, keep, 0.5)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    assert got.transpose(1, 2).is_contiguous()  # q's layout, as SDPA: the reshape after is free
    contiguous = sk.sparse_attention(*(t.contiguous() for t in (q, k, v)), pattern_of(keep),
                                     scale=0.5, backend="triton_flash")  # fmt: skip
    assert contiguous.is_contiguous() and torch.equal(contiguous, got)


@pytest.mark.parametrize("dv", [0, 1, 40, 129])
def test_output_gradient_rowsums(dv, gen):
    """The backward's delta = rowsum(out * d_out) in fp32, read in place: strided out, an
    expanded d_out (the gradient of a sum) and a transposed one; rows past a 64-row tile."""
    from sparsekernels.kernels.attention_block_backward import output_gradient_rowsums

    out = randn(2, 70, 3, dv, gen=gen, dtype=torch.float16).transpose(1, 2)  # (2, 3, 70, dv)
    grads = [
        randn(2, 3, 70, dv, gen=gen, dtype=torch.float16),
        randn(1, 1, 1, dv, gen=gen, dtype=torch.float16).expand(2, 3, 70, dv),
        randn(2, 3, dv, 70, gen=gen, dtype=torch.float16).transpose(2, 3),
    ]
    for grad in grads:
        delta = output_gradient_rowsums(out, grad)
        want = (out.double() * grad.double()).sum(-1).reshape(6, 70)
        assert delta.dtype == torch.float32 and delta.shape == (6, 70)
        torch.testing.assert_close(delta.double(), want, rtol=1e-6, atol=1e-5)


def test_empty_sizes():
    keep = torch.zeros(16, 0, dtype=torch.bool)
    q, k = torch.randn(1, 1, 16, 16), torch.randn(1, 1, 0, 16)
    out = sk.sparse_attention(q, k, k, pattern_of(keep), backend="triton_flash")
    assert out.shape == (1, 1, 16, 16) and (out == 0).all()


def test_head_dimension_zero(gen):
    """d = 0: every score is 0, so each query averages its stored values (the GPU property
    test found the fused path returning zeros here); dq and dk are empty, dv is not."""
    keep = mask_of("random", 9, 13, gen)
    q, k = randn(1, 2, 9, 0, gen=gen), randn(1, 2, 13, 0, gen=gen)
    v, g = randn(1, 2, 13, 3, gen=gen), randn(1, 2, 9, 3, gen=gen)
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    want = dense_attention(*ref, keep, 1.0)
    want.backward(g)
    ours = [t.float().requires_grad_() for t in (q, k, v)]
    got = sk.sparse_attention(*ours, pattern_of(keep), backend="triton_flash")
    got.backward(g.float())
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    assert ours[0].grad.shape == q.shape and ours[1].grad.shape == k.shape
    torch.testing.assert_close(ours[2].grad.double(), ref[2].grad, rtol=1e-5, atol=1e-6)


def _problem(keep, device="cuda", dtype=torch.bfloat16, d=64, batch=8):
    facts = {"batch": batch, "d": d, "dv": d, "pattern": pattern_of(keep).pattern}
    return _dispatch.Problem(torch.device(device), dtype, facts)


def test_dispatch_rules(gen, monkeypatch):
    from sparsekernels.kernels import attention_tuning

    monkeypatch.setattr(attention_tuning, "BLOCK_ATTENTION_AUTO", True)
    L = 512
    i = torch.arange(L)
    d = i[:, None] - i[None, :]
    local_strided = (d >= 0) & ((d < 128) | (d % 128 == 0))
    reasons = _dispatch.explain("sparse_attention", _problem(local_strided))
    assert reasons["triton_flash"] == [] and reasons["triton"] == []
    assert _dispatch.choose("sparse_attention", _problem(local_strided)) == "triton_flash"
    scattered = torch.rand(L, L, generator=gen) < 0.005  # every tile visited, 0.5% full
    assert "full" in " ".join(
        _dispatch.explain("sparse_attention", _problem(scattered))["triton_flash"]
    )
    assert _dispatch.choose("sparse_attention", _problem(scattered)) == "triton"
    wide = _dispatch.explain("sparse_attention", _problem(local_strided, d=256))["triton_flash"]
    assert "exceed 128" in wide[0]
    fp64 = _problem(local_strided, dtype=torch.float64)
    assert "float64" in _dispatch.explain("sparse_attention", fp64)["triton_flash"][0]
    fp32 = _dispatch.explain("sparse_attention", _problem(local_strided, dtype=torch.float32))
    assert "composed path is faster" in fp32["triton_flash"][0]
    on_cpu = _problem(local_strided, device="cpu", dtype=torch.float32)
    assert _dispatch.choose("sparse_attention", on_cpu) == "reference"
    monkeypatch.setattr(attention_tuning, "BLOCK_ATTENTION_AUTO", False)  # the user's way out
    assert (
        "turned off"
        in _dispatch.explain("sparse_attention", _problem(local_strided))["triton_flash"][0]
    )
    assert _dispatch.choose("sparse_attention", _problem(local_strided)) == "triton"


# ============================================================================ registration
def test_eager_inference_skips_the_op_with_the_same_bits(gen, monkeypatch):
    """Without gradients the kernels run without the custom op's dispatch; with them, eagerly,
    through the op's autograd.Function twin; when traced, through the op. Every route gives
    the same bits, gradients included."""
    from sparsekernels.ops import _attention_library, _library

    pattern = pattern_of(mask_of("summary", 32, 32))
    q, k, v, g = (randn(1, 2, 32, 16, gen=gen, dtype=torch.float32) for _ in "qkvg")
    through_op = []
    op = _attention_library.block_attention
    monkeypatch.setattr(
        _attention_library, "block_attention", lambda *a: through_op.append(1) or op(*a)
    )
    with torch.no_grad():
        eager = sk.sparse_attention(q, k, v, pattern, backend="triton_flash")
    assert not through_op

    def graded():
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = sk.sparse_attention(*leaves, pattern, backend="triton_flash")
        out.backward(g)
        return [out.detach(), *(t.grad for t in leaves)]

    twin = graded()
    assert not through_op and torch.equal(eager, twin[0])
    monkeypatch.setattr(_library, "eager", lambda *tensors: False)
    from sparsekernels.ops import attention

    monkeypatch.setattr(attention, "eager", lambda *tensors: False)
    through = graded()
    assert through_op
    assert all(torch.equal(a, b) for a, b in zip(twin, through, strict=True))


def test_opcheck_and_compile(gen):
    keep = mask_of("summary", 32, 32)
    pattern = pattern_of(keep)
    config = block_attention_config(16, on_cpu=True)
    layout = pattern.pattern.block_layout(config.block_m, config.block_n, 1 / 8)
    q, k, v = (randn(1, 1, 32, 16, gen=gen, dtype=torch.float32).requires_grad_() for _ in "qkv")
    args = (q, k, v, layout.tensors(), 0.25, config.as_list())
    torch.library.opcheck(
        torch.ops.sparsekernels.block_attention.default,
        args,
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
    )

    def f(q, k, v):
        return sk.sparse_attention(q, k, v, pattern, backend="triton_flash")

    eager = f(q, k, v)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
    torch.testing.assert_close(compiled, eager)
    compiled.sum().backward()
    assert all(t.grad is not None for t in (q, k, v))


# ============================================================================ GPU
@pytest.mark.gpu
def test_gpu_local_strided_8192_bf16(gen, monkeypatch):
    """Forward and gradients at L = 8192 against float64, within 4x bf16 SDPA's own error."""
    from sparsekernels.kernels import attention_tuning

    monkeypatch.setattr(attention_tuning, "BLOCK_ATTENTION_AUTO", True)
    attn, q, k, v, g = local_strided_gpu(8192, 2, torch.bfloat16, gen)
    problem = _dispatch.Problem(
        q.device, q.dtype, {"batch": 2, "d": 64, "dv": 64, "pattern": attn.pattern.pattern}
    )
    assert _dispatch.choose("sparse_attention", problem) == "triton_flash"
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    got = attn(*ours)
    got.backward(g)
    keep = attn.pattern.to_dense().bool()
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    want = dense_attention(*ref, keep, 1 / 8)
    want.backward(g.double())
    own = [t.clone().requires_grad_() for t in (q, k, v)]
    own_out = torch.nn.functional.scaled_dot_product_attention(*own, attn_mask=keep)
    own_out.backward(g)
    assert_attention_close(got, want, own_out)
    for a, b, c in zip(ours, ref, own, strict=True):
        assert_attention_close(a.grad, b.grad, c.grad)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("kind", ["summary", "random", "empty_rows"])
def test_gpu_patterns(kind, dtype, gen):
    keep = mask_of(kind, 1000, 1000, gen)
    pattern = pattern_of(keep).to(device="cuda")
    q, k, v, g = (randn(2, 3, 1000, 64, gen=gen, dtype=dtype, device="cuda") for _ in range(4))
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    got = sk.sparse_attention(*ours, pattern, backend="triton_flash")
    got.backward(g)
    keep = keep.cuda()
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    want = dense_attention(*ref, keep, 1 / 8)
    want.backward(g.double())
    own = [t.clone().requires_grad_() for t in (q, k, v)]
    own_out = own_attention(*own, keep, 1 / 8)
    own_out.backward(g)
    assert_attention_close(got, want, own_out)
    for a, b, c in zip(ours, ref, own, strict=True):
        assert_attention_close(a.grad, b.grad, c.grad)


@pytest.mark.gpu
def test_gpu_compile(gen):
    attn, q, k, v, _ = local_strided_gpu(2048, 2, torch.bfloat16, gen)
    pattern = attn.pattern

    def f(q, k, v):
        return sk.sparse_attention(q, k, v, pattern)

    eager = f(q, k, v)  # plans the layout (data-dependent) outside the graph
    compiled = torch.compile(f, fullgraph=True)(q, k, v)
    torch.testing.assert_close(compiled, eager)


def test_cases_cover_both_second_passes():
    orders = []
    for kind, lq, lk, *_ in CASES[:2]:
        layout = pattern_of(mask_of(kind, lq, lk)).pattern.block_layout(16, 16, 1 / 8)
        orders.append([(c.row_perm is None, c.col_perm is None) for c in layout.components])
    assert orders == [[(True, True), (False, False)], [(True, True), (True, False)]]
