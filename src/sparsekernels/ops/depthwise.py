"""depthwise_conv2d: a 3x3 depthwise convolution (groups = channels, padding 1) with fused bias
and activation, MobileNet's other layer (Sputnik ships one beside its SpMM).

Backends, in the order automatic dispatch tries them:
- "triton": kernels/depthwise.py, one pass over the input and output. On CUDA it is chosen
  automatically only where `depthwise_prefers_triton` (kernels/depthwise_tuning.py) says it
  beats cuDNN; on CPU only by name, in Triton's interpreter.
- "torch": F.conv2d (cuDNN on CUDA) + bias + activation, unfused. This backend is plain aten:
  it runs outside the custom op, so it costs no custom-op overhead, keeps PyTorch's own autograd
  and lets torch.compile fuse the epilogue.
- "reference": the plain-PyTorch oracle below (9 shifted multiply-adds in a fixed order,
  fp32 accumulation, fp64 for fp64 inputs; bitwise reproducible).

The triton and reference backends run inside the custom op `sparsekernels::depthwise_conv2d`
(registered here, with its fake and autograd) whenever autograd or torch.compile is involved;
eager inference calls them directly, without the custom op's dispatch cost (a MobileNet layer
runs in a few microseconds). The backward is cuDNN's (aten's convolution_backward) on the
activation's gradient, so training works on every backend.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import _checks, reference
from . import _autocast, _dispatch
from ._autocast import backward_without_autocast
from ._forward_mode import depthwise_jvp
from ._library import _activation_grad, _func_twin, _save, call, eager_inference

Tensor = torch.Tensor


def depthwise_conv2d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int = 1,
    activation: str | None = None,
    *,
    backend: str | None = None,
) -> Tensor:
    """act(conv2d(x, weight, bias, stride, padding=1, groups=C)) for x (N, C, H, W).

    weight is (C, 1, 3, 3) as nn.Conv2d(C, C, 3, groups=C) holds it, bias (C,) or None, stride
    1 or 2, activation None, "relu" or "gelu". x may be NCHW or channels_last; the output keeps
    that layout. Differentiable in x, weight and bias.

    Example:
        >>> x = torch.randn(2, 8, 5, 5)
        >>> sk.ops.depthwise_conv2d(x, torch.randn(8, 1, 3, 3), stride=2, activation="relu").shape
        torch.Size([2, 8, 3, 3])
    """
    dtype = _autocast.target(x)
    if dtype is not None:  # as conv2d: in autocast's dtype
        with torch.autocast(x.device.type, enabled=False):
            cast = _autocast.cast
            return depthwise_conv2d(cast(x, dtype), cast(weight, dtype), cast(bias, dtype),
                                    stride, activation, backend=backend)  # fmt: skip
    activation = _checks.activation(activation)
    stride = _check_operands(x, weight, bias, stride)
    return depthwise_conv2d_raw(x, weight, bias, stride, activation, backend=backend)


def _check_operands(x, weight, bias, stride) -> int:
    _checks.tensor("x", x)
    _checks.ndim("x", x, [4])
    _checks.float_dtype("x", x)
    batch, channels, height, width = x.shape
    if height == 0 or width == 0:
        raise ValueError(f"x must have a nonempty height and width, got shape {tuple(x.shape)}")
    _checks.tensor("weight", weight)
    if weight.dim() != 4 or tuple(weight.shape[2:]) != (3, 3):
        raise ValueError(f"weight must be a 3x3 kernel (C, 1, 3, 3), got {tuple(weight.shape)}")
    if tuple(weight.shape[:2]) != (channels, 1):
        raise ValueError(
            f"weight must have shape ({channels}, 1, 3, 3): one 3x3 filter per channel of x "
            f"(groups = channels = {channels}), got {tuple(weight.shape)}"
        )
    operands = {"x": x, "weight": weight}
    if bias is not None:
        _checks.tensor("bias", bias)
        if tuple(bias.shape) != (channels,):
            raise ValueError(f"bias must have shape ({channels},), got {tuple(bias.shape)}")
        operands["bias"] = bias
    if not _checks.is_int(stride):
        raise TypeError(f"stride must be an int, got {type(stride).__name__}")
    stride = int(stride)  # (a NumPy integer as a Python int for the op and its backward)
    if stride not in (1, 2):
        raise ValueError(f"stride must be 1 or 2, got {stride}")
    _checks.same_device(operands)
    _checks.same_dtype(operands)
    return stride


def output_shape(x_shape, stride: int) -> tuple[int, int, int, int]:
    """(N, C, HO, WO) of a 3x3 convolution with padding 1."""
    batch, channels, height, width = x_shape
    return batch, channels, (height - 1) // stride + 1, (width - 1) // stride + 1


def is_channels_last(x: Tensor) -> bool:
    """Whether x is laid out channels_last (and not also plain contiguous): the output follows."""
    return not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)


def _memory_format(x: Tensor) -> torch.memory_format:
    return torch.channels_last if is_channels_last(x) else torch.contiguous_format


def _problem(x: Tensor, stride: int) -> _dispatch.Problem:
    batch, channels, height, width = x.shape
    x_span = sum((size - 1) * step for size, step in zip(x.shape[1:], x.stride()[1:], strict=True))
    _, _, height_out, width_out = output_shape(x.shape, stride)
    facts = {
        "batch": batch,
        "channels": channels,
        "height": height,
        "width": width,
        "stride": stride,
        "channels_last": is_channels_last(x),
        # the kernel's in-image offsets are int32 (kernels/depthwise.py)
        "fits_int32": max(x_span, channels * height_out * width_out - 1) < 2**31,
    }
    return _dispatch.Problem(x.device, x.dtype, facts)


def depthwise_conv2d_raw(x, weight, bias, stride, activation, hint=None, backend=None) -> Tensor:
    """The op on checked operands with its backend chosen (forced `backend`, else `hint` if it
    fits, else automatic)."""
    name = _dispatch.choose_with_hint("depthwise_conv2d", _problem(x, stride), backend, hint)
    if name == "torch" and x.shape[1]:  # (no channels: through the op, for its gradients)
        return _torch(x, weight, bias, stride, activation)
    if eager_inference(x, weight, bias):  # skip the custom op's dispatch cost
        return _run(x, weight, bias, stride, activation, name)
    return call(_depthwise_op, x, weight, bias, stride, activation, name)


def _run(x, weight, bias, stride, activation, backend) -> Tensor:
    out = _dispatch.run("depthwise_conv2d", backend, x, weight, bias, stride, activation)
    return out.contiguous(memory_format=_memory_format(x))


# ----------------------------------------------------------------------- the custom op
@torch.library.custom_op("sparsekernels::depthwise_conv2d", mutates_args=())
def _depthwise_op(
    x: Tensor, weight: Tensor, bias: Tensor | None, stride: int, activation: str, backend: str
) -> Tensor:
    """act(depthwise 3x3 conv of x + bias) by the named backend; output in x's layout."""
    return _run(x, weight, bias, stride, activation, backend)


