"""2:4 NMMatrix <-> torch semi-structured tensors, and the cusparselt backend of spmm/linear.

On CPU: every rejection (conversion errors, dispatch reasons), reading back CUTLASS-packed tensors
(torch decodes those in plain PyTorch), and the backend's plumbing (padding, layouts, bias and
activation, the packed-weight cache, autograd) with torch's two cuSPARSELt calls replaced by a
dense stand-in that checks what cuSPARSELt requires of its operands. On the GPU (marker gpu): the
round trip and the backend against float64 at LLM sizes.
"""

import warnings

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, randn, random_nm, spmm_bound
from sparsekernels.formats import semi_structured
from sparsekernels.kernels import tuning
from sparsekernels.ops import _cusparselt, _cusparselt_algs, _dispatch

HALF = [torch.float16, torch.bfloat16]


def _problem(device="cuda", dtype=torch.bfloat16, **facts):
    base = {"n": 16, "pattern": (2, 4, 1, 1), "transpose": False, "shape": (64, 128)}
    return _dispatch.Problem(torch.device(device), dtype, {**base, **facts})


def _cusparselt_reasons(problem, forced=False):
    return _cusparselt.reasons(problem, forced)


# ============================================================================ rejections (CPU)
@pytest.mark.parametrize(
    "n,m,vector,block,dtype,shape,message",
    [
        (2, 8, 1, 1, torch.bfloat16, (32, 64), "pattern 2:8 is not 2:4"),
        (2, 4, 4, 1, torch.bfloat16, (32, 64), "pattern 2:4,v=4 is not 2:4"),
        (2, 4, 1, 2, torch.float16, (32, 64), "pattern 2:4,b=2 is not 2:4"),
        (2, 4, 1, 1, torch.float32, (32, 64), "dtype float32 is not supported.*1:2, not 2:4"),
        (2, 4, 1, 1, torch.float64, (32, 64), "dtype float64 is not supported"),
        (2, 4, 1, 1, torch.float16, (24, 64), "weight shape 24x64 is not a multiple of 16x16"),
        (2, 4, 1, 1, torch.bfloat16, (32, 8), "weight shape 32x8 is not a multiple of 16x16"),
        (2, 4, 1, 1, torch.bfloat16, (32, 64), "tensors are on cpu; .* needs CUDA"),
    ],
)
def test_to_semi_structured_rejects(n, m, vector, block, dtype, shape, message, gen):
    W = random_nm(*shape, n, m, gen, vector, block, dtype)
    with pytest.raises(ValueError, match=message):
        W.to_semi_structured()


def test_cutlass_float32_refuses_pairs_it_would_halve(monkeypatch):
    """torch's CUTLASS packs float32 as 1:2 (one value a pair of columns): a 2:4 weight keeping
    both of a pair lost one silently. (CPU: the CUDA reasons skipped, the check comes first.)"""
    monkeypatch.setattr(semi_structured, "unsupported_reasons", lambda *a, **k: [])
    monkeypatch.setattr(semi_structured, "torch_backend", lambda: "cutlass")
    dense = torch.zeros(32, 32)
    dense[:, 0::4], dense[:, 2::4] = 1.0, 2.0  # one a pair: 1:2 holds it
    dense[5, 9], dense[5, 10] = 3.0, 0.0  # row 5's third group keeps columns 8 and 9
    W = sk.NMMatrix.from_dense(dense, 2, 4, mask=dense != 0)
    with pytest.raises(ValueError, match="row 5 keeps both of columns 8 and 9"):
        W.to_semi_structured()


def test_dispatch_lists_every_reason():
    bad = _problem(dtype=torch.float32, pattern=(2, 8, 1, 1), transpose=True, shape=(24, 64))
    reasons = " | ".join(_cusparselt_reasons(bad))
    for expected in ("pattern 2:8 is not 2:4", "dtype float32", "24x64", "W^T @ B"):
        assert expected in reasons, reasons
    if not semi_structured.cusparselt_built():
        assert "this torch build has no cuSPARSELt" in reasons
    if not torch.cuda.is_available():
        assert "CUDA is not available" in reasons
    on_cpu = " | ".join(_cusparselt_reasons(_problem("cpu")))
    assert "tensors are on cpu" in on_cpu


