"""Cliffs in linear's N:M route at few tokens: the automatic route on vector- and block-wise
patterns at 2-24 tokens against cuBLAS, and beside it the forms that could replace the decode
kernel where its step (8 rows x 256 slots on one warp for v % 8 == 0) holds too many products
(block-wise v=8 b=4 at 16 tokens ran 1.1-2.2 ms on an H100, dense 41-44 us: at-100f813/
nm_unpack_v8.txt). Forms, each through linear on fresh weight copies (the route is fixed at a
weight's first call), NaN where not applicable or wrong against float64:
  route   the library's choice now
  4r4w    the decode kernel's tiles replaced by 4 rows a program on 4 warps (v % 4 == 0, 2+ tokens)
  unpack  the unpack kernel forced (16-bit, n and m powers of two; 16 groups a step for
          blocks, else a 256-column step: 32 groups of 8, 16 of 16, 8 of 32, which compile
          without spill on sm_90 as launched (32 groups spilled 180 B at 2:16 and 0.5-4.5 KB
          at m = 32: the sixty-first session's runs before this used them); 16-token column
          tiles, split toward 256 programs)
  sized   fp32 given the size-picked tensor-core tiles (_triton_nm.SIZED_TILE_DTYPES)
  w2, w4, w8  the decode kernel's routed tile on 2, 4 or 8 warps (2+ tokens): where its step
          spills (fp32 element-wise and v = 4 at 9-32 tokens, NOTES, sixtieth; 16-bit v % 8
          == 0 at 5-8 tokens and fp32 v = 8 at 17-32, NOTES, sixty-first)
  sSwW    the decode kernel's 8-row tile stepping over S slots on W warps (s512w4, s1024w4;
          s256w1 the route before the sixty-third session's wide steps on few rows)
          (a helper's compile analysis, results/cpu/2026-12-06-halfdense-decode-analysis: on
          4096 rows the 512 one-warp programs leave a scheduler one warp, each step a
          dependent chain; 4x the warps, each chain 3.2-3.8x shorter, no spill)
  wide    the library's unpack windows for vectors of 8+ rows (block-wise, and 4:8 element-wise)
          widened to 64 tokens, its own tiles (at 24 tokens the dense backend took v=8 b=4)
  from16  v = 64 at 9-15 tokens on fewer than 8192 rows without the 16-token tensor-core tile
          (the route before acda5fb: the decode kernel's 4 x 4 tile or the unpack kernel)
  fromT   that tile from T tokens (from5: at 5-8 too, where the route ran 1.3x slower at 8
          than the tile at 9, at-e857cf5)
  pad8    the tensor-core tiles given B padded to next_power_of_2(N) at 2-8 tokens, not 16
          (the route before the sixty-fourth session: their B loads unaligned there)
  unpad   the expand and condensed-K kernels given x^T copied to N columns past 16 tokens,
          not padded to a multiple of 16 (their B loads masked on N: 2 bytes a thread,
          unpipelined, at 17-31 tokens and the like; the route before the sixty-second
          session; at 9-16 tokens the condensed-K tile keeps its 16-column copy)
  asN:M   the weight's entries stored as N:M and routed so (as2:8 on 2:16, as1:8 on 1:16:
          at most N of any M kept; the slots with no entry hold zeros, so twice the value
          bytes), where the expand kernel runs m dots a step (2:16 v=8 0.57-0.79x dense at
          17-48 tokens, sixty-third session); NaN where N:M cannot hold them
  alias   1:4 and 1:2 weights routed as the same weight read as 2:8 and 2:4 (ops/_nm_alias.py,
          which only the sparse tensor cores use, to 16-32 tokens: past them 1:4 and 1:2 v < 16
          densify where 2:8 and 2:4 take the wgmma, unpack or expand kernels)
Cold L2 (rotated weight copies), CUDA-graph medians, us a call; TF32 off for fp32's peer.
    PYTHONPATH=src python3 benchmarks/sweeps/nm_route_cliffs.py
    SHAPES=4096x4096 CASES=bf16/4:8/8/4 TOKENS=8,12,16 FORMS=route,unpack ...
"""

import contextlib
import dataclasses
import itertools
import os
import re

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels import nm_decode_tuning, nm_small_tiles, nm_unpack_tuning, tuning
from sparsekernels.kernels import spmm_nm_unpack as unpack
from sparsekernels.kernels._sizes import cdiv
from sparsekernels.ops import _triton_nm
from sparsekernels.ops._layout import rows_padded_to_16
from sparsekernels.ops._nm_alias import aliased_indices

DEVICE = torch.device("cuda")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SHAPES = [tuple(int(d) for d in s.split("x")) for s in os.environ.get(
    "SHAPES", "4096x4096,14336x4096").split(",")]  # fmt: skip
