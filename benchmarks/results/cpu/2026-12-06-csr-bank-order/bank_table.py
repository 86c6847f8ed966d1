import sys, time, torch
sys.path.insert(0, "src")  # (run from the repository root)
import sparsekernels as sk
from sparsekernels.kernels.spmm_csr_scatter import tiled_entries
from sparsekernels.kernels.csr_scatter_banks import scatter_bank_stats
M, K = 4096, 4096
for block_m in (64, 128):
    for sparsity in (0.5, 0.7, 0.9, 0.95):
        torch.manual_seed(0)
        w = torch.randn(M, K, dtype=torch.bfloat16)
        A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), sparsity))
        row = []
        for banks in ("plain", "spread", "greedy"):
            t = time.time()
            off, ent = tiled_entries(A.row_offsets, A.column_indices, A.values, K, block_m=block_m, banks=banks)
            dt = time.time() - t
            row.append(f"{banks} {scatter_bank_stats(off, ent):.2f} ({dt:.1f}s)")
        print(f"block_m {block_m} {sparsity:.0%}: " + ", ".join(row), flush=True)
