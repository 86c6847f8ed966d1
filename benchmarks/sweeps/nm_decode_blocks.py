"""The N:M decode kernel on block-wise patterns, called as ops/_triton_nm._decode launches it,
in forms that differ in the offsets' bits and the tile (benchmarks/NOTES.md, fifty-eighth
session: 64:128 b=64 took 1.1-2.0 ms at 8 tokens, its 1-bit offsets making a packed word, the
walk's smallest step, 2048 slots that spilled; 4:8 b=4 at 16 tokens is issue-bound instead).
Forms (FORMS, default all):
  before  offsets in packed_bits(m, block): the launch before nm_decode_tuning.decode_bits
  route   the library's launch now (decode_bits: a word covers 256 slots at most)
  128     route's bits for 128 slots, 128-slot steps where N > 1 (no spill at 8 tokens)
  4r      route with 4 rows a program (v % 4 == 0): x's gathers serve a vector's 4 rows
  4r128   both
  4r4w    4 rows a program on 4 warps (fp32: the one-warp 8 x 256 step spills 2.4 KB a thread,
          this tile compiles to 126 registers and no spill; NOTES, fifty-ninth session)
Cold L2 (rotated weight copies), CUDA-graph medians in us a call, each form checked against
float64 first (NaN where wrong); cuBLAS on the dense weight in the same run (TF32 off). bf16,
or DTYPE=fp32.
    PYTHONPATH=src python3 benchmarks/sweeps/nm_decode_blocks.py
    SHAPES=14336x4096 PATTERNS=4:8 VECTOR=4 BLOCK=4 TOKENS=8,16 FORMS=route,4r,4r128 ...
"""

import itertools
import os

import torch
from _nm_cases import checked_cold_us, env_cases
from nm_decode_tall_cold import dense_cold

import sparsekernels as sk
from sparsekernels.bench.harness import copies_for
from sparsekernels.formats.nm import pack_offsets
from sparsekernels.kernels import nm_decode_tuning
from sparsekernels.kernels import spmm_nm_decode as decode
from sparsekernels.ops._layout import padded_rows

DEVICE = torch.device("cuda")
SHAPES, PATTERNS, TOKENS = env_cases("4096x4096,14336x4096", "64:128", "1,8,16")
VECTOR = int(os.environ.get("VECTOR", "64"))
BLOCK = int(os.environ.get("BLOCK", "64"))
FORMS = os.environ.get("FORMS", "before,route,128,4r,4r128").split(",")
DTYPE = {"bf16": torch.bfloat16, "fp32": torch.float32}[os.environ.get("DTYPE", "bf16")]


def launch_options(form: str, n: int, m: int, tokens: int, rows: int, slots_row: int):
    """The decode kernel's options for `form` (None where it does not apply) and its step."""
    config = nm_decode_tuning.spmm_nm_decode_config(
        tokens, VECTOR, rows, slots_row, n, m, BLOCK, column_major_out=False,
        itemsize=DTYPE.itemsize,
    )  # fmt: skip
    block_m, block_slots, warps = config.block_m, config.block_slots, config.num_warps
    if form == "before":
        bits = decode.packed_bits(m, BLOCK)
    elif form == "route":
        bits = nm_decode_tuning.decode_bits(m, BLOCK)
    else:
        if form.endswith("128") and tokens > 1:
            block_slots = 128
        if form.startswith("4r"):
            if VECTOR % 4:
                return None
            block_m = 4
            warps = 4 if form == "4r4w" else warps
        most = min(block_slots, nm_decode_tuning.DECODE_WORD_MAX_SLOTS)
        bits = nm_decode_tuning.decode_bits(m, BLOCK, most)
    slots_a_word = 32 // bits * BLOCK
    block_w = max(1, block_slots // slots_a_word)
    steps = -(-slots_row // (block_w * slots_a_word))
    split = nm_decode_tuning.spmm_nm_decode_split(rows, block_m, steps, config.split_programs)
    options = dict(
        bits=bits, block_m=block_m, block_w=block_w, num_warps=warps,
        num_stages=config.num_stages, split=split, prefetch=config.prefetch,
    )  # fmt: skip
    return options, block_w * slots_a_word


def main():
    torch.backends.cuda.matmul.allow_tf32 = False  # (fp32's dense peer: strict fp32)
    print(f"# {torch.cuda.get_device_name()}, {DTYPE}, v={VECTOR}, b={BLOCK}, cold L2, us a call")
    for (rows, k), (n, m), tokens in itertools.product(SHAPES, PATTERNS, TOKENS):
        torch.manual_seed(0)
        w = torch.randn(rows, k, device=DEVICE, dtype=DTYPE)
        mask = sk.prune.nm_mask(w.float(), n, m, VECTOR, block=BLOCK)
        W = sk.NMMatrix.from_dense(w, n, m, VECTOR, block=BLOCK, mask=mask)
        x = torch.randn(tokens, k, device=DEVICE, dtype=DTYPE)
        b, want = padded_rows(x.t()), W.to_dense().double() @ x.t().double()
        copies = max(2, copies_for(W.values.nbytes, DEVICE))
        row = {"dense": round(dense_cold({"w": W.to_dense(), "x": x}), 1)}
        out = torch.empty(rows, tokens, device=DEVICE, dtype=DTYPE)
        for form in FORMS:
            got = launch_options(form, n, m, tokens, rows, W.values.shape[1])
            if got is None:
                continue
            options, step = got
            weights = [
                (W.values.clone(), pack_offsets(W.indices, options["bits"])) for _ in range(copies)
            ]

            def run(values, words, options=options):
                decode.spmm_nm_decode(
                    values=values, words=words, b=b, bias=None, out=out, n=n, m=m,
                    vector=VECTOR, block=BLOCK, activation="none", **options,
                )  # fmt: skip

            us = checked_cold_us(form, run, weights, out, want)
            row[f"{form} ({options['bits']} bits, {options['block_m']}x{step})"] = round(us, 1)
        print(f"{rows}x{k} {n}:{m} t{tokens}", row, flush=True)


if __name__ == "__main__":
    main()
