"""depthwise_conv2d (3x3, padding 1, stride 1/2, fused bias + activation): the Triton kernel (in
the interpreter on CPU), the reference and torch backends against float64 F.conv2d; autograd,
opcheck, torch.compile, dispatch, input checks, the DepthwiseConv2d layer and MobileNet's use."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import sparsekernels as sk
from _helpers import ALL_DTYPES, assert_bitwise_equal, assert_close, randn
from sparsekernels.models.mobilenet import MobileNetV1, calibrate_, fold_
from sparsekernels.nn import DepthwiseConv2d
from sparsekernels.ops import _dispatch
from sparsekernels.ops.depthwise import depthwise_conv2d

F64 = torch.float64
# (N, C, H, W): one pixel, odd sizes not multiples of any tile, a plane wider than one W tile,
# a channel count that is a multiple of nothing, batch 1 and > 1.
SHAPES = [(1, 3, 1, 1), (2, 5, 7, 9), (1, 13, 2, 3), (3, 7, 10, 17), (1, 2, 5, 67)]


def _operands(shape, gen, dtype=F64, device="cpu", bias=True):
    x = randn(*shape, gen=gen, dtype=dtype, device=device)
    w = randn(shape[1], 1, 3, 3, gen=gen, dtype=dtype, device=device)
    b = randn(shape[1], gen=gen, dtype=dtype, device=device) if bias else None
    return x, w, b


def _oracle(x, w, b, stride, activation):
    """act(conv2d + bias) in float64, and the bound sum |w| |x| + |b| of each output."""
    xd, wd = x.double(), w.double()
    bd = b.double() if b is not None else None
    want = F.conv2d(xd, wd, bd, stride, 1, 1, x.shape[1])
    bound = F.conv2d(xd.abs(), wd.abs(), None, stride, 1, 1, x.shape[1])
    if b is not None:
        bound = bound + bd.abs()[:, None, None]
    return sk.reference.apply_activation(want, activation or "none"), bound


# ----------------------------------------------------------------------------- the kernel
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("blocks", [(2, 2, 4), (4, 4, 2)])
def test_kernel_writes_every_output(channels_last, stride, blocks, gen):
    """Small tiles (few programs: the interpreter is slow) so that every border case occurs;
    the output starts poisoned with NaN."""
    from sparsekernels.kernels import depthwise as kernel

    x, w, b = _operands((1, 3, 5, 7), gen)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    want, bound = _oracle(x, w, b, stride, "relu")
    out = torch.full_like(want, float("nan"))
    if channels_last:
        out = out.contiguous(memory_format=torch.channels_last)
    block_c, block_h, block_w = blocks
    kernel.depthwise_conv3x3(
        x=x,
        weight=w.reshape(3, 9),
        bias=b,
        out=out,
        stride=stride,
        activation="relu",
        block_c=block_c,
        block_h=block_h,
        block_w=block_w,
        num_warps=1,
    )
    assert_close(out, want, bound, F64)


# ----------------------------------------------------------------------------- forward
@pytest.mark.parametrize("backend", ["triton", "reference", "torch"])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_matches_float64(backend, stride, shape, gen):
    x, w, b = _operands(shape, gen)
    got = depthwise_conv2d(x, w, b, stride, "relu", backend=backend)
    want, bound = _oracle(x, w, b, stride, "relu")
    assert got.dtype == F64 and got.is_contiguous()
    assert_close(got, want, bound, F64)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("activation,bias", [(None, False), ("relu", True), ("gelu", True)])
def test_dtypes_activations_bias(dtype, activation, bias, gen):
    x, w, b = _operands((2, 6, 9, 11), gen, dtype, bias=bias)
    want, bound = _oracle(x, w, b, 2, activation)
    for backend in ("triton", "reference"):
        got = depthwise_conv2d(x, w, b, 2, activation, backend=backend)
        assert got.dtype == dtype
        assert_close(got, want, bound, dtype)


@pytest.mark.parametrize("backend", ["triton", "reference", "torch"])
def test_channels_last_and_strided_input(backend, gen):
    x, w, b = _operands((2, 9, 6, 7), gen)
    want, bound = _oracle(x, w, b, 1, "gelu")
    x_cl = x.contiguous(memory_format=torch.channels_last)
    got = depthwise_conv2d(x_cl, w, b, 1, "gelu", backend=backend)
    assert got.is_contiguous(memory_format=torch.channels_last)
    assert_close(got, want, bound, F64)
    wide = randn(2, 9, 6, 15, gen=gen)
    x_view = wide[..., ::2]  # neither layout: read through its strides
    want, bound = _oracle(x_view, w, b, 2, None)
    assert_close(depthwise_conv2d(x_view, w, b, 2, backend=backend), want, bound, F64)


def test_empty_batch_and_nan_propagation(gen):
    x, w, b = _operands((0, 4, 5, 5), gen)
    for backend in ("triton", "reference", "torch"):
        assert depthwise_conv2d(x, w, b, 2, backend=backend).shape == (0, 4, 3, 3)
    x, w, b = _operands((2, 0, 5, 5), gen)  # no channels: torch's conv2d refuses zero groups
    for backend in ("triton", "reference", "torch", None):
        assert depthwise_conv2d(x, w, b, 1, backend=backend).shape == (2, 0, 5, 5)
    x, w, b = _operands((1, 2, 6, 6), gen)
    x[0, 1, 2, 3] = float("nan")
    want, _ = _oracle(x, w, b, 1, "relu")
    for backend in ("triton", "reference"):
        got = depthwise_conv2d(x, w, b, 1, "relu", backend=backend)
        assert torch.equal(got.isnan(), want.isnan()) and int(got.isnan().sum()) == 9


def test_triton_matches_reference_bitwise_in_float32(gen):
    """Both add the 9 taps in the same order from zero, so fp32 results agree to the bit unless
    the kernel contracts multiply-adds; on the interpreter it does not."""
    x, w, b = _operands((2, 3, 8, 5), gen, torch.float32)
    a = depthwise_conv2d(x, w, b, 1, "relu", backend="triton")
    assert_bitwise_equal(a, depthwise_conv2d(x, w, b, 1, "relu", backend="triton"))
    assert_bitwise_equal(a, depthwise_conv2d(x, w, b, 1, "relu", backend="reference"))


# ----------------------------------------------------------------------------- backward
@pytest.mark.parametrize("backend", ["triton", "reference", "torch"])
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_backward_matches_conv2d(backend, activation, gen):
    x, w, b = _operands((2, 3, 5, 6), gen)
    grad = randn(2, 3, 3, 3, gen=gen)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    depthwise_conv2d(*leaves, 2, activation, backend=backend).backward(grad)
    twins = [t.clone().requires_grad_() for t in (x, w, b)]
    out = F.conv2d(twins[0], twins[1], twins[2], 2, 1, 1, 3)
    sk.reference.apply_activation(out, activation or "none").backward(grad)
    for got, want in zip(leaves, twins, strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-12, atol=1e-12)


def test_gradcheck_reference(gen):
    x, w, b = (t.requires_grad_() for t in _operands((1, 2, 4, 5), gen))
    fn = lambda x, w, b: depthwise_conv2d(x, w, b, 1, "gelu", backend="reference")  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, w, b))


def test_opcheck(gen):
    op = torch.ops.sparsekernels.depthwise_conv2d.default
    x, w, b = _operands((2, 3, 5, 4), gen)
    x = x.contiguous(memory_format=torch.channels_last)
    args = (x.requires_grad_(), w.requires_grad_(), b.requires_grad_(), 2, "gelu")
    torch.library.opcheck(op, (*args, "reference"))
    torch.library.opcheck(op, (randn(1, 2, 3, 3, gen=gen), w[:2], None, 1, "none", "torch"))


def test_compile_fullgraph(gen):
    """The custom op (reference backend) and the automatic CPU choice (plain aten) trace into
    one graph with their backward (aot_eager: no C++ build on CPU; the GPU test uses inductor)."""
    x, w, b = (t.requires_grad_() for t in _operands((2, 3, 6, 5), gen))

    def program(x, w, b):
        y = depthwise_conv2d(x, w, b, 1, "relu", backend="reference")
        return depthwise_conv2d(y, w, None, 2, "gelu").sum()

    eager = program(x, w, b)
    compiled = torch.compile(program, fullgraph=True, backend="aot_eager")(x, w, b)
    torch.testing.assert_close(compiled, eager)
    compiled.backward()
    assert all(t.grad is not None for t in (x, w, b))


# ----------------------------------------------------------------------------- dispatch
def _facts(**kw):
    facts = {"batch": 32, "channels": 64, "height": 56, "width": 56, "stride": 1}
    return {**facts, "channels_last": False, "fits_int32": True, **kw}


def test_dispatch_cpu_picks_torch(gen):
    problem = _dispatch.Problem(torch.device("cpu"), torch.float32, _facts())
    assert _dispatch.choose("depthwise_conv2d", problem) == "torch"
    assert _dispatch.explain("depthwise_conv2d", problem)["triton"]  # by name only on CPU


def test_dispatch_cuda_follows_the_tuning_rule(monkeypatch):
    from sparsekernels.kernels import depthwise_tuning

    def choose(dtype=torch.bfloat16, **kw):
        problem = _dispatch.Problem(torch.device("cuda"), dtype, _facts(**kw))
        return _dispatch.choose("depthwise_conv2d", problem), _dispatch.explain(
            "depthwise_conv2d", problem
        )

    assert choose()[0] == "triton"  # measured faster than cuDNN (H200)
    assert choose(torch.float32, batch=1, height=28, width=28, stride=2)[0] == "triton"
    name, reasons = choose(torch.float32, height=28, width=28, stride=2)  # cuDNN as fast
    assert name == "torch" and "depthwise_prefers_triton" in reasons["triton"][0]
    assert choose(height=28, width=28, stride=2)[0] == "triton"  # bf16 still wins there
    assert choose(height=14, width=14, stride=2)[0] == "torch"
    assert choose(channels_last=True)[0] == "torch"  # not measured
    assert choose(F64)[0] == "torch"
    name, reasons = choose(fits_int32=False)
    assert name == "torch" and "2^31" in reasons["triton"][0]
    monkeypatch.setattr(depthwise_tuning, "depthwise_prefers_triton", lambda *args: False)
    assert choose()[0] == "torch"


def test_inference_skips_the_custom_op(gen, monkeypatch):
    from sparsekernels.ops import depthwise as op

    calls = []
    monkeypatch.setattr(op, "_depthwise_op", lambda *args: calls.append(args))
    x, w, b = _operands((1, 2, 4, 4), gen)
    with torch.no_grad():
        depthwise_conv2d(x, w.requires_grad_(), b, backend="reference")
    assert not calls
    depthwise_conv2d(x, w, b, backend="reference")
    assert len(calls) == 1  # autograd needs the custom op


def test_forced_backend_errors(gen, monkeypatch):
    x, w, b = _operands((1, 2, 3, 3), gen)
    with pytest.raises(ValueError, match="backend must be one of"):
        depthwise_conv2d(x, w, b, backend="cudnn")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="'triton' cannot run depthwise_conv2d"):
        depthwise_conv2d(x, w, b, backend="triton")


# ----------------------------------------------------------------------------- bad input
def test_bad_inputs_name_the_argument(gen):
    x, w, b = _operands((2, 4, 5, 5), gen)
    cases = [
        ((x, randn(4, 1, 5, 5, gen=gen)), {}, ValueError, "weight must be a 3x3 kernel"),
        ((x, randn(4, 1, 3, 3, 1, gen=gen)), {}, ValueError, "weight must be a 3x3"),
        ((x, randn(2, 2, 3, 3, gen=gen)), {}, ValueError, r"weight must have shape \(4, 1, 3, 3\)"),
        ((x, randn(5, 1, 3, 3, gen=gen)), {}, ValueError, "groups = channels = 4"),
        ((x, w, randn(5, gen=gen)), {}, ValueError, r"bias must have shape \(4,\)"),
        ((x, w.float()), {}, TypeError, "weight is torch.float32"),
        ((x, w, b.half()), {}, TypeError, "bias is torch.float16"),
        ((x.int(), w), {}, TypeError, "x must be float16"),
        ((x[0], w), {}, ValueError, "x must have 4 dimensions"),
        ((x[:, :, :0], w), {}, ValueError, "nonempty height"),
        (("x", w), {}, TypeError, "x must be a torch.Tensor"),
        ((x, w.to_sparse()), {}, TypeError, "weight must be a dense"),
        ((x, w.to("meta")), {}, ValueError, "x on cpu, weight on meta"),
        ((x, w), {"stride": 3}, ValueError, "stride must be 1 or 2"),
        ((x, w), {"stride": 1.0}, TypeError, "stride must be an int"),
        ((x, w), {"stride": True}, TypeError, "stride must be an int"),
        ((x, w), {"activation": "relu6"}, ValueError, "activation must be"),
    ]
    for args, kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            depthwise_conv2d(*args, **kwargs)


# ----------------------------------------------------------------------------- the layer
def _depthwise_conv(channels, stride, gen, bias=True):
    conv = nn.Conv2d(channels, channels, 3, stride, 1, groups=channels, bias=bias).double()
    with torch.no_grad():
        conv.weight.copy_(randn(channels, 1, 3, 3, gen=gen))
        if bias:
            conv.bias.copy_(randn(channels, gen=gen))
    return conv


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_matches_conv(stride, bias, gen):
    conv = _depthwise_conv(6, stride, gen, bias)
    layer = DepthwiseConv2d.from_conv(conv, activation="relu")
    assert "6, stride=" in repr(layer) and "relu" in repr(layer)
    x = randn(2, 6, 7, 8, gen=gen)
    want = conv(x).relu()
    torch.testing.assert_close(layer(x), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(layer(x[1]), want[1], rtol=1e-12, atol=1e-12)  # unbatched
    back = layer.to_conv()
    torch.testing.assert_close(back(x).relu(), want, rtol=0, atol=0)
    state = DepthwiseConv2d(6, stride, bias).double()
    state.load_state_dict(layer.state_dict())
    torch.testing.assert_close(state(x), conv(x), rtol=1e-12, atol=1e-12)
    assert layer.float()(x.float()).dtype == torch.float32


def test_layer_trains(gen):
    layer = DepthwiseConv2d.from_conv(_depthwise_conv(3, 1, gen), activation="gelu")
    layer(randn(2, 3, 4, 4, gen=gen)).sum().backward()
    assert layer.weight.grad.shape == (3, 1, 3, 3) and layer.bias.grad.shape == (3,)


def test_layer_rejects_what_is_not_depthwise_3x3():
    for conv in (
        nn.Conv2d(8, 8, 3, padding=1),
        nn.Conv2d(8, 16, 3, padding=1, groups=8),
        nn.Conv2d(8, 8, 5, padding=2, groups=8),
        nn.Conv2d(8, 8, 3, padding=0, groups=8),
        nn.Conv2d(8, 8, 3, padding="same", groups=8),
        nn.Conv2d(8, 8, 3, padding=1, groups=8, padding_mode="reflect"),
        nn.Conv2d(8, 8, 3, padding=1, groups=8, dilation=2),
        nn.Conv2d(8, 8, 3, stride=3, padding=1, groups=8),
    ):
        with pytest.raises(ValueError, match="depthwise 3x3"):
            DepthwiseConv2d.from_conv(conv)
    with pytest.raises(TypeError, match="nn.Conv2d"):
        DepthwiseConv2d.from_conv(nn.Linear(3, 3))
    with pytest.raises(ValueError, match="stride must be 1 or 2"):
        DepthwiseConv2d(4, stride=3)
    with pytest.raises(ValueError, match="4 channels"):
        DepthwiseConv2d(4)(torch.randn(1, 3, 5, 5))


def test_mobilenet_depthwise_layers_fuse_bias_and_relu():
    torch.manual_seed(0)
    plain = MobileNetV1(0.25).double()
    calibrate_(plain, torch.randn(4, 3, 32, 32, dtype=F64))
    fused = MobileNetV1(0.25).double()
    fused.load_state_dict(plain.state_dict())
    fold_(plain)
    fold_(fused, depthwise=True)
    layers = [m for m in fused.modules() if isinstance(m, DepthwiseConv2d)]
    assert len(layers) == 13 and all(m.activation == "relu" for m in layers)
    assert not any(isinstance(m, DepthwiseConv2d) for m in plain.modules())
    x = torch.randn(2, 3, 32, 32, dtype=F64)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), plain(x), rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- GPU (H200)
# MobileNetV1 sizes at 224 px: (N, C, H, W, stride).
GPU_SHAPES = [
    (1, 32, 112, 112, 1),
    (1, 64, 112, 112, 2),
    (32, 128, 56, 56, 1),
    (32, 512, 14, 14, 1),
    (32, 512, 14, 14, 2),
    (8, 1024, 7, 7, 1),
    (3, 57, 31, 29, 2),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", GPU_SHAPES)
@pytest.mark.parametrize("channels_last", [False, True])
def test_gpu_mobilenet_sizes(dtype, shape, channels_last, gen):
    *size, stride = shape
    x, w, b = _operands(size, gen, dtype, "cuda")
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    want, bound = _oracle(x, w, b, stride, "relu")
    got = depthwise_conv2d(x, w, b, stride, "relu", backend="triton")
    assert got.is_contiguous(memory_format=torch.channels_last) == channels_last
    assert_close(got, want, bound, dtype)
    auto = depthwise_conv2d(x, w, b, stride, "relu")  # whichever backend dispatch picks
    tf32 = 2.0**-10 / 1e-5 if dtype == torch.float32 else 1.0  # cuDNN may use TF32 in fp32
    assert_close(auto, want, bound * tf32, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("activation", [None, "gelu"])
def test_gpu_backward_and_compile(activation, gen):
    x, w, b = (t.requires_grad_() for t in _operands((4, 64, 28, 28), gen, F64, "cuda"))
    grad = randn(4, 64, 14, 14, gen=gen, device="cuda")
    depthwise_conv2d(x, w, b, 2, activation, backend="triton").backward(grad)
    twins = [t.detach().clone().requires_grad_() for t in (x, w, b)]
    out = F.conv2d(twins[0], twins[1], twins[2], 2, 1, 1, 64)
    sk.reference.apply_activation(out, activation or "none").backward(grad)
    for got, want in zip((x, w, b), twins, strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-10, atol=1e-10)
    fn = torch.compile(
        lambda x: depthwise_conv2d(x, w, b, 1, activation, backend="triton"), fullgraph=True
    )
    torch.testing.assert_close(fn(x.detach()), depthwise_conv2d(x.detach(), w, b, 1, activation))


@pytest.mark.parametrize("backend", ["torch", "reference", None])
def test_no_channels_with_gradients(backend):
    """F.conv2d refuses zero groups: the torch backend's empty answer had left the graph, and
    the op's backward called convolution_backward with 0 groups."""
    x = torch.randn(2, 0, 5, 5, requires_grad=True)
    w, b = torch.randn(0, 1, 3, 3, requires_grad=True), torch.randn(0, requires_grad=True)
    out = sk.ops.depthwise_conv2d(x, w, b, activation="relu", backend=backend)
    assert out.shape == (2, 0, 5, 5) and out.requires_grad
    grads = torch.autograd.grad(out, (x, w, b), torch.ones_like(out))
    assert [g.shape for g in grads] == [x.shape, w.shape, b.shape]


@pytest.mark.parametrize("backend", ["torch", "reference"])
def test_bf16_channels_last_weight_gradient_on_the_cpu(backend):
    """torch's CPU bf16 depthwise weight gradient on a channels_last x (stride 2, width 1)
    read uninitialized memory (~1e31 or NaN): both backends now take it in fp32."""
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(3, 6, 2, 1, generator=gen).to(torch.bfloat16)
    w0 = torch.randn(6, 1, 3, 3, generator=gen).to(torch.bfloat16)
    grad = torch.randn(3, 6, 1, 1, generator=gen).to(torch.bfloat16)
    w64 = w0.double().requires_grad_()
    (want,) = torch.autograd.grad(F.conv2d(x0.double(), w64, None, 2, 1, 1, 6), w64, grad.double())
    for _ in range(5):  # (what the memory held varies: ask more than once)
        x = x0.clone().contiguous(memory_format=torch.channels_last).requires_grad_()
        w = w0.clone().requires_grad_()
        out = sk.ops.depthwise_conv2d(x, w, None, 2, backend=backend)
        (d_w,) = torch.autograd.grad(out, w, grad.contiguous(memory_format=torch.channels_last))
        assert (d_w.double() - want).abs().max() < 0.02 * want.abs().max()