def test_dispatch_reason_from_the_tuning_rule(monkeypatch):
    monkeypatch.setattr(semi_structured, "unsupported_reasons", lambda *a, **k: [])
    decode = _problem(n=16, shape=(4096, 4096))
    assert any("kernels/tuning.py" in r for r in _cusparselt_reasons(decode))
    assert _cusparselt_reasons(decode, forced=True) == []  # backend="cusparselt" always runs
    assert _dispatch.choose("spmm_nm", decode) != "cusparselt"
    prefill = _problem(n=4096, shape=(4096, 4096))
    assert _cusparselt_reasons(prefill) == []
    assert _dispatch.choose("spmm_nm", prefill) == "cusparselt"


def test_tuning_rule_from_the_sweeps():
    """bf16 from 512 tokens (1.11-1.72x dense there); fp16 from 1024 on every K (its
    row-major product copied by the tiled transpose); never below, nor in fp32."""
    prefers = tuning.spmm_nm_prefers_cusparselt
    for n in (1, 16, 128, 256, 511, 512, 1023, 1024, 2048, 8192, 65536):
        assert prefers(4096, 4096, n, torch.bfloat16) == (n >= 512)
        assert prefers(4096, 4096, n, torch.float16) == (n >= 1024)
        assert prefers(4096, 14336, n, torch.float16) == (n >= 1024)
        assert not prefers(4096, 14336, n, torch.float32)
    assert tuning.CUSPARSELT_TILED_TRANSPOSE  # (fp16 at K = 4096 loses to dense without it)


def test_forcing_it_on_cpu_says_why(gen):
    W = random_nm(32, 64, 2, 4, gen, dtype=torch.bfloat16)
    x = randn(3, 64, gen=gen, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="'cusparselt' cannot run spmm_nm: tensors are on cpu"):
        sk.linear(x, W, backend="cusparselt")
    with pytest.raises(ValueError, match="pattern 2:8 is not 2:4"):
        sk.spmm(random_nm(32, 64, 2, 8, gen, dtype=torch.bfloat16), x.t(), backend="cusparselt")


# ============================================================================ reading back (CPU)
def _cutlass(dense: torch.Tensor):
    """A CUTLASS-packed semi-structured tensor built on CPU (torch packs it in plain PyTorch)."""
    from torch.sparse import SparseSemiStructuredTensorCUTLASS
    from torch.sparse._semi_structured_conversions import sparse_semi_structured_from_dense_cutlass

    packed, meta = sparse_semi_structured_from_dense_cutlass(dense)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SparseSemiStructuredTensorCUTLASS(dense.shape, packed, meta, None, None, None)


@pytest.mark.parametrize("dtype", HALF)
def test_from_semi_structured_cutlass_is_exact(dtype, gen):
    W = random_nm(64, 128, 2, 4, gen, dtype=dtype)
    back = sk.NMMatrix.from_semi_structured(_cutlass(W.to_dense()))
    assert (back.n, back.m, back.vector, back.block) == (2, 4, 1, 1)
    assert torch.equal(back.to_dense(), W.to_dense())
    assert torch.equal(back.indices, W.indices)  # no kept zeros: the same positions


def test_from_semi_structured_cutlass_float32_is_bit_exact(gen):
    """CUTLASS packs float32 as 1:2; torch's decode moves it as two fp16 halves, and on the
    CPU a half that reads as a signalling NaN came back with its quiet bit set."""
    from sparsekernels.prune import nm_mask

    w = torch.randn(32, 64, generator=gen)
    w[0, 0] = torch.tensor(0x3F80FC01, dtype=torch.int32).view(torch.float32)  # such a half
    dense = torch.where(nm_mask(w.abs() + (w == w[0, 0]) * 100, 1, 2), w, 0.0)  # (no -0.0)
    back = sk.NMMatrix.from_semi_structured(_cutlass(dense))
    assert torch.equal(back.to_dense().view(torch.int32), dense.view(torch.int32))


def test_from_semi_structured_keeps_the_packed_positions(gen):
    dense = random_nm(32, 64, 2, 4, gen, dtype=torch.float16).to_dense()
    dense[0, :4] = torch.tensor([0.0, 0.0, 5.0, 0.0])  # a group holding one nonzero
    dense[1, :4] = 0.0  # and none
    t = _cutlass(dense)
    back = sk.NMMatrix.from_semi_structured(t)
    assert torch.equal(back.to_dense(), dense)
    assert back.indices.shape == (32, 32)  # two kept in every group, zeros included
    assert 2 in back.indices[0, :2].tolist()


