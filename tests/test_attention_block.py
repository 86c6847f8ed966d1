"""Fused block-sparse attention (backend triton_flash): the block layout, the kernels in the
interpreter against float64, gradients, dispatch, registration; GPU checks at L = 8192."""

import math

import pytest
import torch

import sparsekernels as sk
from _helpers import dense_attention, randn
from sparsekernels.formats._block_layout import to_dense_mask
from sparsekernels.kernels import attention_block as kernel
from sparsekernels.kernels.tuning import BLOCK_ATTENTION_SPLIT_FILL, block_attention_config
from sparsekernels.ops import _attention_library, _dispatch


def _mask(kind: str, lq: int, lk: int, gen=None) -> torch.Tensor:
    i, j = torch.arange(lq)[:, None], torch.arange(lk)[None, :]
    d = i - j
    if kind == "causal":
        return d >= 0
    if kind == "local_strided":  # SparseAttention.local_strided(window=6, stride=16)
        return (d >= 0) & ((d < 6) | (d % 16 == 0))
    if kind == "summary":  # the bench's strided: band plus every 16th column
        return (d >= 0) & ((d < 6) | (j % 16 == 15))
    if kind == "block":
        return i // 16 == j // 16
    if kind == "empty_rows":
        return (d >= 0) & (d < 20) & (i % 5 != 2)
    if kind == "random":
        return torch.rand(lq, lk, generator=gen) < 0.3
    raise ValueError(kind)


def _pattern(keep: torch.Tensor) -> sk.CSRMatrix:
    return sk.CSRMatrix.from_dense(keep.double(), mask=keep)


def _own(q, k, v, keep, scale):
    """The same dense math in the inputs' dtype: PyTorch's own error in that dtype."""
    scores = (q @ k.transpose(-1, -2)) * scale
    probs = scores.masked_fill(~keep, float("-inf")).softmax(-1)
    probs = torch.where(keep.any(-1, keepdim=True), probs, torch.zeros_like(probs))
    return probs @ v


def _assert_close(got, want, own, mult=4.0):
    """|got - want| within mult x PyTorch's own error in the dtype (or a few fp32 units)."""
    got, want, own = got.double().cpu(), want.double().cpu(), own.double().cpu()
    assert torch.isfinite(got).all(), "non-finite values"
    floor = 4e-6 * want.abs().max().clamp_min(1.0)
    allowed = mult * (own - want).abs().max() + floor
    err = (got - want).abs()
    assert err.max() <= allowed, f"max error {err.max():.3g} > {allowed:.3g} at {err.argmax()}"


# ============================================================================ layout
@pytest.mark.parametrize("kind", ["causal", "local_strided", "summary", "block", "random"])
@pytest.mark.parametrize("shape", [(45, 45), (40, 56), (64, 33)])
@pytest.mark.parametrize("tile", [(16, 16), (16, 32), (32, 16)])
def test_layout_covers_each_entry_once(kind, shape, tile, gen):
    keep = _mask(kind, *shape, gen)
    layout = _pattern(keep).pattern.block_layout(*tile, BLOCK_ATTENTION_SPLIT_FILL)
    assert torch.equal(to_dense_mask(layout), keep)  # also: no entry in two tiles, none past L
    assert layout.nnz == int(keep.sum())


def test_layout_full_tiles_skip_the_mask():
    keep = _mask("block", 64, 64)
    layout = _pattern(keep).pattern.block_layout(16, 16, BLOCK_ATTENTION_SPLIT_FILL)
    (component,) = layout.components
    assert component.row_perm is None and component.col_perm is None
    assert component.tiles == 4 and component.partial == 0 and (component.masks == -1).all()
    assert layout.fill == 1.0


