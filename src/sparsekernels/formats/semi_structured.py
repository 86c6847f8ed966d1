"""NMMatrix (2:4) to and from torch's semi-structured tensors, and the cuSPARSELt-packed weight.

`torch.sparse.to_sparse_semi_structured` packs a dense 2:4 weight for NVIDIA's sparse tensor cores
(compute capability 8.0+): for cuSPARSELt by default (kept values, then metadata, in one buffer),
for CUTLASS when torch is told to (`SparseSemiStructuredTensor._FORCE_CUTLASS`). Only an
element-wise 2:4 NMMatrix (n=2, m=4, vector=1, block=1) converts; torch's tables (2.4 to 2.13)
ask for CUDA, fp16/bf16 (CUTLASS also fp32, but packed 1:2: one value a pair of columns, so
only a 2:4 weight whose pairs each hold one nonzero converts) and a weight
whose rows and columns are multiples of 16 (cuSPARSELt) or 32 x 64 (CUTLASS). The dense operand
of a product needs its columns padded to a multiple of 8, which the cusparselt backend does.

`compress(values, indices, cols)` is what the backend multiplies: `torch._cslt_compress` of W's
dense form (kept per values tensor by ops/_cusparselt.py).
"""

from __future__ import annotations

import functools

import torch

from .._quiet_warnings import ignoring

# What torch's semi-structured subclasses take (their _DTYPE_SHAPE_CONSTRAINTS, torch 2.4-2.13),
# for our dtypes: the weight's rows and columns must be multiples of these. The dense operand's
# columns must be a multiple of DENSE_MULTIPLE (16-byte rows) for cuSPARSELt.
SHAPE_MULTIPLES = {
    "cusparselt": {torch.float16: (16, 16), torch.bfloat16: (16, 16)},
    "cutlass": {torch.float16: (32, 64), torch.bfloat16: (32, 64), torch.float32: (32, 32)},
}
DENSE_MULTIPLE = 8
PATTERN_2_4 = (2, 4, 1, 1)
_PROTOTYPE_WARNING = "The PyTorch API of SparseSemiStructuredTensor is in prototype stage"


def pattern_name(n: int, m: int, vector: int, block: int) -> str:
    extra = "".join(f",{k}={v}" for k, v in (("v", vector), ("b", block)) if v != 1)
    return f"{n}:{m}{extra}"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def cusparselt_built() -> bool:
    """Whether this torch build links cuSPARSELt (CPU builds and some CUDA builds do not)."""
    return bool(torch.backends.cusparselt.is_available())


def torch_backend() -> str:
    """The kind `to_sparse_semi_structured` makes: cuSPARSELt unless torch is told CUTLASS."""
    from torch.sparse import SparseSemiStructuredTensor

    return "cutlass" if SparseSemiStructuredTensor._FORCE_CUTLASS else "cusparselt"


def unsupported_reasons(
    device: torch.device,
    dtype: torch.dtype,
    shape: tuple[int, int] | None,
    pattern: tuple[int, int, int, int],
    backend: str = "cusparselt",
) -> list[str]:
    """Why a weight cannot go to `backend` ("cusparselt" or "cutlass"); empty: it can.

    Plain Python on the arguments (dispatch runs it inside torch.compile too); the build and the
    GPU are looked at only for CUDA tensors. shape None skips the shape check.
    """
    reasons = []
    if tuple(pattern) != PATTERN_2_4:
        reasons.append(
            f"pattern {pattern_name(*pattern)} is not 2:4 (element-wise: n=2, m=4, vector=1, "
            "block=1)"
        )
    multiples = SHAPE_MULTIPLES[backend]
    if dtype not in multiples:
        names = "/".join(_dtype_name(d) for d in multiples)
        why = " (cuSPARSELt reads fp32 as 1:2, not 2:4)" if dtype == torch.float32 else ""
        reasons.append(f"dtype {_dtype_name(dtype)} is not supported: {backend} takes {names}{why}")
    if shape is not None:
        rows, cols = shape
        r, c = multiples.get(dtype, (16, 16))
        if rows < r or cols < c or rows % r or cols % c:
            reasons.append(
                f"weight shape {rows}x{cols} is not a multiple of {r}x{c} ({backend}); "
                "pad the weight or use another backend"
            )
    if device.type != "cuda":
        reasons.append(f"tensors are on {device.type}; semi-structured sparsity needs CUDA")
        return reasons
    return reasons + list(_cuda_reasons(backend, device.index))


@torch.compiler.assume_constant_result
def _cuda_reasons(backend: str, index: int | None) -> tuple[str, ...]:
    """The build and the GPU: fixed for a process, so torch.compile takes them as a constant and
    eager calls (every automatic N:M dispatch on CUDA asks) look them up once."""
    return _cuda_reasons_once(backend, index)


@functools.cache
def _cuda_reasons_once(backend: str, index: int | None) -> tuple[str, ...]:
    reasons = []
    if backend == "cusparselt" and not cusparselt_built():
        reasons.append("this torch build has no cuSPARSELt (torch.backends.cusparselt)")
    if not torch.cuda.is_available():
        reasons.append("CUDA is not available")
    else:
        major, minor = torch.cuda.get_device_capability(index)
        if major < 8:
            reasons.append(
                f"compute capability {major}.{minor} has no sparse tensor cores (needs 8.0+)"
            )
    return tuple(reasons)