def test_from_semi_structured_rejects(gen):
    with pytest.raises(TypeError, match="must be a torch semi-structured tensor"):
        sk.NMMatrix.from_semi_structured(torch.zeros(32, 64))
    t = _cutlass(random_nm(32, 64, 2, 4, gen, dtype=torch.bfloat16).to_dense())
    with pytest.raises(ValueError, match="only the packing of its transpose"):
        sk.NMMatrix.from_semi_structured(t.t())


def test_from_semi_structured_refuses_non_finite_cusparselt_values():
    from torch.sparse import SparseSemiStructuredTensorCUSPARSELT

    rows, cols = 32, 64
    packed = torch.zeros(rows * cols * 9 // 16, dtype=torch.float16)  # values, then metadata
    packed[3] = float("inf")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = SparseSemiStructuredTensorCUSPARSELT(torch.Size([rows, cols]), packed, *[None] * 4)
    with pytest.raises(ValueError, match="stores Inf or NaN"):
        sk.NMMatrix.from_semi_structured(t)


# ============================================================================ plumbing (CPU)
class FakeCusparselt:
    """torch._cslt_compress / _cslt_sparse_mm on CPU: keeps the dense weight as the 'packed' one,
    multiplies in float32 and asserts what cuSPARSELt asks of its operands."""

    def __init__(self):
        self.compressed = 0
        self.layouts = []
        self.transposed = []

    def compress(self, dense):
        assert dense.is_contiguous() and dense.dim() == 2 and not dense.requires_grad
        self.compressed += 1
        return dense.clone()

    def sparse_mm(self, packed, b, bias=None, **kwargs):
        assert b.dim() == 2 and b.shape[0] == packed.shape[1] and b.dtype == packed.dtype
        assert b.is_contiguous() or b.t().is_contiguous(), b.stride()
        assert b.shape[1] % semi_structured.DENSE_MULTIPLE == 0, b.shape
        assert b.data_ptr() % 16 == 0
        self.layouts.append("row" if b.is_contiguous() else "column")
        out = packed.float() @ b.float()
        if bias is not None:
            assert bias.shape == (packed.shape[0],) and bias.is_contiguous()
            out = out + bias.float()[:, None]
        transposed = kwargs.get("transpose_result", False)
        self.transposed.append(transposed)
        return (out.t().contiguous() if transposed else out).to(b.dtype)

    def search(self, packed, b, bias=None, transpose_result=False):
        # the search runs the product on these operands
        self.sparse_mm(packed, b, bias, transpose_result=transpose_result)
        return 0


@pytest.fixture
def fake(monkeypatch):
    """The backend on CPU: fake cuSPARSELt calls, every constraint but the device still checked."""
    real = semi_structured.unsupported_reasons

    def reasons(*args, **kwargs):
        found = real(*args, **kwargs)
        return [r for r in found if not r.startswith("tensors are on")]

    lt = FakeCusparselt()
    monkeypatch.setattr(semi_structured, "unsupported_reasons", reasons)
    monkeypatch.setattr(torch, "_cslt_compress", lt.compress)
    monkeypatch.setattr(torch, "_cslt_sparse_mm", lt.sparse_mm)
    monkeypatch.setattr(torch, "_cslt_sparse_mm_search", lt.search)
    monkeypatch.setattr(torch._C, "_cusparselt", None, raising=False)
    _cusparselt_algs.clear()
    yield lt
    _cusparselt_algs.clear()


def _oracle(W, x, bias, activation):
    want = sk.reference.apply_activation(
        x.double() @ W.to_dense().double().t() + bias.double(), activation
    )
    bound = spmm_bound(x.double(), W.to_dense().double().t()) + bias.double().abs()
    return want, bound


@pytest.mark.parametrize("tokens", [1, 5, 8, 100])
@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
def test_backend_plumbing(tokens, activation, fake, gen):
    W = random_nm(48, 64, 2, 4, gen, dtype=torch.bfloat16)
    x = randn(tokens, 64, gen=gen, dtype=torch.bfloat16)
    bias = randn(48, gen=gen, dtype=torch.bfloat16)
    want, bound = _oracle(W, x, bias, activation)
    got = sk.spmm(W, x.t(), bias, activation, backend="cusparselt").t()
    assert_close(got, want, bound, torch.bfloat16)
    assert fake.layouts[-1] == ("row" if tokens == 1 else "column")  # x^T is read in place
    assert fake.transposed[-1] == (tokens > 1)  # and the product written as linear's result
    assert got.stride(-1) == 1  # linear's (tokens, rows) result, no copy needed
    linear_out = sk.linear(x, W, bias, backend="cusparselt")
    assert_close(sk.reference.apply_activation(linear_out, activation), want, bound, torch.bfloat16)
    got = sk.spmm(W, x.t().contiguous(), bias, activation, backend="cusparselt").t()
    assert_close(got, want, bound, torch.bfloat16)
    assert fake.layouts[-1] == "row" and not fake.transposed[-1]
    assert fake.compressed == 1  # packed once, cached on W


@pytest.mark.parametrize("dtype", HALF)
def test_linear_writes_transposed_in_bf16_only(dtype, fake, gen):
    W = random_nm(32, 64, 2, 4, gen, dtype=dtype)
    x = randn(24, 64, gen=gen, dtype=dtype)
    want, bound = _oracle(W, x, torch.zeros(32, dtype=torch.float64), "none")
    out = sk.linear(x, W, backend="cusparselt")
    assert_close(out, want, bound, dtype)
    assert out.is_contiguous() and fake.layouts[-1] == "column"
    assert fake.transposed[-1] == (dtype == torch.bfloat16)  # fp16: searching it faults


@pytest.mark.parametrize("tokens", [2, 21])
def test_fp16_tiled_transpose(tokens, fake, gen, monkeypatch):
    """fp16 with CUSPARSELT_TILED_TRANSPOSE: cuSPARSELt writes row-major (its transposed search
    faults), the tiled copy makes linear's order inside the op; padded token counts too."""
    monkeypatch.setattr(tuning, "CUSPARSELT_TILED_TRANSPOSE", True)
    W = random_nm(48, 64, 2, 4, gen, dtype=torch.float16)
    x = randn(tokens, 64, gen=gen, dtype=torch.float16)
    bias = randn(48, gen=gen, dtype=torch.float16)
    want, bound = _oracle(W, x, bias, "relu")
    got = sk.spmm(W, x.t(), bias, "relu", backend="cusparselt")
    assert not fake.transposed[-1] and fake.layouts[-1] == "column"
    assert got.shape == (48, tokens) and got.stride() == (1, 48)  # spmm_out's order
    assert_close(got.t(), want, bound, torch.float16)
    args = (W.values.clone().requires_grad_(), W.indices, None, x.t(), bias, "relu")
    torch.library.opcheck(torch.ops.sparsekernels.spmm_nm_cusparselt.default, args)
    out = sk.linear(x, W, bias, backend="cusparselt")
    assert out.is_contiguous()
    assert_close(sk.reference.apply_activation(out, "relu"), want, bound, torch.float16)
    row_major = sk.spmm(W, x.t().contiguous(), bias, backend="cusparselt")
    assert row_major.is_contiguous()  # a row-major B keeps a row-major product


def test_backend_odd_layouts(fake, gen):
    W = random_nm(32, 64, 2, 4, gen, dtype=torch.float16)
    wide = randn(64, 41, gen=gen, dtype=torch.float16)
    for b in (wide[:, 3:20], randn(64, 1, gen=gen, dtype=torch.float16).expand(64, 9)):
        want = W.to_dense().double() @ b.double()
        got = sk.spmm(W, b, backend="cusparselt")
        assert got.shape == (32, b.shape[1]) and got.is_contiguous()
        assert_close(got, want, spmm_bound(W.to_dense(), b), torch.float16)
    assert sk.spmm(W, wide[:, :0], backend="cusparselt").shape == (32, 0)


def _kept(values):
    """The packed weight kept for these values (ops/_cusparselt._packed), else None."""
    entry = _cusparselt._PACKED.get(values)
    return None if entry is None else entry[3]


def test_packed_weight_cache(fake, gen):
    W = random_nm(32, 64, 2, 4, gen, dtype=torch.bfloat16)
    x = randn(4, 64, gen=gen, dtype=torch.bfloat16)
    first = sk.linear(x, W, backend="cusparselt")
    packed = _kept(W.values)
    sk.linear(x, W, backend="cusparselt")
    assert fake.compressed == 1 and _kept(W.values) is packed
    with torch.no_grad():
        W.values.mul_(2)  # an optimizer step: same tensor, new version
    torch.testing.assert_close(sk.linear(x, W, backend="cusparselt"), 2 * first)
    assert fake.compressed == 2
    other = W.with_values(W.values.neg())  # another values tensor: its own copy
    torch.testing.assert_close(sk.linear(x, other, backend="cusparselt"), -2 * first)
    assert fake.compressed == 3
    torch.testing.assert_close(sk.linear(x, W, backend="cusparselt"), 2 * first)
    assert fake.compressed == 3  # (W's is still kept)
    size = len(_cusparselt._PACKED)
    del other
    assert len(_cusparselt._PACKED) == size - 1  # dropped with its values
    with torch.no_grad():
        # the pattern edited in place (mirrored in each group, still increasing): packed again
        W.indices.copy_((3 - W.indices).flip(-1))
    sk.linear(x, W, backend="cusparselt")
    assert fake.compressed == 4
    with torch.inference_mode():
        frozen = W.with_values(W.values.clone())
        sk.linear(x, frozen, backend="cusparselt")
        sk.linear(x, frozen, backend="cusparselt")
    assert fake.compressed == 6  # inference tensors carry no version: packed every call


def _mlp_2_4(gen) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.Linear(96, 48)
    ).bfloat16()
    sk.sparsify_(model, "2:4")
    return model


