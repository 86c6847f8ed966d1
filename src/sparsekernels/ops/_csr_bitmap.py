"""The CSR product through a bitmap kernel where its window (kernels/csr_bitmap_tuning.py) says
it beats the CSR kernels: the weight's bitmap words built once per pattern and kept, the
Gluon kernel on Hopper, else the Triton one (the interpreter's on a CPU machine)."""

from __future__ import annotations

import functools

import torch

from ..kernels import csr_bitmap_tuning, spmm_csr_bitmap, spmm_csr_bitmap_wgmma
from ._identity_cache import IdentityCache

SMS_WITHOUT_CUDA = 132  # the interpreter's stand-in (an H200's)

# column indices -> (their version, the row offsets' id and version, the bitmap words)
_WORDS = IdentityCache()


def bitmap_words(row_offsets: torch.Tensor, column_indices: torch.Tensor, rows: int, cols: int):
    """spmm_csr_bitmap.bitmap_words of the pattern, built on its first use and again after an
    in-place edit of either index tensor."""
    key = (column_indices._version, id(row_offsets), row_offsets._version)
    hit = _WORDS.get(column_indices)
    if hit is None or hit[0] != key:
        words = spmm_csr_bitmap.bitmap_words(row_offsets, column_indices, rows, cols)
        hit = (key, words)
        _WORDS[column_indices] = hit
    return hit[1]


def try_bitmap(row_offsets, column_indices, values, b, bias, activation, out) -> bool:
    """Write out = act(A @ b + bias) with a bitmap kernel and say True where its window holds
    this product (one weight, b (K, N) of 16-bit values), else touch nothing and say False."""
    if not csr_bitmap_tuning.CSR_BITMAP_WINDOWS:  # (none open yet: no cost on the hot path)
        return False
    if b.dim() != 2 or values.dim() != 1 or not spmm_csr_bitmap.supports(b.dtype, b.shape[0]):
        return False
    rows, (k, tokens) = row_offsets.numel() - 1, b.shape
    gluon = spmm_csr_bitmap_wgmma.supports(b.dtype, k, b.device)
    config = csr_bitmap_tuning.csr_bitmap_config(
        tokens, rows, k, column_indices.numel(), b.dtype, _sm_count(b.device), gluon
    )
    if config is None:
        return False
    operands = dict(
        words=bitmap_words(row_offsets, column_indices, rows, k),
        row_offsets=row_offsets,
        values=values.contiguous(),
        b=b,
        bias=bias.contiguous() if bias is not None else None,
        out=out,
        activation=activation,
        block_m=config.block_m,
        block_w=config.block_w,
        block_n=config.block_n,
        split=config.split,
    )
    if config.gluon:
        spmm_csr_bitmap_wgmma.spmm_csr_bitmap_wgmma(**operands)
    else:
        spmm_csr_bitmap.spmm_csr_bitmap(
            **operands, num_warps=config.num_warps, num_stages=config.num_stages
        )
    return True


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return SMS_WITHOUT_CUDA
    return _sm_count_of(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _sm_count_of(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count