@_depthwise_op.register_fake
def _(x, weight, bias, stride, activation, backend):
    shape = output_shape(x.shape, stride)
    return x.new_empty(shape).contiguous(memory_format=_memory_format(x))


def _setup(ctx, inputs, output):
    x, weight, bias, stride, activation, backend = inputs
    ctx.stride, ctx.activation, ctx.backend = stride, activation, backend
    ctx.has_bias = bias is not None
    _save(ctx, x, weight, bias, output)


@backward_without_autocast
def _backward(ctx, grad):
    x, weight, bias, out = ctx.saved_tensors
    stride = ctx.stride
    if x.shape[1] == 0:  # no channels: empty gradients (convolution_backward refuses 0 groups)
        d_bias = torch.zeros_like(bias) if ctx.has_bias else None
        return torch.zeros_like(x), torch.zeros_like(weight), d_bias, None, None, None

    def pre_activation():  # through the op: under torch.compile this backward is traced
        return call(_depthwise_op, x, weight, bias, stride, "none", ctx.backend)

    g = _activation_grad(grad, out, pre_activation, ctx.activation)
    mask = [
        ctx.needs_input_grad[0],
        ctx.needs_input_grad[1],
        ctx.has_bias and ctx.needs_input_grad[2],
    ]
    dtype = x.dtype
    half_on_cpu = x.device.type == "cpu" and x.element_size() == 2
    if half_on_cpu:  # in fp32: torch's CPU bf16 one read uninitialized memory (see _torch)
        g, x, weight = g.float(), x.float(), weight.float()
    d_x, d_weight, d_bias = torch.ops.aten.convolution_backward(
        g,
        x,
        weight,
        [x.shape[1]] if ctx.has_bias else None,
        [stride, stride],
        [1, 1],
        [1, 1],
        False,
        [0, 0],
        x.shape[1],
        mask,
    )
    if half_on_cpu:
        grads = (d_x, d_weight, d_bias)
        d_x, d_weight, d_bias = (None if t is None else t.to(dtype) for t in grads)
    return d_x, d_weight, d_bias, None, None, None


_depthwise_op.register_autograd(_backward, setup_context=_setup)
_func_twin("DepthwiseConv2dFunc", _depthwise_op, _setup, _backward, depthwise_jvp)


# ----------------------------------------------------------------------- backends
def reference_depthwise_conv2d(x, weight, bias, stride, activation) -> Tensor:
    """Plain PyTorch: the 9 taps as shifted multiply-adds, in a fixed order, accumulated in
    fp32 (fp64 for fp64 inputs); zero padding of 1."""
    acc = reference.accumulate_dtype(x.dtype)
    batch, channels, height_out, width_out = output_shape(x.shape, stride)
    padded = F.pad(x.to(acc), (1, 1, 1, 1))
    taps = weight.to(acc).reshape(channels, 9)
    out = torch.zeros((batch, channels, height_out, width_out), dtype=acc, device=x.device)
    rows, cols = stride * (height_out - 1) + 1, stride * (width_out - 1) + 1
    for kh in range(3):
        for kw in range(3):
            window = padded[:, :, kh : kh + rows : stride, kw : kw + cols : stride]
            out += taps[:, kh * 3 + kw, None, None] * window
    if bias is not None:
        out += bias.to(acc)[:, None, None]
    return reference.apply_activation(out, activation).to(x.dtype)