def test_a_compiled_graph_takes_it_with_each_weight_packed_once(fake, gen):
    """Under torch.compile spmm_nm's body chooses cuSPARSELt where an eager call would, and
    finds the weight packed once by its values (an eager call's copy, shared); an in-place
    update packs again. Before, a graph never took it (it would have packed every call)."""
    model = _mlp_2_4(gen)
    compiled = torch.compile(model, dynamic=True, fullgraph=True)
    x = randn(600, 64, gen=gen, dtype=torch.bfloat16)  # (bf16 takes cuSPARSELt from 512)
    with torch.no_grad():
        want = model(x)
        assert fake.compressed == 2
        products = len(fake.layouts)
        torch.testing.assert_close(compiled(x), want, rtol=2e-2, atol=2e-2)
    with torch.no_grad(), torch.compiler.set_stance("fail_on_recompile"):
        compiled(x[:530])
        assert len(fake.layouts) == products + 4  # both layers, both calls
        assert fake.compressed == 2  # the eager call's packed weights, found by the values
        compiled(x[:16])  # (decode sizes take other backends)
        assert len(fake.layouts) == products + 4
        model[0].values.mul_(-1)
        torch.testing.assert_close(compiled(x), model(x), rtol=2e-2, atol=2e-2)
        assert fake.compressed == 3  # layer 0 packed again, once