def test_layout_splits_strided_patterns_and_is_cached():
    L = 512
    i = torch.arange(L)
    d = i[:, None] - i[None, :]
    strided = _pattern((d >= 0) & ((d < 32) | (d % 64 == 0))).pattern
    layout = strided.block_layout(16, 16, BLOCK_ATTENTION_SPLIT_FILL)
    assert len(layout.components) == 2 and layout.components[1].row_perm is not None
    assert layout.tiles < 32 * 33 // 4  # a quarter of the causal tiles at most
    assert strided.block_layout(16, 16, BLOCK_ATTENTION_SPLIT_FILL) is layout
    summary = _pattern((d >= 0) & ((d < 32) | (i[None, :] % 64 == 63))).pattern
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
    keep = _mask(kind, lq, lk, gen)
    pattern = _pattern(keep)
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
    own_out = _own(*own, keep, scale)
    own_out.backward(g.float())
    _assert_close(got, want, own_out)
    for a, b, c in zip(ours, ref, own, strict=True):
        _assert_close(a.grad, b.grad, c.grad)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision(dtype, gen):
    keep = _mask("local_strided", 64, 64)
    q, k, v, g = (randn(1, 2, 64, 32, gen=gen).to(dtype) for _ in range(4))
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    want = dense_attention(*ref, keep, 0.2)
    want.backward(g.double())
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    got = sk.sparse_attention(*ours, _pattern(keep), 0.2, backend="triton_flash")
    got.backward(g)
    assert got.dtype == dtype and all(t.grad.dtype == dtype for t in ours)
    own = [t.clone().requires_grad_() for t in (q, k, v)]
    own_out = _own(*own, keep, 0.2)
    own_out.backward(g)
    _assert_close(got, want, own_out)
    for a, b, c in zip(ours, ref, own, strict=True):
        _assert_close(a.grad, b.grad, c.grad)