def _torch(x, weight, bias, stride, activation) -> Tensor:
    if x.shape[1] == 0:  # F.conv2d refuses zero groups; the answer is just empty
        return x.new_empty(output_shape(x.shape, stride))
    if x.device.type == "cpu" and x.element_size() == 2:
        # in fp32: torch 2.13's CPU bf16 depthwise weight gradient on channels_last x (stride
        # 2, width 1) read uninitialized memory: ~1e31 or NaN (tests/test_depthwise.py)
        bias = None if bias is None else bias.float()
        out = F.conv2d(x.float(), weight.float(), bias, stride, 1, 1, x.shape[1])
        out = out.contiguous(memory_format=_memory_format(x))
        return reference.apply_activation(out, activation).to(x.dtype)
    out = F.conv2d(x, weight, bias, stride, 1, 1, x.shape[1])
    return reference.apply_activation(out, activation)


def _triton(x, weight, bias, stride, activation) -> Tensor:
    from ..kernels import depthwise as kernel
    from ..kernels.depthwise_tuning import depthwise_config

    channels_last = is_channels_last(x)
    out = x.new_empty(output_shape(x.shape, stride)).contiguous(
        memory_format=torch.channels_last if channels_last else torch.contiguous_format
    )
    if out.numel() == 0:
        return out
    batch, channels, height_out, width_out = out.shape
    config = depthwise_config(
        batch, channels, height_out, width_out, channels_last, min_programs=_min_programs(x)
    )
    kernel.depthwise_conv3x3(
        x=x,
        weight=weight.reshape(x.shape[1], 9).contiguous(),
        bias=bias.contiguous() if bias is not None else None,
        out=out,
        stride=stride,
        activation=activation,
        block_c=config.block_c,
        block_h=config.block_h,
        block_w=config.block_w,
        num_warps=config.num_warps,
    )
    return out


def _min_programs(x: Tensor) -> int:
    from ..kernels.depthwise_tuning import DEPTHWISE_MIN_PROGRAMS

    return DEPTHWISE_MIN_PROGRAMS if x.device.type == "cuda" else 1


def _triton_reasons(problem: _dispatch.Problem, forced: bool) -> list[str]:
    from ..kernels.depthwise_tuning import depthwise_config, depthwise_prefers_triton
    from ..kernels.tuning import MAX_GRID_YZ

    reasons = _dispatch.triton_device_reasons(problem, forced)
    if reasons:  # (sizes unread: a symbolic size compared would guard a compiled graph)
        return reasons
    facts = problem.facts
    batch, channels = facts.get("batch", 1), facts.get("channels", 1)
    height, width, stride = facts.get("height", 1), facts.get("width", 1), facts.get("stride", 1)
    if batch > MAX_GRID_YZ:
        reasons.append(f"batch {batch} exceeds the grid limit {MAX_GRID_YZ}")
    height_out, width_out = (height - 1) // stride + 1, (width - 1) // stride + 1
    config = depthwise_config(
        batch, channels, height_out, width_out, facts.get("channels_last"), min_programs=1
    )  # the most channels per program: the fewest channel tiles
    if -(-channels // config.block_c) > MAX_GRID_YZ:
        reasons.append(f"{channels} channels need more channel tiles than the grid allows")
    if not facts.get("fits_int32", True):
        reasons.append("one image spans more than 2^31 elements (int32 offsets)")
    if problem.device.type == "cuda" and not forced and not reasons:
        half = problem.dtype in (torch.float16, torch.bfloat16)
        if problem.dtype == torch.float64 or not depthwise_prefers_triton(
            batch, channels, height, width, stride, half, bool(facts.get("channels_last"))
        ):
            reasons.append(
                "cuDNN is as fast here, or this case was not measured "
                "(kernels/depthwise_tuning.py: depthwise_prefers_triton)"
            )
    return reasons


_dispatch.register("depthwise_conv2d", _dispatch.Backend("triton", _triton, _triton_reasons))
_dispatch.register("depthwise_conv2d", _dispatch.Backend("torch", _torch, _dispatch.always))
_dispatch.register(
    "depthwise_conv2d",
    _dispatch.Backend("reference", reference_depthwise_conv2d, _dispatch.always),
)
_dispatch.defer(  # (on CUDA only: on the CPU "torch" runs, traced as aten ops inductor fuses)
    "depthwise_conv2d",
    lambda x, weight, bias, stride, activation: _problem(x, stride),
    devices=("cuda",),
)
