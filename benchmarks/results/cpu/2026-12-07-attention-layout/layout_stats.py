"""Tiles the fused attention visits for the Sparse Transformer's pattern (L = 8192, local 128 +
strided 128), per tile shape, with and without the second (residue-ordered) pass. CPU only.
    PYTHONPATH=src python benchmarks/results/cpu/2026-12-07-attention-layout/layout_stats.py
"""

import sparsekernels as sk
from sparsekernels.formats import _block_layout

L = 8192
pattern = sk.nn.SparseAttention.local_strided(L, window=128, stride=128).pattern
rows, cols = pattern.pattern.row_indices().long(), pattern.column_indices.long()
print(f"nnz {cols.numel()}, {cols.numel() / L:.1f} a query")
for bm, bn in [(64, 64), (128, 64), (64, 128), (128, 128), (64, 32), (32, 64)]:
    for split in (1 / 8, 0):
        layout = _block_layout.build(rows, cols, (L, L), bm, bn, split)
        parts = [
            f"tiles {c.tiles} partial {c.partial} query tiles {c.offsets.numel() - 1}"
            for c in layout.components
        ]
        print(
            f"{bm}x{bn} split {split:.3f}: fill {layout.fill:.3f} tiles {layout.tiles} | "
            + " ; ".join(parts)
        )
