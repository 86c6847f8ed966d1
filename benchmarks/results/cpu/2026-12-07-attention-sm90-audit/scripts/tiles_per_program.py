"""Loop trip counts: tiles per program (query tile: forward, dq; key tile: dk dv) and how many
of them are partial (masked), per component, for the Sparse Transformer layout at L = 8192."""
from collections import Counter
import sparsekernels as sk
from sparsekernels.formats import _block_layout
from sparsekernels.kernels.attention_tuning import BLOCK_ATTENTION_SPLIT_FILL
L = 8192
pattern = sk.nn.SparseAttention.local_strided(L, window=128, stride=128).pattern
rows, cols = pattern.pattern.row_indices().long(), pattern.column_indices.long()
print(f"nnz {cols.numel()}")
for bm, bn in [(64, 64), (128, 64)]:
    lay = _block_layout.build(rows, cols, (L, L), bm, bn, BLOCK_ATTENTION_SPLIT_FILL)
    for i, c in enumerate(lay.components):
        q = (c.offsets[1:] - c.offsets[:-1]).tolist()
        k = (c.t_offsets[1:] - c.t_offsets[:-1]).tolist()
        part_q = [int((c.masks[c.offsets[j]:c.offsets[j + 1]] >= 0).sum()) for j in range(len(q))]
        part_k = [int((c.t_masks[c.t_offsets[j]:c.t_offsets[j + 1]] >= 0).sum()) for j in range(len(k))]
        print(f"{bm}x{bn} comp{i} perm={c.row_perm is not None}: tiles {c.tiles} partial {c.partial} | "
              f"per query tile {sorted(Counter(q).items())} partial {sorted(Counter(part_q).items())} | "
              f"per key tile {sorted(Counter(k).items())} partial {sorted(Counter(part_k).items())}")
