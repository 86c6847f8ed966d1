"""torch.library registration: the custom ops, their fake (meta) versions and their autograd.

Each op's body runs the backend the public op chose (its name travels as the `backend` string),
so torch.compile sees one opaque op per call. Every backward is built from forward ops.
"""

from __future__ import annotations

import torch

from .. import reference
from . import _dispatch, _forward_mode
from ._autocast import backward_without_autocast
from ._bias_grad import bias_grad
from ._layout import csr_row_walk_in_b_order, in_b_order, spmm_out

Tensor = torch.Tensor


def eager(*tensors: Tensor | None) -> bool:
    """Whether a call may bypass its custom op: no compiler tracing, and plain tensors (not fake
    or functional ones). The op's dispatch costs tens of us a call."""
    if torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
        return False  # (torch.func's transforms: through the op, whose autograd they know)
    for t in tensors:  # (a loop: every eager call pays for this)
        if t is not None and type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter:
            return False
    return True


def eager_inference(*tensors: Tensor | None) -> bool:
    """eager, and no gradient wanted: the backend runs directly."""
    if torch.is_grad_enabled():
        for t in tensors:
            if t is not None and t.requires_grad:
                return False
    return eager(*tensors)


def _eager_twin(name: str, forward, setup, backward):
    """A plain autograd.Function with a custom op's forward, setup_context and backward, for
    eager calls that record a gradient: the same bits, without torch.library's Python-level
    autograd wrapper (110-223 us of host time less a linear forward + backward on the CPU box:
    benchmarks/results/cpu/2026-11-30-host). Old-style forward(ctx, ...): a separate
    setup_context makes every apply bind its arguments through inspect.signature."""

    def run_forward(ctx, *args):
        output = forward(*args)
        setup(ctx, args, output)
        return output

    def run_backward(ctx, *grads):
        return backward(ctx, *grads)

    twin = type(
        name,
        (torch.autograd.Function,),
        {"forward": staticmethod(run_forward), "backward": staticmethod(run_backward)},
    )
    return twin.apply


def _func_twin(name: str, op, setup, backward, jvp=None):
    """A new-style autograd.Function around a custom op, for torch.func's transforms (grad,
    vjp, jacrev, vmap, ...): they refuse torch.library's own autograd wrapper, an old-style
    Function (forward taking ctx), and need setup_context apart from forward. vmap's rule is
    generated: it runs forward, setup_context and backward on the unbatched calls, and the op
    itself under vmap (its batching rule, or torch's loop over the batch). `jvp` (from
    ops/_forward_mode.py: for jvp, jacfwd, hessian) reads what backward reads."""
    members = {
        "forward": staticmethod(lambda *args: op(*args)),
        "setup_context": staticmethod(setup),
        "backward": staticmethod(backward),
        "generate_vmap_rule": True,
    }
    if jvp is not None:

        def setup_for_both(ctx, inputs, output):
            ctx.forward_mode = True  # (_save keeps the tensors for jvp too)
            setup(ctx, inputs, output)

        members.update(setup_context=staticmethod(setup_for_both), jvp=staticmethod(jvp))
    twin = type(name, (torch.autograd.Function,), members)
    _FUNC_TWINS[op] = twin.apply


_FUNC_TWINS: dict = {}  # custom op -> its _func_twin's apply


def _save(ctx, *tensors: Tensor | None) -> None:
    """save_for_backward, and for a twin with a jvp save_for_forward of the very same tensors:
    vmap's generated rules keep one record of what was saved, so the two sets must agree."""
    ctx.save_for_backward(*tensors)
    if getattr(ctx, "forward_mode", False):
        ctx.save_for_forward(*tensors)


def call(op, *args):
    """A custom op, or under torch.func's transforms its new-style twin."""
    if torch._C._are_functorch_transforms_active():
        return _FUNC_TWINS[op](*args)
    return op(*args)


def _batch(*shapes) -> tuple[int, ...]:
    return tuple(torch.broadcast_shapes(*shapes))


