#!/bin/bash
# sm_90 compile stats (Triton 3.6, the device's) of the unpack / wgmma kernels with B_COLS and
# of the CSR scatter kernel's unscatter option. From the repository root, with Triton 3.6 in
# /tmp/t36 (python3 -m venv /tmp/t36 && /tmp/t36/bin/pip install triton==3.6.0):
#   bash benchmarks/results/cpu/2026-12-06-sm90-bcols-unscatter/run.sh
stats() {  # CASE ONES UNALIGNED
  TRITON_INTERPRET= ALIGNED=1 ONES="$2" UNALIGNED="$3" \
    PYTHONPATH=/tmp/t36/lib/python3.11/site-packages:.venv/lib/python3.11/site-packages:src:tests \
    /tmp/t36/bin/python benchmarks/sweeps/sm90_compile_stats.py "$1" 2>&1 | tail -1
}
for case in "nm unpack 4:8 b4" "nm unpack 2:8" "nm wgmma 2:4"; do
  echo "== $case: aligned (N, B_COLS, B's row stride multiples of 16)"; stats "$case" stride_bn ""
  echo "== $case: N unaligned, B_COLS and the row stride aligned (B copied 16-column aligned)"
  stats "$case" stride_bn "N"
  echo "== $case: N, B_COLS and the row stride unaligned (a row-major B read in place)"
  stats "$case" stride_bn "N,B_COLS,stride_bk"
done
for case in "csr scatter swizzled split 4" "csr scatter swizzled unscatter 16 tokens split 4" \
    "csr scatter swizzled unscatter 90% 16 tokens"; do
  echo "== $case"; stats "$case" stride_bk,stride_on ""
done
