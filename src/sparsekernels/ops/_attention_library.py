"""torch.library registration of fused block-sparse attention: forward, backward, fake impls.

`block_attention(q, k, v, layout, scale, config)` runs the kernels of kernels/attention_block.py
over a block layout (formats/_block_layout.py, passed as its list of tensors) and returns the
output and the log-sum-exp (log2 units, fp32, (B * H, Lq)) the backward recomputes P from.
config: [block_m, block_n, num_warps, num_stages, bwd_num_warps, bwd_num_stages].
"""

from __future__ import annotations

import torch

from ..formats._block_layout import TENSORS_PER_COMPONENT
from ._autocast import backward_without_autocast
from ._launch_plans import scratch as _scratch

Tensor = torch.Tensor


def _components(layout: list[Tensor]) -> list[list[Tensor]]:
    n = TENSORS_PER_COMPONENT
    return [layout[i : i + n] for i in range(0, len(layout), n)]


def _empty(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """Nothing to compute: no queries, no keys or no value columns. A head dimension of 0 is
    not empty: every score is 0 and each query averages its stored values."""
    batch, heads, lq, _ = q.shape
    return batch * heads * lq == 0 or k.shape[2] == 0 or v.shape[3] == 0


def _nonempty_head(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """q and k with a zero column when their head dimension is 0: the same (zero) scores, and
    the kernel keeps its tiles at least one column wide."""
    if q.shape[-1]:
        return q, k
    return q.new_zeros((*q.shape[:-1], 1)), k.new_zeros((*k.shape[:-1], 1))


def packed_views(qkv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v (B, H, L, D) as views of packed projections qkv (B, L, 3, H, D)."""
    q, k, v = qkv.unbind(2)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def _empty_packed(qkv: Tensor, dtype: torch.dtype) -> Tensor:
    """An empty (B, L, 3, H, D) tensor like qkv, contiguous (the kernels write every element)."""
    return torch.empty(qkv.shape, dtype=dtype, device=qkv.device)


def _output_like(q: Tensor, dv: int, dtype: torch.dtype) -> Tensor:
    """An empty (B, H, Lq, dv) output laid out in q's order of dimensions, as SDPA's is: for q a
    (B, L, H, D) view, the output is (B, L, H, dv) in memory, so the usual
    `out.transpose(1, 2).reshape(B, L, H * dv)` that follows is a view, not a copy."""
    order = [*sorted(range(3), key=lambda i: -q.stride(i)), 3]  # outermost first, stable
    shape = (*q.shape[:3], dv)
    physical = q.new_empty([shape[i] for i in order], dtype=dtype)
    return physical.permute([order.index(i) for i in range(4)])


@torch.library.custom_op("sparsekernels::block_attention", mutates_args=())
def block_attention(
    q: Tensor, k: Tensor, v: Tensor, layout: list[Tensor], scale: float, config: list[int]
) -> tuple[Tensor, Tensor]:
    return block_attention_forward(q, k, v, layout, scale, config)


def block_attention_forward(
    q: Tensor, k: Tensor, v: Tensor, layout: list[Tensor], scale: float, config: list[int]
) -> tuple[Tensor, Tensor]:
    """The op's body, also called directly for eager inference (no op dispatch)."""
    from ..kernels import attention_block as kernel

    batch, heads, lq, _ = q.shape
    components = _components(layout)
    out = _output_like(q, v.shape[3], q.dtype)
    # (scratch where no caller keeps it: a launch plan of a call that drops it allocates its own)
    lse = _scratch(q.new_empty((batch * heads, lq), dtype=torch.float32))
    if _empty(q, k, v):
        return out.zero_(), lse.fill_(float("-inf"))
    q, k = _nonempty_head(q, k)
    block_m, block_n, num_warps, num_stages = config[:4]
    launch = {
        "scale": scale,
        "block_m": block_m,
        "block_n": block_n,
        "num_warps": num_warps,
        "num_stages": num_stages,
    }
    if len(components) == 1:
        kernel.block_attention_forward(
            q=q, k=k, v=v, out=out, lse=lse, component=components[0], merge=False, **launch
        )
        return out, lse
    for b0, b1, h0, h1 in _pair_chunks(batch, heads, _pairs_per_chunk(out)):
        pairs = (slice(b0, b1), slice(h0, h1))
        rows = slice(b0 * heads + h0, (b1 - 1) * heads + h1)  # lse's rows b * heads + h
        _merge_components(q[pairs], k[pairs], v[pairs], out[pairs], lse[rows], components, launch)
    return out, lse


def _pairs_per_chunk(out: Tensor) -> int:
    """How many (batch, head) pairs' fp32 scratch fits the budget of kernels/attention_tuning.py."""
    from ..kernels.attention_tuning import block_attention_scratch_bytes

    pair_bytes = out.shape[2] * out.shape[3] * 4
    budget = block_attention_scratch_bytes(out.numel() * out.element_size())
    return max(1, budget // pair_bytes)


def _pair_chunks(batch: int, heads: int, pairs: int) -> list[tuple[int, int, int, int]]:
    """(b0, b1, h0, h1) ranges covering every (batch, head) pair, at most `pairs` a chunk:
    whole batch entries when a chunk holds all heads, else runs of heads within one entry. The
    kernel indexes lse by b * H + h of the tensors it gets, so either way a chunk's rows are one
    contiguous run of the whole lse."""
    if pairs >= heads:
        step = pairs // heads
        return [(b, min(b + step, batch), 0, heads) for b in range(0, batch, step)]
    return [
        (b, b + 1, h, min(h + pairs, heads)) for b in range(batch) for h in range(0, heads, pairs)
    ]


def _merge_components(q, k, v, out, lse, components, launch) -> None:
    """Every component's pass over these heads: all but the last into an fp32 scratch (later
    passes merge into what earlier ones wrote); the last reads it and stores `out` in its dtype,
    so no conversion copy follows. The scratch dies on return, so chunks do not overlap theirs."""
    from ..kernels import attention_block as kernel

    scratch = _scratch(_output_like(q, v.shape[3], torch.float32))
    last = len(components) - 1
    for i, component in enumerate(components):
        kernel.block_attention_forward(
            q=q, k=k, v=v, out=scratch, lse=lse, component=component, merge=i > 0,
            final=out if i == last else None, **launch,
        )  # fmt: skip


@block_attention.register_fake
def _block_attention_fake(q, k, v, layout, scale, config):
    batch, heads, lq, _ = q.shape
    out = _output_like(q, v.shape[3], q.dtype)
    return out, q.new_empty((batch * heads, lq), dtype=torch.float32)


def block_attention_backward_body(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    grad: Tensor,
    layout: list[Tensor],
    scale: float,
    config: list[int],
    packed_grad: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) of block_attention from its output, LSE and the output's gradient: the body
    of the block_attention_backward op below, also called directly by the eager twins. With
    `packed_grad` (B, L, 3, H, D), q, k, v being packed_views of a tensor shaped so (D > 0),
    the gradients are written into it and returned as its views."""
    from ..kernels import attention_block_backward as backward_kernels

    d = q.shape[-1]
    q, k = _nonempty_head(q, k)
    components = _components(layout)
    last = len(components) - 1
    # In q's, k's and v's order of dimensions, so the views that made them (a projection's
    # (B, L, H, D) rows) take their gradients without transposing copies. The kernels read
    # q, k, v in place and write every gradient element: no copies, no zero fills.
    if packed_grad is None:
        dq, dk, dv = (_output_like(t, t.shape[-1], t.dtype) for t in (q, k, v))

        def scratch():
            return tuple(_scratch(_output_like(t, t.shape[-1], torch.float32)) for t in (q, k, v))
    else:
        dq, dk, dv = packed_views(packed_grad)

        def scratch():
            return packed_views(_scratch(_empty_packed(packed_grad, torch.float32)))

    if _empty(q, k, v):
        return dq[..., :d].zero_(), dk[..., :d].zero_(), dv.zero_()
    # With several components the passes before the last sum into fp32 scratch laid out as the
    # gradients; the last adds them and stores the gradients in their dtype (no conversions).
    sums = scratch() if last else None
    delta = _scratch(backward_kernels.output_gradient_rowsums(out, grad))
    block_m, block_n, _, _, num_warps, num_stages = config
    for i, component in enumerate(components):  # the first writes, later ones add
        final = i == last
        backward_kernels.block_attention_backward(
            q=q,
            k=k,
            v=v,
            d_out=grad,
            lse=lse,
            delta=delta,
            dq=dq if final else sums[0],
            dk=dk if final else sums[1],
            dv=dv if final else sums[2],
            component=component,
            accumulate=i > 0,
            scale=scale,
            block_m=block_m,
            block_n=block_n,
            num_warps=num_warps,
            num_stages=num_stages,
            sums=sums if final and i > 0 else None,
        )
    return dq[..., :d], dk[..., :d], dv


block_attention_backward = torch.library.custom_op(
    "sparsekernels::block_attention_backward", mutates_args=()
)(block_attention_backward_body)


@block_attention_backward.register_fake
def _(q, k, v, out, lse, grad, layout, scale, config):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup(ctx, inputs, output):
    q, k, v, layout, scale, config = inputs
    out, lse = output
    ctx.scale, ctx.config, ctx.n_layout = scale, config, len(layout)
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, out, lse, *layout)


@backward_without_autocast
def _backward(ctx, grad, grad_lse):
    q, k, v, out, lse, *layout = ctx.saved_tensors
    if grad is None:
        grad = torch.zeros_like(out)
    dq, dk, dv = block_attention_backward(q, k, v, out, lse, grad, layout, ctx.scale, ctx.config)
    return dq, dk, dv, [None] * ctx.n_layout, None, None


block_attention.register_autograd(_backward, setup_context=_setup)


class BlockAttentionEager(torch.autograd.Function):
    """The op's eager twin for calls that record a gradient: the same forward, setup and
    backward bodies without torch.library's Python-level autograd wrapper and op dispatch
    (ops/_library._eager_twin has the measurement)."""

    @staticmethod
    def forward(ctx, q, k, v, layout, scale, config):  # old style: no per-call signature binding
        output = block_attention_forward(q, k, v, layout, scale, config)
        _setup(ctx, (q, k, v, layout, scale, config), output)
        return output

    @staticmethod
    @backward_without_autocast
    def backward(ctx, grad, grad_lse):
        q, k, v, out, lse, *layout = ctx.saved_tensors
        if torch.is_grad_enabled():  # (create_graph: its kernels record no graph; a penalty on
            raise RuntimeError(  # the gradients would lose its terms silently, even past
                "sparse_attention's fused kernel (backend 'triton_flash') is differentiable "
                "once: for second derivatives (create_graph=True) use backend='triton' or "
                "'reference'"  # once_differentiable, which torch.autograd.grad prunes)
            )
        if grad is None:
            grad = torch.zeros_like(out)
        dq, dk, dv = block_attention_backward_body(
            q, k, v, out, lse, grad, layout, ctx.scale, ctx.config
        )
        return dq, dk, dv, None, None, None


# ============================================================================ packed
# qkv (B, L, 3, H, D), D > 0, as one input: the backward writes qkv's gradient whole, where q,
# k, v as three views of it would have their gradients stacked into a new tensor (one pass over
# qkv's bytes) and, for views through a permute, copied once more into the projection's layout.
@torch.library.custom_op("sparsekernels::block_attention_packed", mutates_args=())
def block_attention_packed(
    qkv: Tensor, layout: list[Tensor], scale: float, config: list[int]
) -> tuple[Tensor, Tensor]:
    return block_attention_forward(*packed_views(qkv), layout, scale, config)


@block_attention_packed.register_fake
def _(qkv, layout, scale, config):
    return _block_attention_fake(*packed_views(qkv), layout, scale, config)


def block_attention_packed_backward_body(
    qkv: Tensor,
    out: Tensor,
    lse: Tensor,
    grad: Tensor,
    layout: list[Tensor],
    scale: float,
    config: list[int],
) -> Tensor:
    """qkv's gradient (B, L, 3, H, D), written whole by the fused backward's kernels."""
    d_qkv = _empty_packed(qkv, qkv.dtype)
    q, k, v = packed_views(qkv)
    block_attention_backward_body(q, k, v, out, lse, grad, layout, scale, config, d_qkv)
    return d_qkv


block_attention_packed_backward = torch.library.custom_op(
    "sparsekernels::block_attention_packed_backward", mutates_args=()
)(block_attention_packed_backward_body)


@block_attention_packed_backward.register_fake
def _(qkv, out, lse, grad, layout, scale, config):
    return torch.empty(qkv.shape, dtype=qkv.dtype, device=qkv.device)


def _packed_setup(ctx, inputs, output):
    qkv, layout, scale, config = inputs
    out, lse = output
    ctx.scale, ctx.config, ctx.n_layout = scale, config, len(layout)
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(qkv, out, lse, *layout)


@backward_without_autocast
def _packed_backward(ctx, grad, grad_lse):
    qkv, out, lse, *layout = ctx.saved_tensors
    if grad is None:
        grad = torch.zeros_like(out)
    args = (qkv, out, lse, grad, layout, ctx.scale, ctx.config)
    return block_attention_packed_backward(*args), [None] * ctx.n_layout, None, None


block_attention_packed.register_autograd(_packed_backward, setup_context=_packed_setup)


class BlockAttentionPackedEager(torch.autograd.Function):
    """block_attention_packed's eager twin, as BlockAttentionEager is block_attention's. With
    `plan` (ops/_attention_plans.Plan, a repeat call's) and the pattern's `state`, the forward
    and the backward go through the plan's training launch plans."""

    @staticmethod
    def forward(ctx, qkv, layout, scale, config, plan=None, state=None):
        def run():
            return block_attention_forward(*packed_views(qkv), layout, scale, config)

        output = run() if plan is None else plan.training_call("forward", (qkv,), state, run)
        _packed_setup(ctx, (qkv, layout, scale, config), output)
        ctx.plan, ctx.state = plan, state
        return output

    @staticmethod
    @backward_without_autocast
    def backward(ctx, grad, grad_lse):
        qkv, out, lse, *layout = ctx.saved_tensors
        if torch.is_grad_enabled():
            raise RuntimeError(
                "sparse_attention_packed's fused kernel (backend 'triton_flash') is "
                "differentiable once: for second derivatives (create_graph=True) use "
                "backend='triton' or 'reference'"
            )
        if grad is None:
            grad = torch.zeros_like(out)
        args = (qkv, out, lse, grad, layout, ctx.scale, ctx.config)

        def run():
            return block_attention_packed_backward_body(*args)

        plan = ctx.plan
        inputs = (qkv, out, lse, grad)
        d_qkv = run() if plan is None else plan.training_call("backward", inputs, ctx.state, run)
        return d_qkv, None, None, None, None, None