def test_a_compiled_graph_under_autocast_does_not_pack_every_call(fake, gen):
    """Under autocast the op sees a cast of the values the graph makes anew each call: the
    body then takes another backend rather than pack the weight every call."""
    model = _mlp_2_4(gen).float()
    compiled = torch.compile(model, dynamic=True, fullgraph=True)
    x = randn(600, 64, gen=gen, dtype=torch.float32)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = model(x)  # (eager: the cast kept per version, packed once)
        packed = fake.compressed
        for _ in range(3):
            torch.testing.assert_close(compiled(x).float(), want.float(), rtol=3e-2, atol=3e-2)
    assert fake.compressed == packed


def test_a_captured_training_step_packs_inside_the_graph(fake, gen, monkeypatch):
    """While a CUDA graph is captured (faked here), values that want a gradient in grad mode
    are packed inside it (a kept copy would replay stale after an optimizer step); inference
    captures read the kept copy."""
    W = random_nm(32, 64, 2, 4, gen, dtype=torch.bfloat16)
    values = W.values.clone().requires_grad_()
    monkeypatch.setattr(_cusparselt, "_capturing", lambda t: True)
    for _ in range(2):
        _cusparselt._packed(values, W.indices, 64)
    assert fake.compressed == 2 and _kept(values) is None
    with torch.no_grad():
        for _ in range(2):
            _cusparselt._packed(values, W.indices, 64)
    assert fake.compressed == 3 and _kept(values) is not None