@pytest.mark.parametrize("kind", ["empty_rows", "summary"])
def test_every_output_written_and_lse(kind, gen):
    """Poisoned outputs (NaN) must all be overwritten; LSE = logsumexp(scale * scores)."""
    L, d, scale = 48, 16, 0.3
    keep = _mask(kind, L, L)
    pattern = _pattern(keep)
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
    keep = _mask("causal", 32, 32)
    q, k, v = (randn(1, 32, 2, 16, gen=gen, dtype=torch.float32).transpose(1, 2) for _ in "qkv")
    got = sk.sparse_attention(q, k, v, _pattern(keep), scale=0.5, backend="triton_flash")
    want = dense_attention(q, k, v, keep, 0.5)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    assert got.transpose(1, 2).is_contiguous()  # q's layout, as SDPA: the reshape after is free
    contiguous = sk.sparse_attention(*(t.contiguous() for t in (q, k, v)), _pattern(keep),
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
    out = sk.sparse_attention(q, k, k, _pattern(keep), backend="triton_flash")
    assert out.shape == (1, 1, 16, 16) and (out == 0).all()


def test_head_dimension_zero(gen):
    """d = 0: every score is 0, so each query averages its stored values (the GPU property
    test found the fused path returning zeros here); dq and dk are empty, dv is not."""
    keep = _mask("random", 9, 13, gen)
    q, k = randn(1, 2, 9, 0, gen=gen), randn(1, 2, 13, 0, gen=gen)
    v, g = randn(1, 2, 13, 3, gen=gen), randn(1, 2, 9, 3, gen=gen)
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    want = dense_attention(*ref, keep, 1.0)
    want.backward(g)
    ours = [t.float().requires_grad_() for t in (q, k, v)]
    got = sk.sparse_attention(*ours, _pattern(keep), backend="triton_flash")
    got.backward(g.float())
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    assert ours[0].grad.shape == q.shape and ours[1].grad.shape == k.shape
    torch.testing.assert_close(ours[2].grad.double(), ref[2].grad, rtol=1e-5, atol=1e-6)


def test_pair_chunks_cover_each_pair_once():
    for batch, heads, pairs in [(1, 1, 1), (2, 3, 1), (2, 3, 2), (3, 3, 6), (3, 2, 5), (2, 3, 9)]:
        rows = []
        for b0, b1, h0, h1 in _attention_library._pair_chunks(batch, heads, pairs):
            assert (b1 - b0) * (h1 - h0) <= pairs
            assert b1 - b0 == 1 or (h0, h1) == (0, heads)  # lse rows stay contiguous
            rows += [b * heads + h for b in range(b0, b1) for h in range(h0, h1)]
        assert rows == list(range(batch * heads))


MERGED_CHUNKS = [  # (batch, heads, pairs a chunk, q a (B, L, H, D) view, chunks)
    (1, 3, 1, False, 3),  # one head a chunk
    (2, 3, 2, False, 4),  # two heads, then the entry's last one
    (3, 2, 5, False, 2),  # whole entries: two, then one
    (2, 3, 2, True, 4),  # the output laid out (B, L, H, D) as q
]


@pytest.mark.parametrize("batch,heads,pairs,transposed,chunks", MERGED_CHUNKS)
def test_merged_forward_in_chunks_gives_the_same_bits(
    batch, heads, pairs, transposed, chunks, gen, monkeypatch
):
    """A two-component pattern with its fp32 scratch bounded to a few (batch, head) pairs:
    the bits of one chunk, output and lse; outputs and scratch poisoned (NaN) first."""
    from sparsekernels.kernels import tuning

    L, d, scale = 80, 16, 0.3
    keep = _mask("summary", L, L)
    config = block_attention_config(d, on_cpu=True)
    layout = _pattern(keep).pattern.block_layout(config.block_m, config.block_n, 1 / 8)
    assert len(layout.components) == 2
    shape = (batch, L, heads, d) if transposed else (batch, heads, L, d)
    q, k, v = (randn(*shape, gen=gen, dtype=torch.float16) for _ in "qkv")
    if transposed:
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    output_like = _attention_library._output_like

    def poisoned(*args):
        return output_like(*args).fill_(float("nan"))

    monkeypatch.setattr(_attention_library, "_output_like", poisoned)
    args = (q, k, v, layout.tensors(), scale, config.as_list())
    whole_out, whole_lse = _attention_library.block_attention_forward(*args)
    merge = _attention_library._merge_components
    calls = []
    monkeypatch.setattr(
        _attention_library, "_merge_components", lambda *a: calls.append(a) or merge(*a)
    )
    monkeypatch.setattr(tuning, "BLOCK_ATTENTION_SCRATCH_MIN_BYTES", pairs * L * d * 4)
    monkeypatch.setattr(tuning, "BLOCK_ATTENTION_SCRATCH_FRACTION", 0)
    out, lse = _attention_library.block_attention_forward(*args)
    assert len(calls) == chunks
    assert torch.equal(out, whole_out) and torch.equal(lse, whole_lse)
    assert out.stride() == whole_out.stride() and out.transpose(1, 2).is_contiguous() == transposed
    _assert_close(out, dense_attention(q, k, v, keep, scale), _own(q, k, v, keep, scale))
    scores = (q.double() @ k.double().transpose(-1, -2)) * scale
    want = scores.masked_fill(~keep, float("-inf")).logsumexp(-1).reshape(batch * heads, L)
    torch.testing.assert_close(kernel.log2_lse_to_natural(lse.double()), want, rtol=1e-5, atol=0)


def _merged_through_fp32(q, k, v, layout, scale, config):
    """The former merged forward: every pass through the launcher without `final` into one fp32
    output, left for the caller to convert; also its lse and the fp32 output before the last
    pass."""
    batch, heads, lq, _ = q.shape
    full = torch.full((batch, heads, lq, v.shape[3]), float("nan"), device=q.device)
    lse = torch.full((batch * heads, lq), float("nan"), device=q.device)
    block_m, block_n, num_warps, num_stages = config[:4]
    before_last = None
    for i, component in enumerate(_attention_library._components(layout)):
        before_last = full.clone()
        kernel.block_attention_forward(
            q=q, k=k, v=v, out=full, lse=lse, component=component, merge=i > 0, scale=scale,
            block_m=block_m, block_n=block_n, num_warps=num_warps, num_stages=num_stages,
        )  # fmt: skip
    return full, lse, before_last


def _stored_as(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x.to(dtype) as the kernel's store converts it: rounded to nearest even, except that
    Triton's CPU interpreter (3.9) truncates fp32 to bf16 (the GPU's cvt.rn rounds)."""
    if x.device.type == "cpu" and dtype == torch.bfloat16:
        return (x.view(torch.int32) & ~0xFFFF).view(torch.float32).to(dtype)  # exact
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_merged_forward_stores_its_last_pass_in_the_output_dtype(dtype, gen, monkeypatch):
    """The last component's pass reads the fp32 scratch and stores the output in q's dtype (a
    (B, L, H, D) view): the bits of every pass into fp32 then converted, the same lse, and the
    scratch as the earlier pass left it (only read by the last); outputs poisoned (NaN) first."""
    L, d, scale = 80, 16, 0.3
    keep = _mask("summary", L, L)
    config = block_attention_config(d, on_cpu=True)
    layout = _pattern(keep).pattern.block_layout(config.block_m, config.block_n, 1 / 8)
    assert len(layout.components) == 2
    q, k, v = (randn(1, L, 2, d, gen=gen, dtype=dtype).transpose(1, 2) for _ in "qkv")
    args = (q, k, v, layout.tensors(), scale, config.as_list())
    full, want_lse, before_last = _merged_through_fp32(*args)
    output_like = _attention_library._output_like
    made = []

    def poisoned(*args):
        made.append(output_like(*args).fill_(float("nan")))
        return made[-1]

    monkeypatch.setattr(_attention_library, "_output_like", poisoned)
    out, lse = _attention_library.block_attention_forward(*args)
    assert out.dtype == dtype and out.transpose(1, 2).is_contiguous()
    assert torch.equal(out, _stored_as(full, dtype)) and torch.equal(lse, want_lse)
    scratch = made[1]  # made after the output
    assert scratch.dtype == torch.float32 and torch.equal(scratch, before_last)


# ============================================================================ dispatch
def _problem(keep, device="cuda", dtype=torch.bfloat16, d=64, batch=8):
    facts = {"batch": batch, "d": d, "dv": d, "pattern": _pattern(keep).pattern}
    return _dispatch.Problem(torch.device(device), dtype, facts)


def test_dispatch_rules(gen, monkeypatch):
    from sparsekernels.kernels import tuning

    monkeypatch.setattr(tuning, "BLOCK_ATTENTION_AUTO", True)
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
    monkeypatch.setattr(tuning, "BLOCK_ATTENTION_AUTO", False)  # the user's way out
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

    pattern = _pattern(_mask("summary", 32, 32))
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
    keep = _mask("summary", 32, 32)
    pattern = _pattern(keep)
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
def _local_strided_gpu(L, heads, dtype, gen):
    attn = sk.nn.SparseAttention.local_strided(L, window=128, stride=128, device="cuda")
    q, k, v, g = (randn(1, heads, L, 64, gen=gen, dtype=dtype, device="cuda") for _ in range(4))
    return attn, q, k, v, g


@pytest.mark.gpu
def test_gpu_local_strided_8192_bf16(gen, monkeypatch):
    """Forward and gradients at L = 8192 against float64, within 4x bf16 SDPA's own error."""
    from sparsekernels.kernels import tuning

    monkeypatch.setattr(tuning, "BLOCK_ATTENTION_AUTO", True)
    attn, q, k, v, g = _local_strided_gpu(8192, 2, torch.bfloat16, gen)
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
    _assert_close(got, want, own_out)
    for a, b, c in zip(ours, ref, own, strict=True):
        _assert_close(a.grad, b.grad, c.grad)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("kind", ["summary", "random", "empty_rows"])
def test_gpu_patterns(kind, dtype, gen):
    keep = _mask(kind, 1000, 1000, gen)
    pattern = _pattern(keep).to(device="cuda")
    q, k, v, g = (randn(2, 3, 1000, 64, gen=gen, dtype=dtype, device="cuda") for _ in range(4))
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    got = sk.sparse_attention(*ours, pattern, backend="triton_flash")
    got.backward(g)
    keep = keep.cuda()
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    want = dense_attention(*ref, keep, 1 / 8)
    want.backward(g.double())
    own = [t.clone().requires_grad_() for t in (q, k, v)]
    own_out = _own(*own, keep, 1 / 8)
    own_out.backward(g)
    _assert_close(got, want, own_out)
    for a, b, c in zip(ours, ref, own, strict=True):
        _assert_close(a.grad, b.grad, c.grad)


@pytest.mark.gpu
def test_gpu_compile(gen):
    attn, q, k, v, _ = _local_strided_gpu(2048, 2, torch.bfloat16, gen)
    pattern = attn.pattern

    def f(q, k, v):
        return sk.sparse_attention(q, k, v, pattern)

    eager = f(q, k, v)  # plans the layout (data-dependent) outside the graph
    compiled = torch.compile(f, fullgraph=True)(q, k, v)
    torch.testing.assert_close(compiled, eager)


@pytest.mark.gpu
def test_gpu_merged_forward_scratch_is_bounded(gen):
    """strided:128:128 at L = 16384, 16 heads, fp16 merges two components in fp32: in chunks,
    the call adds under twice its output's bytes (in one, 97 MiB for a 32 MiB output)."""
    attn, q, k, v, _ = _local_strided_gpu(16384, 16, torch.float16, gen)
    config = block_attention_config(64, on_cpu=False)
    tiles = (config.block_m, config.block_n, BLOCK_ATTENTION_SPLIT_FILL)
    assert len(attn.pattern.pattern.block_layout(*tiles).components) > 1
    with torch.no_grad():
        sk.sparse_attention(q, k, v, attn.pattern, backend="triton_flash")  # plans, compiles
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out = sk.sparse_attention(q, k, v, attn.pattern, backend="triton_flash")
        torch.cuda.synchronize()
    added = torch.cuda.max_memory_allocated() - before
    assert added < 2 * out.numel() * out.element_size(), f"{added / 2**20:.1f} MiB added"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_merged_forward_stores_the_bits_of_the_fp32_path(dtype, gen):
    """strided:128:128 at L = 16384, 16 heads: the last pass's own fp16/bf16 store gives the bits
    of the fp32 output converted by torch (both round to nearest even), and the same lse."""
    attn, q, k, v, _ = _local_strided_gpu(16384, 16, dtype, gen)
    config = block_attention_config(64, on_cpu=False)
    tiles = (config.block_m, config.block_n, BLOCK_ATTENTION_SPLIT_FILL)
    layout = attn.pattern.pattern.block_layout(*tiles)
    assert len(layout.components) > 1
    args = (q, k, v, layout.tensors(), 1 / 8, config.as_list())
    full, want_lse, _ = _merged_through_fp32(*args)
    out, lse = _attention_library.block_attention_forward(*args)
    assert torch.equal(out, full.to(dtype)) and torch.equal(lse, want_lse)


def test_cases_cover_both_second_passes():
    orders = []
    for kind, lq, lk, *_ in CASES[:2]:
        layout = _pattern(_mask(kind, lq, lk)).pattern.block_layout(16, 16, 1 / 8)
        orders.append([(c.row_perm is None, c.col_perm is None) for c in layout.components])
    assert orders == [[(True, True), (False, False)], [(True, True), (True, False)]]
