"""The cusparselt backend of spmm/linear: a 2:4 weight through torch's cuSPARSELt matmul.

cuSPARSELt multiplies a weight compressed once (`torch._cslt_compress` of its dense form,
`_packed`), kept while the values live and packed again when they change. Eager calls run this
backend as its own custom op, `sparsekernels::spmm_nm_cusparselt`, which takes the packed weight
as one more tensor (spmm_nm_raw sends it here once dispatch has chosen it). Under torch.compile
spmm_nm's body, choosing when it runs, takes it too (`run`): the packed weight is found by the
values' identity and version, and Dynamo hands an op the layer's own parameter, so compiled and
eager calls share one copy. Its backward is the N:M one of the other backends, chosen
automatically: dW at the kept positions by sddmm_nm, dB = W^T dC by spmm_nm (cuSPARSELt cannot
take W^T: its rows are not 2:4), d(bias) the row sums. Bias goes into cuSPARSELt's epilogue;
ReLU/GELU run after it.

Like the dense backend, cuSPARSELt multiplies the two zeros of every group of four too: a NaN or
Inf in B reaches every output of its column.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

from .. import reference
from .._cache_mode import building
from .._fill_streams import before_launch
from ..formats import semi_structured
from ..kernels import tuning
from ..kernels.transpose import row_major_copy
from . import _cusparselt_algs, _dispatch
from ._autocast import backward_without_autocast
from ._bias_grad import bias_grad
from ._identity_cache import IdentityCache, version
from ._layout import column_major, in_b_order, spmm_out

Tensor = torch.Tensor
# values -> ((their version, the indices' version), weak ref to the indices, columns, packed)
_PACKED = IdentityCache()


def reasons(problem: _dispatch.Problem, forced: bool) -> list[str]:
    """Why cuSPARSELt cannot run this spmm_nm problem (empty: it can)."""
    facts = problem.facts
    found = semi_structured.unsupported_reasons(
        problem.device, problem.dtype, facts.get("shape"), facts["pattern"]
    )
    if facts.get("transpose"):
        found.append("W^T @ B (the backward of x): W^T's rows are not 2:4")
    if not forced and facts.get("traced") and not facts.get("packing_kept"):
        found.append(
            "in a compiled graph only for values packed before or a Parameter (a tensor made "
            "in the graph, autocast's cast, would be packed again every call)"
        )
    if not forced and not found:
        rows, k = facts.get("shape") or (0, facts.get("k", 0))
        if not tuning.spmm_nm_prefers_cusparselt(rows, k, facts["n"], problem.dtype):
            found.append(
                "chosen automatically only where kernels/tuning.py says it wins "
                "(backend='cusparselt' forces it)"
            )
    return found


def matmul(packed: Tensor, rows: int, b: Tensor, bias: Tensor | None, activation: str) -> Tensor:
    """act(W @ b + bias[:, None]) with W (rows, K) packed by torch._cslt_compress."""
    cols = b.shape[1]
    if cols == 0:
        return b.new_empty((rows, 0))
    pad = -cols % semi_structured.DENSE_MULTIPLE
    if bias is not None:
        bias = _aligned(bias.contiguous())
    transposed = writes_transposed(b)
    out = _cusparselt_algs.sparse_mm(packed, _dense_operand(b, pad), bias, transposed)
    if transposed:
        out = out[:cols].t()
    elif returns_transposed(b):  # (tokens, rows) row-major by the tiled copy
        out = row_major_copy(src=out[:, :cols].t()).t()
    elif pad:
        out = out[:, :cols].contiguous()
    return reference.apply_activation(out, activation)


def returns_transposed(b: Tensor) -> bool:
    """Whether the product comes back in spmm_out's order for linear's x^T, (tokens, rows)
    row-major: written so by cuSPARSELt (writes_transposed), or in fp16 with
    tuning.CUSPARSELT_TILED_TRANSPOSE copied so by kernels/transpose.py from cuSPARSELt's
    row-major product (else linear's own transposing copy runs)."""
    return writes_transposed(b) or (column_major(b) and tuning.CUSPARSELT_TILED_TRANSPOSE)


def writes_transposed(b: Tensor) -> bool:
    """For linear's x^T in bf16 cuSPARSELt writes the product transposed, (tokens, rows)
    row-major, so linear's result needs no transposing copy (spmm_out's order, as the dense
    backend's); with its searched algorithm that costs little (4096 x 4096 at 2048 tokens 64.0
    us against 61.4 row-major, before linear's copy; algorithm 0 took 135). Not in fp16: there
    cuSPARSELt's search of a transposed product fails with an internal error that leaves an
    illegal instruction in the process's CUDA context, every case tried
    (benchmarks/results/nvidia-h200/2026-12-05/at-4f5c74f/cusparselt_search_safety.txt)."""
    return b.dtype == torch.bfloat16 and column_major(b)


def _dense_operand(b: Tensor, pad: int) -> Tensor:
    """b as cuSPARSELt reads it: row-major, or column-major (x^T in linear: no copy), with its
    columns padded by `pad` zeros and a 16-byte aligned start."""
    if not b.is_contiguous() and b.t().is_contiguous():
        return _aligned(F.pad(b.t(), (0, 0, 0, pad)).t() if pad else b)
    b = b.contiguous()
    return _aligned(F.pad(b, (0, pad)) if pad else b)


def _aligned(t: Tensor) -> Tensor:
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _run(values, indices, packed, b, bias, activation) -> Tensor:
    if packed is None:  # (no NMMatrix came with the call: under torch.compile, or a raw op call)
        packed = _packed(values, indices, b.shape[0])
    return matmul(packed, values.shape[0], b, bias, activation)


def _packed(values: Tensor, indices: Tensor, cols: int) -> Tensor:
    """W compressed once for these very tensors at their versions (an optimizer step, or any
    in-place edit, packs again), kept while the values live. Packed in every call where no
    change could be seen: inference tensors carry no version, and a CUDA graph captured in a
    training step (values wanting a gradient, grad mode on) would replay a kept copy stale
    after each optimizer step, so such a graph packs as it runs. An inference graph reads the
    kept copy (README: warm each layer up outside the capture; capture again after an
    in-place update, release_caches or a move)."""
    seen = (version(values), version(indices))
    trained = values.requires_grad and torch.is_grad_enabled()
    if None in seen or (trained and _capturing(values)):
        return semi_structured.compress(values, indices, cols)
    found = _kept(values, indices, cols, seen)
    if found is not None:
        return found
    with building(values):
        packed = semi_structured.compress(values, indices, cols)
    _PACKED[values] = (seen, weakref.ref(indices), cols, packed)
    return packed


def _kept(values: Tensor, indices: Tensor, cols: int, seen: tuple) -> Tensor | None:
    entry = _PACKED.get(values)
    if entry is not None and entry[0] == seen and entry[1]() is indices and entry[2] == cols:
        return entry[3]
    return None


def packing_kept(values: Tensor, indices: Tensor, cols: int) -> bool:
    """Whether a compiled call's body would find these values packed, or keep their packing
    for the next call: a Parameter (Dynamo hands the op the layer's own), or values packed
    before. Not a tensor the graph makes (autocast's cast of the values: new every call)."""
    seen = (version(values), version(indices))
    if None in seen:
        return False
    return isinstance(values, torch.nn.Parameter) or _kept(values, indices, cols, seen) is not None


def _capturing(t: Tensor) -> bool:
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def run(values, indices, b, bias, activation, n, m, vector, block, transpose) -> Tensor:
    """The registry's entry (spmm_nm's signature), taken by spmm_nm's body when it chooses
    under torch.compile: the packed weight found by the values (`_packed`), the product in
    b's order (what spmm_nm's fake promises)."""
    return in_b_order(_run(values, indices, None, b, bias, activation), b)


# ============================================================================ the custom op
@torch.library.custom_op("sparsekernels::spmm_nm_cusparselt", mutates_args=())
def spmm_nm_cusparselt(
    values: Tensor,
    indices: Tensor,
    packed: Tensor | None,
    b: Tensor,
    bias: Tensor | None,
    activation: str,
) -> Tensor:
    """act(W @ b + bias) for a 2:4 weight W (values, indices); `packed` is W compressed by
    cuSPARSELt (None: compressed here)."""
    return _run(values, indices, packed, b, bias, activation)


@spmm_nm_cusparselt.register_fake
def _(values, indices, packed, b, bias, activation):
    if returns_transposed(b):
        return spmm_out(b, values.shape[0])
    return b.new_empty((values.shape[0], b.shape[1]))


def _setup(ctx, inputs, output):
    values, indices, packed, b, bias, activation = inputs
    ctx.activation = activation
    ctx.save_for_backward(values, indices, packed, b, bias, output)


@backward_without_autocast
def _backward(ctx, grad):
    from ._library import _activation_grad
    from .sddmm import sddmm_nm_raw
    from .spmm import spmm_nm_raw

    values, indices, packed, b, bias, out = ctx.saved_tensors
    pattern = semi_structured.PATTERN_2_4

    def pre_activation():
        return _run(values, indices, packed, b, bias, "none")

    g = _activation_grad(grad, out, pre_activation, ctx.activation)
    d_values = d_b = d_bias = None
    if ctx.needs_input_grad[0]:  # only at kept positions
        d_values = sddmm_nm_raw(indices, g, b, *pattern)
    if ctx.needs_input_grad[3]:
        d_b = spmm_nm_raw(values, indices, g, None, "none", *pattern, True)
    if bias is not None and ctx.needs_input_grad[4]:
        d_bias = bias_grad(g)
    return d_values, None, None, d_b, d_bias, None


spmm_nm_cusparselt.register_autograd(_backward, setup_context=_setup)


def spmm(values, indices, b, bias, activation, matrix=None) -> Tensor:
    """Run the op with `matrix`'s cached packed weight (packed here when no matrix is given)."""
    packed = None
    if matrix is not None and not torch.compiler.is_compiling():
        before_launch(values.device)  # (after fills another stream made: not through _dispatch)
        packed = _packed(values, indices, matrix.shape[1])
    return spmm_nm_cusparselt(values, indices, packed, b, bias, activation)