def _sum_to(grad: Tensor, like: Tensor) -> Tensor:
    """Sum a batched gradient over the batch dimensions `like` does not have."""
    extra = grad.dim() - like.dim()
    return grad.sum(dim=tuple(range(extra))) if extra > 0 else grad


# ============================================================================ spmm_csr
@torch.library.custom_op("sparsekernels::spmm_csr", mutates_args=())
def spmm_csr(
    row_offsets: Tensor,
    column_indices: Tensor,
    values: Tensor,
    b: Tensor,
    bias: Tensor | None,
    row_order: Tensor | None,
    t_row_offsets: Tensor | None,
    t_column_indices: Tensor | None,
    t_perm: Tensor | None,
    activation: str,
    backend: str,
) -> Tensor:
    """act(A @ b + bias) for CSR A; the t_* tensors (A^T's pattern) are only for backward."""
    out = _dispatch.run(
        "spmm_csr", backend, row_offsets, column_indices, values, b, bias, row_order, activation
    )
    if _dispatch.is_auto(backend):  # the layout the fake promised, whichever backend ran
        return in_b_order(out, b) if out.dim() == 2 else out.contiguous()
    return out


@spmm_csr.register_fake
def _(
    row_offsets, column_indices, values, b, bias, row_order, t_ro, t_ci, t_perm, activation, backend
):
    shape = (*_batch(values.shape[:-1], b.shape[:-2]), row_offsets.shape[0] - 1, b.shape[-1])
    in_b_order = _dispatch.is_auto(backend) or backend in _CSR_IN_B_ORDER
    if in_b_order and len(shape) == 2:
        return spmm_out(b, shape[0])
    if backend == "triton" and csr_row_walk_in_b_order(values, b):  # so does the few-token walk
        return spmm_out(b, shape[0])
    return b.new_empty(shape)


# backends writing a 2-D CSR product in b's order (spmm_out): column-major for linear's x^T
_CSR_IN_B_ORDER = ("dense", "torch_sparse", "reference", "scatter")


def _spmm_csr_setup(ctx, inputs, output):
    # (row_offsets, column_indices, values, b, bias, row_order, t_ro, t_ci, t_perm), then these
    *tensors, activation, backend = inputs
    ctx.activation, ctx.backend = activation, backend
    _save(ctx, *tensors, _output_for_backward(output, activation))


def _output_for_backward(output: Tensor, activation: str) -> Tensor | None:
    """Only ReLU's gradient reads the output (GELU's recomputes its input): saving it otherwise
    would keep every product alive until backward, where nn.Linear frees it once used (the
    Transformer's qkv product alone, 24 MiB a layer at L = 8192)."""
    return output if activation == "relu" else None


def _activation_grad(grad: Tensor, output: Tensor | None, pre_activation, activation: str):
    if activation == "relu":  # torch's threshold_backward: an inf grad at a dead unit gives 0,
        return grad.masked_fill(output <= 0, 0)  # and a NaN output passes its grad through
    if activation == "gelu":
        acc = torch.float64 if grad.dtype == torch.float64 else torch.float32
        x = pre_activation().to(acc)
        cdf = 0.5 * (1 + torch.erf(x * 0.7071067811865476))
        pdf = torch.exp(-0.5 * x * x) * 0.3989422804014327
        return (grad.to(acc) * (cdf + x * pdf)).to(grad.dtype)
    return grad


@backward_without_autocast
def _spmm_csr_backward(ctx, grad):
    from .sddmm import sddmm_csr_raw
    from .spmm import spmm_csr_raw, spmm_csr_transposed

    row_offsets, column_indices, values, b, bias, row_order, t_ro, t_ci, t_perm, out = (
        ctx.saved_tensors
    )
    hint = ctx.backend

    def pre_activation():
        return spmm_csr_raw(row_offsets, column_indices, values, b, bias, row_order, "none", hint)

    g = _activation_grad(grad, out, pre_activation, ctx.activation)
    d_values = d_b = d_bias = None
    if ctx.needs_input_grad[2]:
        d_values = _sum_to(sddmm_csr_raw(row_offsets, column_indices, g, b, None, hint), values)
    if ctx.needs_input_grad[3]:
        transposed = (t_ro, t_ci, t_perm)
        d_b = spmm_csr_transposed(row_offsets, column_indices, values, g, b.shape[-2],
                                  transposed, hint)  # fmt: skip
        d_b = _sum_to(d_b, b)
    if bias is not None and ctx.needs_input_grad[4]:
        d_bias = bias_grad(g)
    return None, None, d_values, d_b, d_bias, None, None, None, None, None, None


