"""The `scatter` backend of spmm_csr: CSR weights in half precision at 8-128 tokens on the
tensor cores (kernels/spmm_csr_scatter.py; csr_scatter_tuning.py says where), where the CSR
kernels walk each stored entry's row of B and densifying costs a pass over the dense weight.

The kernel reads the weight as `tiled_entries`, a second copy of it (4 bytes a stored entry,
as CSR with 16-bit columns). spmm builds it once for a CSRMatrix's own values (`prepare`),
kept while they live and rebuilt when they change in place; the automatic choice takes this
backend only for values prepared so (a transposed product's values, gathered for each call,
would rebuild it every time). Weights whose values need a gradient are not prepared: a
training step would rebuild the copy after every optimizer step. Not under torch.compile,
which cannot trace the lookup by identity and version.
"""

from __future__ import annotations

import functools
import weakref

import torch

from .._cache_mode import building
from ..kernels import csr_scatter_tuning as tuning
from ..kernels._sizes import cdiv
from ..kernels.spmm_csr_scatter import BLOCK_K, b_step_fits, spmm_csr_scatter, tiled_entries
from . import _dispatch, _weight_copies
from ._identity_cache import IdentityCache, version
from ._layout import spmm_out

_HALF = (torch.float16, torch.bfloat16)
# values -> (their version, weak refs to row offsets and column indices, tile offsets, entries)
_TILED = IdentityCache()


def _fits(values: torch.Tensor, b: torch.Tensor, rows: int) -> bool:
    """Not under torch.compile: the copy is found by the values' identity and version."""
    n = b.shape[-1]
    return (
        not torch.compiler.is_compiling()
        and values.is_cuda
        and values.dim() == 1
        and b.dim() == 2
        and values.dtype in _HALF
        and values.numel() > 0  # nothing stored, or K = 0: the other kernels' zeros
        and not values.is_inference()  # no version counter: its copy could not be kept
        and tuning.csr_scatter_takes(n, values.numel() / (rows * b.shape[0]), rows * b.shape[0])
        and b_step_fits(b, _config(rows, b.shape[0], n, values.numel())[1].block_n)
    )


def _config(rows: int, k: int, n: int, stored: int):
    """The copy's tile height (a weight's, whatever the tokens) and the launch's config."""
    block_m = tuning.csr_scatter_tile_rows(rows, k, stored)
    return block_m, tuning.csr_scatter_config(n, rows, k, block_m, stored / max(1, rows * k))


def _tiled(row_offsets, column_indices, values, k: int, build: bool):
    """The tiled entries of these very arrays at the values' current version; built when
    `build` (in the weight's tile height, csr_scatter_tile_rows), else None when absent or
    stale (the pattern's arrays edited in place too). The pattern's arrays are held weakly (an
    id could be reused by another pattern's once they die). Inference tensors have no version
    counter: their copy is built for each (forced) call and never kept; the automatic choice
    does not take this backend for them."""
    if values.is_inference():
        return _build(row_offsets, column_indices, values, k) if build else None
    entry = _TILED.get(values)
    seen = (version(values), version(row_offsets), version(column_indices))  # (edits in place)
    if (
        entry is not None
        and entry[0] == seen
        and entry[1]() is row_offsets
        and entry[2]() is column_indices
    ):
        return entry[3:]
    if not build:
        return None
    with building(values):
        offsets, entries = _build(row_offsets, column_indices, values, k)
    pattern = (weakref.ref(row_offsets), weakref.ref(column_indices))
    if None in seen:  # (an inference pattern: an edit could not be seen, nothing is kept)
        return offsets, entries
    _TILED[values] = (seen, *pattern, offsets, entries)
    return offsets, entries


def _build(row_offsets, column_indices, values, k: int):
    block_m = tuning.csr_scatter_tile_rows(row_offsets.numel() - 1, k, values.numel())
    return tiled_entries(row_offsets, column_indices, values, k, block_m=block_m)


def prepare(A, B: torch.Tensor) -> None:
    """Build A's tiled entries when this backend would take A @ B and A's values need no
    gradient (a CSRMatrix's own values: they outlive the call). Not while a CUDA graph is
    captured (the build waits on the GPU): a graph captures the other kernels unless an
    eager call came first."""
    if not _fits(A.values, B, A.shape[0]) or (A.values.requires_grad and torch.is_grad_enabled()):
        return
    if _weight_copies.chosen(A.column_indices) != "all":  # (the layer keeps no tiled copy)
        return
    if not torch.cuda.is_current_stream_capturing():
        cols = A.pattern.column_indices_int16()
        column_indices = A.column_indices if cols is None else cols
        _tiled(A.row_offsets, column_indices, A.values, A.shape[1], build=True)


def ready(row_offsets, column_indices, values, b) -> bool:
    """Whether the automatic choice may take this backend: prepared entries for these
    arrays."""
    rows = row_offsets.numel() - 1
    return (
        _fits(values, b, rows)
        and _tiled(row_offsets, column_indices, values, b.shape[0], False) is not None
    )


@functools.cache
def _sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def run(row_offsets, column_indices, values, b, bias, row_order, activation):
    """The product in b's memory order (linear's output comes back contiguous); a forced call
    on values not prepared builds their copy here."""
    rows, k, n = row_offsets.numel() - 1, b.shape[0], b.shape[1]
    block_m, config = _config(rows, k, n, values.numel())
    offsets, entries = _tiled(row_offsets, column_indices, values, k, build=True)
    out = spmm_out(b, rows)
    if out.numel() == 0:
        return out
    tiles = cdiv(rows, block_m) * cdiv(n, config.block_n)
    sms = _sms(b.device.index if b.device.index is not None else torch.cuda.current_device())
    split = max(1, min(config.programs_per_sm * sms // tiles, cdiv(k, BLOCK_K)))
    return spmm_csr_scatter(
        tile_offsets=offsets, entries=entries, b=b, out=out, activation=activation,
        bias=bias.contiguous() if bias is not None else None,  # (the epilogue reads unit stride)
        block_n=config.block_n, split=split, block_m=block_m, warps=config.warps,
        unscatter=config.unscatter,
    )  # fmt: skip


def reasons(problem: _dispatch.Problem, forced: bool) -> list[str]:
    facts = problem.facts
    if problem.device.type != "cuda":
        return [f"tensors are on {problem.device.type}; the scatter kernel (Gluon) needs CUDA"]
    found = []
    if problem.dtype not in _HALF:
        found.append(f"the scatter kernel runs fp16 and bf16, not {problem.dtype}")
    if facts.get("batch", 1) != 1 or facts.get("b_dim", 2) != 2 or facts.get("values_dim", 1) != 1:
        found.append("the scatter kernel takes one matrix (1-D values) and a 2-D B")
    n, density = facts["n"], facts.get("density", 0.0)
    elements = facts.get("rows", 0) * facts.get("k", 0)
    if not forced and not tuning.csr_scatter_takes(n, density, elements):
        # (a compiled graph's density may be symbolic: a SymFloat takes no format spec)
        shown = f"{density:.3g}" if isinstance(density, float) else str(density)
        found.append(
            f"N = {n} at density {shown} on {elements} elements is not the scatter "
            f"kernel's (kernels/csr_scatter_tuning.py)"
        )
    if not forced and not facts.get("tiled", False):
        found.append("the values have no tiled entries built by spmm (not a CSRMatrix's own)")
    return found