# "dtype/n:m/vector/block"
CASES = [
    (DTYPES[c.split("/")[0]], *(int(d) for d in c.split("/", 1)[1].replace(":", "/").split("/")))
    for c in os.environ.get(
        "CASES",
        "bf16/4:8/8/4,bf16/4:16/8/4,bf16/4:8/8/1,bf16/2:8/8/1,bf16/4:8/16/1,bf16/2:8/16/1,"
        "bf16/4:8/64/1,bf16/2:8/64/1,bf16/4:8/16/4,fp32/4:8/64/1,fp32/8:32/64/1,fp32/2:8/8/1",
    ).split(",")
]
TOKENS = [int(t) for t in os.environ.get("TOKENS", "2,8,12,16,24").split(",")]
FORMS = os.environ.get("FORMS", "route,4r4w,unpack,sized").split(",")


@contextlib.contextmanager
def form_patch(form: str, dtype: torch.dtype):
    """The library's tuning with `form`'s change; None where the form does not apply."""
    decode_config = nm_decode_tuning.spmm_nm_decode_config
    unpack_config = nm_unpack_tuning.spmm_nm_unpack_config
    sized = _triton_nm.SIZED_TILE_DTYPES
    aligned = _triton_nm.aligned_rows
    blocks = nm_unpack_tuning.UNPACK_BLOCK_WINDOWS
    few_vectors = nm_unpack_tuning.UNPACK_FEW_VECTOR_WINDOWS
    sixteen_fewest = nm_small_tiles.FEW_TOKEN_TILES_SIXTEEN_FEWEST

    def four_rows(n_cols, vector, *args, **kwargs):
        if n_cols > 1 and vector % 4 == 0:
            return nm_decode_tuning.SpmmNmDecodeConfig(4, 256, 4)
        return decode_config(n_cols, vector, *args, **kwargs)

    def forced_unpack(n_cols, n, m, vector, block, dt, rows):
        if not 2 <= n_cols <= 64:
            return None
        split = max(1, min(4, 256 // (cdiv(rows, 64) * cdiv(n_cols, 16))))
        groups = 16 if block > 1 else max(8, min(32, 256 // m))
        return nm_unpack_tuning.SpmmNmUnpackConfig(64, groups, 4, 3, split, 16)

    def more_warps(n_cols, vector, *args, **kwargs):
        config = decode_config(n_cols, vector, *args, **kwargs)
        return dataclasses.replace(config, num_warps=int(form[1:])) if n_cols > 1 else config

    def wide_steps(n_cols, vector, *args, **kwargs):
        config = decode_config(n_cols, vector, *args, **kwargs)
        if config.block_m != 8 or vector % 8:
            return config
        slots, warps = (int(d) for d in form[1:].split("w"))
        return dataclasses.replace(config, block_slots=slots, num_warps=warps)

    if form == "4r4w":
        nm_decode_tuning.spmm_nm_decode_config = four_rows
    elif re.fullmatch(r"s\d+w\d+", form):
        nm_decode_tuning.spmm_nm_decode_config = wide_steps
    elif form in ("w2", "w4", "w8"):
        nm_decode_tuning.spmm_nm_decode_config = more_warps
    elif form == "unpack":
        nm_unpack_tuning.spmm_nm_unpack_config = forced_unpack
    elif form == "wide":
        nm_unpack_tuning.UNPACK_BLOCK_WINDOWS = {
            key: (fewest, 64) for key, (fewest, _) in blocks.items()
        }
        nm_unpack_tuning.UNPACK_FEW_VECTOR_WINDOWS = {key: (8, 64) for key in few_vectors}
    elif form == "sized":
        _triton_nm.SIZED_TILE_DTYPES = sized + (torch.float32,)
    elif form.startswith("from") and form[4:].isdigit():  # the 16-token tile from T tokens
        nm_small_tiles.FEW_TOKEN_TILES_SIXTEEN_FEWEST = int(form[4:])
        tuning.spmm_nm_config.cache_clear()  # (memoized under the rule's constant)
    elif form == "pad8":
        _triton_nm.aligned_rows = lambda b: (
            _triton_nm.padded_rows(b) if b.shape[1] <= 16 else rows_padded_to_16(b)
        )
    elif form == "unpad":
        _triton_nm.aligned_rows = lambda b: (
            _triton_nm.padded_rows(b) if b.shape[1] <= 16 else _triton_nm.rows_contiguous(b)
        )
    try:
        yield
    finally:
        nm_decode_tuning.spmm_nm_decode_config = decode_config
        nm_unpack_tuning.spmm_nm_unpack_config = unpack_config
        _triton_nm.SIZED_TILE_DTYPES = sized
        _triton_nm.aligned_rows = aligned
        nm_unpack_tuning.UNPACK_BLOCK_WINDOWS = blocks
        nm_unpack_tuning.UNPACK_FEW_VECTOR_WINDOWS = few_vectors
        if sixteen_fewest != nm_small_tiles.FEW_TOKEN_TILES_SIXTEEN_FEWEST:
            nm_small_tiles.FEW_TOKEN_TILES_SIXTEEN_FEWEST = sixteen_fewest
            tuning.spmm_nm_config.cache_clear()


def applies(form: str, dtype: torch.dtype, n: int, m: int, vector: int, block: int, k: int):
    if form == "4r4w":
        return vector % 4 == 0
    if form in ("unpack", "wide"):
        return unpack.supports(n, m, block, dtype, k)
    if form == "sized":
        return dtype == torch.float32
    if form == "alias":
        return n == 1 and m in (2, 4) and block == 1 and k % (2 * m) == 0
    if form.startswith("as"):
        to_n, to_m = (int(d) for d in form[2:].split(":"))
        return to_m < m and m % to_m == 0 and to_n <= to_m and k % to_m == 0
    return True


def stored_as(W, n: int, m: int):
    """W as an n:m weight holding the same entries (2:16 as 2:8: at most 2 of any 8 kept, the
    slots with no entry zeros), or None where n:m cannot hold them."""
    dense = W.to_dense()
    try:
        wider = sk.NMMatrix.from_dense(dense, n, m, W.vector, block=W.block)
    except ValueError:  # (more than n of some m kept)
        return None
    return wider if torch.equal(wider.to_dense(), dense) else None


def linear_cold(W, copies: int, x: torch.Tensor, want: torch.Tensor, form: str) -> float:
    if form.startswith("as"):  # the same entries stored as another pattern (twice the slots)
        W = stored_as(W, *(int(d) for d in form[2:].split(":")))
        if W is None:
            return float("nan")
        copies = max(2, copies_for(W.values.nbytes, DEVICE))
    n, m, indices = W.n, W.m, W.indices
    if form == "alias":  # the same weight as 2:2m: the same values, every odd group's offset + m
        n, m, indices = 2, 2 * W.m, aliased_indices(W.indices, W.m)
    Ws = [
        sk.NMMatrix(W.values.clone(), indices.clone(), W.shape, n, m, W.vector, W.block,
                    check=False)
        for _ in range(copies)
    ]  # fmt: skip
    with form_patch(form, x.dtype):
        try:
            got = [sk.linear(x, Wc) for Wc in Ws][0]
        except Exception as e:  # a tile the compiler refuses: say so
            print(form, type(e).__name__, str(e)[:200], flush=True)
            return float("nan")
        tolerance = 1e-4 if x.dtype == torch.float32 else 1e-2
        if not ((got.t().double() - want).norm() / want.norm()).item() < tolerance:
            print(form, "wrong", flush=True)
            return float("nan")
        return do_bench_cudagraph(lambda: [sk.linear(x, Wc) for Wc in Ws], rep=30) * 1e3 / copies


def dense_cold(w: torch.Tensor, x: torch.Tensor) -> float:
    ws = [w.clone() for _ in range(max(2, copies_for(w.nbytes, DEVICE)))]
    return do_bench_cudagraph(lambda: [x @ c.t() for c in ws], rep=30) * 1e3 / len(ws)


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    table = []
    for (rows, k), (dtype, n, m, vector, block) in itertools.product(SHAPES, CASES):
        torch.manual_seed(0)
        w = torch.randn(rows, k, device=DEVICE, dtype=dtype)
        mask = sk.prune.nm_mask(w.float(), n, m, vector, block=block)
        W = sk.NMMatrix.from_dense(w, n, m, vector, block=block, mask=mask)
        dense_w = W.to_dense()
        copies = max(2, copies_for(W.values.nbytes, DEVICE))
        for tokens in TOKENS:
            x = torch.randn(tokens, k, device=DEVICE, dtype=dtype)
            want = dense_w.double() @ x.t().double()
            timed = {"dense": dense_cold(dense_w, x)}
            for form in FORMS:
                ok = applies(form, dtype, n, m, vector, block, k)
                timed[form] = linear_cold(W, copies, x, want, form) if ok else float("nan")
            name = str(dtype).replace("torch.", "")
            label = f"{rows}x{k} {name} {n}:{m} v{vector} b{block} t{tokens}"
            print(label, {f: round(t, 1) for f, t in timed.items()}, flush=True)
            table.append((label, timed))
    print(f"\n# {torch.cuda.get_device_name()}, us a call, cold L2; x dense = dense / route")
    print(f"{'case':<40}" + "".join(f"{f:>8}" for f in ["dense", *FORMS]) + f"{'x dense':>8}")
    for label, t in table:
        cells = "".join(f"{t[f]:8.1f}" for f in ["dense", *FORMS])
        print(f"{label:<40}{cells}{t['dense'] / t['route']:8.2f}")


if __name__ == "__main__":
    main()