spmm_csr.register_autograd(_spmm_csr_backward, setup_context=_spmm_csr_setup)
_func_twin(
    "SpmmCsrFunc", spmm_csr, _spmm_csr_setup, _spmm_csr_backward,
    _forward_mode.spmm_csr_jvp,
)  # fmt: skip
spmm_csr_eager = _eager_twin(
    "SpmmCsrEager",
    lambda ro, ci, values, b, bias, order, t_ro, t_ci, t_perm, activation, backend: _dispatch.run(
        "spmm_csr", backend, ro, ci, values, b, bias, order, activation
    ),
    _spmm_csr_setup,
    _spmm_csr_backward,
)


# ============================================================================ sddmm_csr
@torch.library.custom_op("sparsekernels::sddmm_csr", mutates_args=())
def sddmm_csr(
    row_offsets: Tensor,
    column_indices: Tensor,
    x: Tensor,
    y: Tensor,
    t_row_offsets: Tensor | None,
    t_column_indices: Tensor | None,
    t_perm: Tensor | None,
    backend: str,
) -> Tensor:
    """(x @ y^T) at the pattern's positions; the t_* tensors are only for backward."""
    return _dispatch.run("sddmm_csr", backend, row_offsets, column_indices, x, y)


@sddmm_csr.register_fake
def _(row_offsets, column_indices, x, y, t_ro, t_ci, t_perm, backend):
    return x.new_empty((*_batch(x.shape[:-2], y.shape[:-2]), column_indices.shape[0]))


def _sddmm_csr_setup(ctx, inputs, output):
    row_offsets, column_indices, x, y, t_ro, t_ci, t_perm, backend = inputs
    ctx.backend = backend
    _save(ctx, row_offsets, column_indices, x, y, t_ro, t_ci, t_perm)


@backward_without_autocast
def _sddmm_csr_backward(ctx, grad):
    from .spmm import spmm_csr_raw, spmm_csr_transposed

    row_offsets, column_indices, x, y, t_ro, t_ci, t_perm = ctx.saved_tensors
    hint = spmm_hint(ctx.backend)
    d_x = d_y = None
    if ctx.needs_input_grad[2]:  # dX = G @ Y, G the sparse gradient
        d_x = _sum_to(
            spmm_csr_raw(row_offsets, column_indices, grad, y, None, None, "none", hint), x
        )
    if ctx.needs_input_grad[3]:  # dY = G^T @ X
        transposed = (t_ro, t_ci, t_perm)
        d_y = spmm_csr_transposed(row_offsets, column_indices, grad, x, y.shape[-2],
                                  transposed, hint)  # fmt: skip
        d_y = _sum_to(d_y, y)
    return None, None, d_x, d_y, None, None, None, None


def spmm_hint(sddmm_backend: str) -> str | None:
    """The backend an SDDMM's backward suggests to its SpMMs: its own, except `dense`, which
    for an SDDMM reads only the stored entries' rows but for an SpMM multiplies structural
    zeros (a NaN in Y would reach rows of dX that no entry connects it to): SpMM then
    chooses for itself."""
    return None if _dispatch.hint_name(sddmm_backend) == "dense" else sddmm_backend


sddmm_csr.register_autograd(_sddmm_csr_backward, setup_context=_sddmm_csr_setup)
_func_twin(
    "SddmmCsrFunc", sddmm_csr, _sddmm_csr_setup, _sddmm_csr_backward,
    _forward_mode.sddmm_csr_jvp,
)  # fmt: skip


# ============================================================================ sparse_softmax
@torch.library.custom_op("sparsekernels::sparse_softmax", mutates_args=())
def sparse_softmax(row_offsets: Tensor, values: Tensor, scale: float, backend: str) -> Tensor:
    """Softmax of scale * values over each CSR row's stored entries."""
    return _dispatch.run("sparse_softmax", backend, row_offsets, values, scale)


