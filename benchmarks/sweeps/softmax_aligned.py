"""The row softmax with 16-byte vector loads and stores: a prototype to measure before it
becomes kernels/softmax_csr.py's single-read path (issue 3: 70% of the copy bandwidth; bf16
reaches ~61%, at-0d0e774/softmax_block_sweep.txt).

A row's entries start anywhere, so the library's loads and stores, masked entry by entry, are
scalar (2 bytes each in bf16). The CSR one-token kernel gained 1.3x from loading whole 16-entry
aligned groups (kernels/spmm_csr_token.py). Here:
- loads: whole groups from the 16-entry boundary below the row's start (the neighbours'
  entries zeroed after the load);
- stores: the groups lying wholly inside the row, as vectors; the row's first and last
  partial groups entry by entry, their probabilities recomputed from 16 entries reloaded.
Both need every head's values to start on a 16-entry boundary and the arrays to have room for
the last group: the values and probabilities here are (heads, nnz rounded up to 16) storage
seen as (heads, nnz), as the library's own SDDMM and attention outputs could be allocated.
Rows must fit one block (the single-read path): local:256, strided:128:128 and random:0.1.

Forms: "library" (sparse_softmax, the default config) and "aligned"; bf16 and fp32, 16 heads at
L = 4096, CUDA-graph medians of one launch per copy of the values (copies past L2), GB/s on
the bytes moved against the copy bandwidth measured here. Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/softmax_aligned.py
    TRITON_INTERPRET=1 PYTHONPATH=src python3 benchmarks/sweeps/softmax_aligned.py --check
"""

import os
import sys

import _softmax_proto
import torch
import triton
import triton.language as tl

from sparsekernels.bench.cases import _pattern_from_mask, attention_mask

CHECK = "--check" in sys.argv
BUDGET_S = float(os.environ.get("BUDGET_S", 60))
GROUP = 16


@triton.jit
def _aligned_softmax_kernel(
    row_offsets,  # (M + 1,) int32
    values,  # (batch, nnz) with a batch stride that is a multiple of GROUP
    out,  # the same layout
    scale,
    batch,
    stride_b,  # values' and out's batch stride
    BLOCK: tl.constexpr,  # >= the longest row + GROUP - 1
    BLOCK_H: tl.constexpr,
    GROUP: tl.constexpr,
):
    row = tl.program_id(0)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = (heads < batch)[:, None]
    start = tl.load(row_offsets + row)
    end = tl.load(row_offsets + row + 1)
    first = tl.multiple_of(start // GROUP * GROUP, GROUP)
    k = tl.arange(0, BLOCK)[None, :]
    offs = first + k
    groups = first + k // GROUP * GROUP  # constant across a group: vector loads and stores
    base = heads.to(tl.int64)[:, None] * stride_b
    z = tl.load(values + base + offs, mask=mask_h & (groups < end), other=0.0).to(tl.float32)
    live = (offs >= start) & (offs < end)
    z = tl.where(live, z * scale, float("-inf"))
    row_max = tl.max(z, axis=1)
    shift = tl.where(row_max == float("-inf"), 0.0, row_max)[:, None]
    exps = tl.exp(z - shift)
    total = tl.sum(exps, axis=1)[:, None]
    inside = (groups >= start) & (groups + GROUP <= end)
    tl.store(out + base + offs, (exps / total).to(out.dtype.element_ty), mask=mask_h & inside)
    # The first and last partial groups, entry by entry (the same group twice when the row
    # lies in one: both write the same numbers).
    e = tl.arange(0, GROUP)[None, :]
    last = end // GROUP * GROUP
    for i in tl.static_range(2):  # the first group, then the last
        at = first + i * (last - first) + e
        owned = mask_h & (at >= start) & (at < end)
        ze = tl.load(values + base + at, mask=owned, other=0.0).to(tl.float32) * scale
        tl.store(out + base + at, (tl.exp(ze - shift) / total).to(out.dtype.element_ty), mask=owned)


def padded_like(nnz: int, batch: int, dtype, device) -> torch.Tensor:
    """(batch, nnz) over (batch, nnz rounded up to GROUP) storage."""
    return torch.empty(batch, triton.cdiv(nnz, GROUP) * GROUP, dtype=dtype, device=device)[:, :nnz]


def launch_aligned(P, values, out, scale, block, heads, warps):
    rows = P.shape[0]
    _aligned_softmax_kernel[(rows, triton.cdiv(values.shape[0], heads))](
        P.row_offsets, values, out, scale, values.shape[0], values.stride(0),
        BLOCK=block, BLOCK_H=heads, GROUP=GROUP, num_warps=warps,
    )  # fmt: skip


def aligned_block(P) -> int:
    return triton.next_power_of_2(int(P.row_offsets.diff().max().item()) + GROUP - 1)


def check():
    """The aligned form against float64 softmax per row: rows of 1 to ~70 entries starting
    anywhere, an empty row, heads past the batch (interpreter)."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    for kind in ("local:7", "random:0.3", "strided:5:9"):
        mask = attention_mask(kind, 70, torch.device("cpu"), g)
        mask[3] = False  # an empty row
        P = _pattern_from_mask(mask, torch.float32)
        for dtype in (torch.float32, torch.float16):
            values = padded_like(P.nnz, 3, dtype, "cpu")
            values.copy_(torch.randn(3, P.nnz))
            out = padded_like(P.nnz, 3, dtype, "cpu").fill_(float("nan"))
            launch_aligned(P, values, out, 0.7, aligned_block(P), 2, 1)
            want = _softmax_proto.reference(P, values, 0.7)
            err = (out.double() - want).abs().max().item()
            assert err < (1e-6 if dtype == torch.float32 else 2e-3), (kind, dtype, err)
            print(f"{kind} {dtype}: max error {err:.1e}")


def sweep():
    def forms(P, out, config):
        block = aligned_block(P)
        return {
            "aligned h2": lambda v: launch_aligned(P, v, out, 0.5, block, 2, max(1, block // 128)),
            "aligned h1": lambda v: launch_aligned(P, v, out, 0.5, block, 1, max(1, block // 256)),
        }

    _softmax_proto.sweep(forms, lambda h, nnz, dtype: padded_like(nnz, h, dtype, "cuda"), BUDGET_S)


if __name__ == "__main__":
    check() if CHECK else sweep()