# ----------------------------------------------------------------------- NMMatrix -> torch
def to_semi_structured(matrix) -> torch.Tensor:
    """`matrix` (2:4, CUDA, fp16/bf16) as a torch semi-structured tensor (ValueError: why not)."""
    backend = torch_backend()
    pattern = (matrix.n, matrix.m, matrix.vector, matrix.block)
    reasons = unsupported_reasons(matrix.device, matrix.dtype, matrix.shape, pattern, backend)
    if backend == "cusparselt" and any("no cuSPARSELt" in r for r in reasons):
        reasons.append("SparseSemiStructuredTensor._FORCE_CUTLASS = True picks CUTLASS instead")
    if reasons:
        raise ValueError(
            f"cannot convert {matrix!r} to a semi-structured tensor: " + "; ".join(reasons)
        )
    dense = matrix.to_dense().detach().contiguous()
    if backend == "cutlass" and dense.dtype == torch.float32:
        doubled = (dense.view(dense.shape[0], -1, 2) != 0).all(-1)
        if bool(doubled.any()):  # (torch would drop one of the two, silently)
            row, pair = (int(i) for i in doubled.nonzero()[0])
            raise ValueError(
                f"cannot convert {matrix!r} to a CUTLASS float32 semi-structured tensor: it "
                f"keeps one value a pair of columns (1:2), and row {row} keeps both of columns "
                f"{2 * pair} and {2 * pair + 1}; use float16/bfloat16 or cuSPARSELt"
            )
    with ignoring(_PROTOTYPE_WARNING):  # (torch's, once a process)
        return torch.sparse.to_sparse_semi_structured(dense)


def compress(values: torch.Tensor, indices: torch.Tensor, cols: int) -> torch.Tensor:
    """torch._cslt_compress of the 2:4 weight (values, indices) with `cols` columns."""
    from .nm import nm_columns

    with torch.no_grad():
        dense = values.new_zeros((values.shape[0], cols))
        dense.scatter_(1, nm_columns(indices, values.shape[0], *PATTERN_2_4), values.detach())
        return torch._cslt_compress(dense)


# ----------------------------------------------------------------------- torch -> NMMatrix
def from_semi_structured(t: torch.Tensor):
    """The NMMatrix (2:4) holding the same matrix as semi-structured tensor `t`, kept positions
    included (a kept zero stays kept). Exact: CUTLASS metadata is decoded in plain PyTorch (any
    device); a cuSPARSELt tensor, whose metadata layout is the library's own, is read back on its
    GPU through products with the identity, so its stored values must be finite.
    """
    from torch.sparse import SparseSemiStructuredTensor

    from .nm import NMMatrix

    if not isinstance(t, SparseSemiStructuredTensor):
        raise TypeError(
            f"t must be a torch semi-structured tensor (torch.sparse.to_sparse_semi_structured), "
            f"got {type(t).__name__}"
        )
    if t.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"t must hold float16, bfloat16 or float32 values, got {t.dtype}")
    if t.packed is None:
        raise ValueError(
            "t holds only the packing of its transpose (a transposed semi-structured tensor); "
            "convert the tensor before .t()"
        )
    dense, kept = _dense_and_kept(t)
    return NMMatrix.from_dense(dense, 2, 4, mask=kept)


def _dense_and_kept(t) -> tuple[torch.Tensor, torch.Tensor]:
    rows, cols = t.shape
    if t.meta is not None and t.meta.dim() == 2:  # CUTLASS: torch decodes it in plain PyTorch
        from torch.sparse._semi_structured_conversions import (
            sparse_semi_structured_to_dense_cutlass as decode,
        )

        kept = decode(torch.ones_like(t.packed), t.meta) != 0
        # The packed values are the kept ones row by row in column order: placed there as
        # they are (torch's decode moves float32 as two fp16 halves, and on the CPU a half
        # that reads as a signalling NaN comes back with its quiet bit set).
        dense = torch.zeros((rows, cols), dtype=t.packed.dtype, device=t.packed.device)
        if int(kept.sum()) == t.packed.numel():
            dense[kept] = t.packed.reshape(-1)
            return dense, kept
        return decode(t.packed, t.meta), kept
    if not bool(torch.isfinite(t.values()).all()):
        raise ValueError(
            "t stores Inf or NaN: a cuSPARSELt tensor is read back through a product with the "
            "identity, which would spread them over their rows"
        )
    ones = t.packed.clone(memory_format=torch.contiguous_format)
    if t.meta is None:  # cuSPARSELt: the rows * cols / 2 kept values come first, then metadata
        ones.view(-1)[: rows * cols // 2] = 1
    else:
        ones.fill_(1)
    return _rebuilt(t, t.packed).to_dense(), _rebuilt(t, ones).to_dense() != 0


def _rebuilt(t, packed: torch.Tensor):
    """A copy of `t` with other packed values, untransposed results and no other packings."""
    with ignoring(_PROTOTYPE_WARNING):  # (torch's, once a process)
        return type(t)(
            t.shape,
            packed=packed,
            meta=t.meta,
            packed_t=None,
            meta_t=None,
            compressed_swizzled_bitmask=None,
            fuse_transpose_cusparselt=False,
            alg_id_cusparselt=getattr(t, "alg_id_cusparselt", 0),
        )