@sparse_softmax.register_fake
def _(row_offsets, values, scale, backend):
    return torch.empty_like(values, memory_format=torch.contiguous_format)  # (as every backend)


@torch.library.custom_op("sparsekernels::sparse_softmax_backward", mutates_args=())
def sparse_softmax_backward(
    row_offsets: Tensor, probs: Tensor, grad: Tensor, scale: float, backend: str
) -> Tensor:
    """d(values) of sparse_softmax from its output and the output's gradient."""
    return _dispatch.run("sparse_softmax_backward", backend, row_offsets, probs, grad, scale)


@sparse_softmax_backward.register_fake
def _(row_offsets, probs, grad, scale, backend):
    return torch.empty_like(probs)


def _softmax_setup(ctx, inputs, output):
    row_offsets, values, scale, backend = inputs
    ctx.scale, ctx.backend = scale, backend
    _save(ctx, row_offsets, output)


@backward_without_autocast
def _softmax_backward(ctx, grad):
    from .softmax import sparse_softmax_backward_raw

    row_offsets, probs = ctx.saved_tensors
    d_values = sparse_softmax_backward_raw(row_offsets, probs, grad, ctx.scale, ctx.backend)
    return None, d_values, None, None


sparse_softmax.register_autograd(_softmax_backward, setup_context=_softmax_setup)
_func_twin(
    "SparseSoftmaxFunc", sparse_softmax, _softmax_setup, _softmax_backward,
    _forward_mode.softmax_jvp,
)  # fmt: skip


def _softmax_backward_setup(ctx, inputs, output):
    row_offsets, probs, grad, scale, backend = inputs
    ctx.scale, ctx.backend = scale, backend
    _save(ctx, row_offsets, probs, grad)


@backward_without_autocast
def _softmax_backward_backward(ctx, h):
    """A second derivative through d(values) = c p (g - S), S the row's p . g: d(g) is the
    same op on h; d(p) = c (h (g - S) - g T), T the row's p . h."""
    from .softmax import sparse_softmax_backward_raw

    row_offsets, probs, grad = ctx.saved_tensors
    d_probs = d_grad = None
    if ctx.needs_input_grad[2]:
        d_grad = sparse_softmax_backward_raw(row_offsets, probs, h, ctx.scale, ctx.backend)
    if ctx.needs_input_grad[1]:
        acc = reference.accumulate_dtype(probs.dtype)
        p, g, hh = probs.to(acc), grad.to(acc), h.to(acc)
        s = reference.row_sums_at_entries(row_offsets, p * g)
        t = reference.row_sums_at_entries(row_offsets, p * hh)
        d_probs = (ctx.scale * (hh * (g - s) - g * t)).to(probs.dtype)
    return None, d_probs, d_grad, None, None


sparse_softmax_backward.register_autograd(
    _softmax_backward_backward, setup_context=_softmax_backward_setup
)
_func_twin(
    "SparseSoftmaxBackwardFunc",
    sparse_softmax_backward,
    _softmax_backward_setup,
    _softmax_backward_backward,
    _forward_mode.softmax_backward_jvp,
)


# ============================================================================ spmm_nm
@torch.library.custom_op("sparsekernels::spmm_nm", mutates_args=())
def spmm_nm(
    values: Tensor,
    indices: Tensor,
    b: Tensor,
    bias: Tensor | None,
    activation: str,
    n: int,
    m: int,
    vector: int,
    block: int,
    transpose: bool,
    backend: str,
) -> Tensor:
    """act(W @ b + bias) for an N:M weight W (rows, K); with transpose, W^T @ b."""
    return _dispatch.run(
        "spmm_nm", backend, values, indices, b, bias, activation, n, m, vector, block, transpose
    )


@spmm_nm.register_fake
def _(values, indices, b, bias, activation, n, m, vector, block, transpose, backend):
    rows = values.shape[1] // n * m if transpose else values.shape[0]
    return spmm_out(b, rows)  # (every backend writes the product in b's order)