def test_a_compiled_training_step_through_it(fake, gen):
    """Gradients of a compiled step whose forward took cuSPARSELt are eager's; the optimizer's
    steps pack the weights again (they are not replayed stale)."""
    model = _mlp_2_4(gen)
    twin = _mlp_2_4(gen)
    twin.load_state_dict(model.state_dict())
    compiled = torch.compile(model, dynamic=True)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (model, twin)]
    for step in range(3):
        x = randn(520 + step, 64, gen=gen, dtype=torch.bfloat16)
        for net, optimizer in zip((compiled, twin), optimizers, strict=True):
            optimizer.zero_grad()
            net(x).float().square().mean().backward()
            optimizer.step()
        for got, want in zip(model.parameters(), twin.parameters(), strict=True):
            torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    assert fake.compressed == 2 * 3 * 2  # each model's two weights, once after each step


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_backend_autograd_matches_reference(activation, fake, gen):
    W = random_nm(32, 64, 2, 4, gen, dtype=torch.bfloat16)
    x0 = randn(6, 64, gen=gen, dtype=torch.bfloat16)
    b0 = randn(32, gen=gen, dtype=torch.bfloat16)

    def grads(backend):
        values = W.values.detach().clone().requires_grad_()
        x, bias = x0.clone().requires_grad_(), b0.clone().requires_grad_()
        out = sk.spmm(W.with_values(values), x.t(), bias, activation, backend=backend)
        (out.float() * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().backward()
        return out, values.grad, x.grad, bias.grad

    for got, want in zip(grads("cusparselt"), grads("reference"), strict=True):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


def test_opcheck_and_compile(fake, gen):
    W = random_nm(32, 64, 2, 4, gen, dtype=torch.bfloat16)
    x = randn(5, 64, gen=gen, dtype=torch.bfloat16)
    bias = randn(32, gen=gen, dtype=torch.bfloat16)
    for packed in (None, _cusparselt._packed(W.values, W.indices, W.shape[1])):
        args = (W.values.clone().requires_grad_(), W.indices, packed, x.t(), bias, "relu")
        torch.library.opcheck(torch.ops.sparsekernels.spmm_nm_cusparselt.default, args)
    f = torch.compile(lambda x: sk.linear(x, W, bias, backend="cusparselt"), fullgraph=True)
    torch.testing.assert_close(f(x), sk.linear(x, W, bias, backend="cusparselt"))


# ============================================================================ on the GPU
def _cuda_nm(rows, cols, dtype, gen):
    return random_nm(rows, cols, 2, 4, gen, dtype=dtype, device="cuda")


def _needs_cusparselt():
    if torch.cuda.is_available() and not semi_structured.cusparselt_built():
        pytest.skip("this CUDA torch build has no cuSPARSELt")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
def test_round_trip_on_cuda(dtype, gen):
    _needs_cusparselt()
    W = _cuda_nm(4096, 4096, dtype, gen)
    t = W.to_semi_structured()
    assert isinstance(t, torch.sparse.SparseSemiStructuredTensor)
    back = sk.NMMatrix.from_semi_structured(t)
    assert back.device.type == "cuda"
    assert torch.equal(back.to_dense(), W.to_dense())
    assert torch.equal(back.indices, W.indices)
    x = randn(64, 4096, gen=gen, dtype=dtype, device="cuda")  # torch's own product on it
    want = x.double() @ W.to_dense().double().t()
    bound = x.double().abs() @ W.to_dense().double().abs().t()
    assert_close(torch.nn.functional.linear(x, t), want, bound, dtype)
    torch_made = torch.sparse.to_sparse_semi_structured(W.to_dense())
    assert torch.equal(sk.NMMatrix.from_semi_structured(torch_made).to_dense(), W.to_dense())


@pytest.mark.gpu
def test_round_trip_cutlass_on_cuda(gen, monkeypatch):
    from torch.sparse import SparseSemiStructuredTensor, SparseSemiStructuredTensorCUTLASS

    monkeypatch.setattr(SparseSemiStructuredTensor, "_FORCE_CUTLASS", True)
    W = _cuda_nm(256, 512, torch.bfloat16, gen)
    t = W.to_semi_structured()
    assert isinstance(t, SparseSemiStructuredTensorCUTLASS)
    assert torch.equal(sk.NMMatrix.from_semi_structured(t).to_dense(), W.to_dense())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("tokens", [1, 16, 100, 128, 2048])
def test_linear_through_cusparselt(dtype, tokens, gen):
    _needs_cusparselt()
    W = _cuda_nm(4096, 4096, dtype, gen)
    x = randn(tokens, 4096, gen=gen, dtype=dtype, device="cuda")
    bias = randn(4096, gen=gen, dtype=dtype, device="cuda")
    want, bound = _oracle(W, x, bias, "relu")
    got = torch.relu(sk.linear(x, W, bias, backend="cusparselt"))
    assert_close(got, want, bound, dtype)
    got = sk.spmm(W, x.t().contiguous(), bias, "relu", backend="cusparselt").t()  # row-major B
    assert_close(got, want, bound, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [3, 2048])
def test_fp16_tiled_transpose_on_cuda(tokens, gen, monkeypatch):
    _needs_cusparselt()
    monkeypatch.setattr(tuning, "CUSPARSELT_TILED_TRANSPOSE", True)
    W = _cuda_nm(4096, 4096, torch.float16, gen)
    x = randn(tokens, 4096, gen=gen, dtype=torch.float16, device="cuda")
    bias = randn(4096, gen=gen, dtype=torch.float16, device="cuda")
    want, bound = _oracle(W, x, bias, "relu")
    got = sk.spmm(W, x.t(), bias, "relu", backend="cusparselt")
    assert got.stride() == (1, 4096)  # linear's order, by the tiled copy
    assert_close(got.t(), want, bound, torch.float16)
    f = torch.compile(lambda x: sk.linear(x, W, bias, backend="cusparselt"), fullgraph=True)
    assert_close(torch.relu(f(x)), want, bound, torch.float16)


@pytest.mark.gpu
@pytest.mark.parametrize("shape,tokens", [((14336, 4096), 7), ((4096, 14336), 2048)])
def test_llama_mlp_shapes_through_cusparselt(shape, tokens, gen):
    _needs_cusparselt()
    W = _cuda_nm(*shape, torch.bfloat16, gen)
    x = randn(tokens, shape[1], gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(shape[0], gen=gen, dtype=torch.bfloat16, device="cuda")
    want, bound = _oracle(W, x, bias, "gelu")
    got = sk.spmm(W, x.t(), bias, "gelu", backend="cusparselt").t()
    assert_close(got, want, bound, torch.bfloat16)


@pytest.mark.gpu
def test_cusparselt_autograd_and_cache_on_cuda(gen):
    _needs_cusparselt()
    W = _cuda_nm(256, 512, torch.bfloat16, gen)
    x0 = randn(24, 512, gen=gen, dtype=torch.bfloat16, device="cuda")
    b0 = randn(256, gen=gen, dtype=torch.bfloat16, device="cuda")
    weights = randn(256, 24, gen=gen, device="cuda")  # a linear loss: both backward passes see
    # the same output gradient, so they differ by rounding only (activations: CPU tests above)

    def grads(backend):
        values = W.values.detach().clone().requires_grad_()
        x, bias = x0.clone().requires_grad_(), b0.clone().requires_grad_()
        out = sk.spmm(W.with_values(values), x.t(), bias, backend=backend)
        (out.double() * weights).sum().backward()
        return values.grad, x.grad, bias.grad

    for got, want in zip(grads("cusparselt"), grads("reference"), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    first = sk.linear(x0, W, backend="cusparselt")
    packed = _kept(W.values)
    sk.linear(x0, W, backend="cusparselt")
    assert _kept(W.values) is packed
    with torch.no_grad():
        W.values.mul_(2)
    torch.testing.assert_close(sk.linear(x0, W, backend="cusparselt"), 2 * first)


@pytest.mark.gpu
def test_cusparselt_opcheck_compile_and_dispatch_on_cuda(gen):
    _needs_cusparselt()
    W = _cuda_nm(128, 256, torch.float16, gen)
    x = randn(10, 256, gen=gen, dtype=torch.float16, device="cuda")
    bias = randn(128, gen=gen, dtype=torch.float16, device="cuda")
    args = (W.values.clone().requires_grad_(), W.indices, None, x.t(), bias, "relu")
    torch.library.opcheck(torch.ops.sparsekernels.spmm_nm_cusparselt.default, args)
    f = torch.compile(lambda x: sk.linear(x, W, bias, backend="cusparselt"), fullgraph=True)
    torch.testing.assert_close(f(x), sk.linear(x, W, bias, backend="cusparselt"))
    problem = _problem(dtype=torch.float16, n=10, shape=(128, 256))
    assert _cusparselt_reasons(problem, forced=True) == []
    assert any("kernels/tuning.py" in r for r in _cusparselt_reasons(problem))