def _spmm_nm_setup(ctx, inputs, output):
    values, indices, b, bias, activation, n, m, vector, block, transpose, backend = inputs
    ctx.args = (n, m, vector, block)
    ctx.activation, ctx.transpose, ctx.backend = activation, transpose, backend
    _save(ctx, values, indices, b, bias, _output_for_backward(output, activation))


@backward_without_autocast
def _spmm_nm_backward(ctx, grad):
    from .sddmm import sddmm_nm_raw
    from .spmm import spmm_nm_raw

    values, indices, b, bias, out = ctx.saved_tensors
    pattern, hint, transpose = ctx.args, ctx.backend, ctx.transpose

    def pre_activation():
        return spmm_nm_raw(values, indices, b, bias, "none", *pattern, transpose, hint)

    g = _activation_grad(grad, out, pre_activation, ctx.activation)
    d_values = d_b = d_bias = None
    if ctx.needs_input_grad[0]:  # only at kept positions
        x, y = (b, g) if transpose else (g, b)
        d_values = sddmm_nm_raw(indices, x, y, *pattern, hint)
    if ctx.needs_input_grad[2]:
        d_b = spmm_nm_raw(values, indices, g, None, "none", *pattern, not transpose, hint)
    if bias is not None and ctx.needs_input_grad[3]:
        d_bias = bias_grad(g)
    return d_values, None, d_b, d_bias, None, None, None, None, None, None, None


spmm_nm.register_autograd(_spmm_nm_backward, setup_context=_spmm_nm_setup)
_func_twin(
    "SpmmNmFunc", spmm_nm, _spmm_nm_setup, _spmm_nm_backward,
    _forward_mode.spmm_nm_jvp,
)  # fmt: skip
spmm_nm_eager = _eager_twin(
    "SpmmNmEager",
    lambda values, indices, b, bias, activation, n, m, vector, block, transpose, backend: (
        _dispatch.run(
            "spmm_nm", backend, values, indices, b, bias, activation, n, m, vector, block, transpose
        )
    ),
    _spmm_nm_setup,
    _spmm_nm_backward,
)


# ============================================================================ sddmm_nm
@torch.library.custom_op("sparsekernels::sddmm_nm", mutates_args=())
def sddmm_nm(
    indices: Tensor, x: Tensor, y: Tensor, n: int, m: int, vector: int, block: int, backend: str
) -> Tensor:
    """(x @ y^T) at an N:M pattern's kept positions, shaped like its values."""
    return _dispatch.run("sddmm_nm", backend, indices, x, y, n, m, vector, block)


@sddmm_nm.register_fake
def _(indices, x, y, n, m, vector, block, backend):
    return x.new_empty((x.shape[0], y.shape[0] // m * n))


def _sddmm_nm_setup(ctx, inputs, output):
    indices, x, y, n, m, vector, block, backend = inputs
    ctx.args, ctx.backend = (n, m, vector, block), backend
    _save(ctx, indices, x, y)


@backward_without_autocast
def _sddmm_nm_backward(ctx, grad):
    """The gradient of dW at the kept positions (a double backward through spmm_nm): grad is an
    N:M matrix of that pattern, G; dX = G @ Y, dY = G^T @ X."""
    from .spmm import spmm_nm_raw

    indices, x, y = ctx.saved_tensors
    hint = spmm_hint(ctx.backend)
    d_x = d_y = None
    if ctx.needs_input_grad[1]:
        d_x = spmm_nm_raw(grad, indices, y, None, "none", *ctx.args, False, hint)
    if ctx.needs_input_grad[2]:
        d_y = spmm_nm_raw(grad, indices, x, None, "none", *ctx.args, True, hint)
    return None, d_x, d_y, None, None, None, None, None


sddmm_nm.register_autograd(_sddmm_nm_backward, setup_context=_sddmm_nm_setup)
_func_twin(
    "SddmmNmFunc", sddmm_nm, _sddmm_nm_setup, _sddmm_nm_backward,
    _forward_mode.sddmm_nm_jvp,
)  # fmt: skip
