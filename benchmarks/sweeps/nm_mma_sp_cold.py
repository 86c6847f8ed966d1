"""A few tokens, 2:4, 2:8 and 1:8 on the sparse tensor cores (kernels/spmm_nm_mma_sp.py: mma.sp
through inline PTX, A as stored, the metadata and B in the MMA's register order), against the
wgmma kernel (the dense tile built in registers), the library's route and dense, cold L2.

Each timing rotates weight copies that overflow L2 twice; CUDA-graph medians in us a call,
each configuration checked against float64 first (NaN where wrong).
    PYTHONPATH=src python3 benchmarks/sweeps/nm_mma_sp_cold.py
    SHAPES=4096x14336 TOKENS=8,16 CONFIGS=m2k4n2/s4,m1k8n2 UNORDERED=1 WAVE=4 ...
    PATTERNS=2:8 CONFIGS=m1k8n1/b,m1k8n1/v,m1k8n2 ...
"""

import itertools
import os

import torch
from _nm_cases import checked_cold_us, env_cases, nm_case
from nm_decode_tall_cold import dense_cold, linear_cold
from triton.testing import do_bench_cudagraph

from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels.nm_mma_sp_operands import class_words, metadata_words, permuted_b
from sparsekernels.kernels.nm_wgmma_tuning import spmm_nm_wgmma_config
from sparsekernels.kernels.spmm_nm_mma_sp import spmm_nm_mma_sp
from sparsekernels.kernels.spmm_nm_wgmma import spmm_nm_wgmma

DEVICE = torch.device("cuda")
DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}[os.environ.get("DTYPE", "bf16")]
SHAPES, PATTERNS, TOKENS = env_cases("4096x14336,14336x4096,4096x4096", "2:4", "1,4,8,16,32")
# (2:8 and 1:8 too: PATTERNS=2:8,1:8, blocks 8 only)
# "mMkKnN[/sS]": M m16 tiles a warp, K k32 blocks a step, N n8 tiles a program, S split-K
# ranges (none: enough for WAVE programs an SM, each range 2 steps at least)
CONFIGS = os.environ.get("CONFIGS", "m1k8n1,m1k8n2,m2k8n1,m2k8n2,m2k4n2,m2k8n4").split(",")
ORDERED = os.environ.get("UNORDERED") != "1"
WAVE = int(os.environ.get("WAVE", "4"))


def parse(name: str, rows: int, tokens: int, k: int, sms: int) -> dict:
    """/b: B permuted in the kernel; /v: likewise, loaded for 16-byte shared stores; /wW: split
    for W programs an SM; /sS: S ranges; /p: each step's loads a step ahead (in pairs: no
    faster, at-8e676ab); /o: a column-major out (as linear's); /c: likewise, stored by runs of rows;
    /d: permuted B loaded by each warp, no shared copy."""
    tile, *flags = name.split("/")
    mt, rest = tile[1:].split("k")
    kb, nt = (int(d) for d in rest.split("n"))
    tiles = -(-rows // (64 * int(mt))) * -(-tokens // (8 * nt))
    wave = next((int(f[1:]) for f in flags if f.startswith("w")), WAVE)
    split = max(1, min(16, wave * sms // tiles, k // (32 * kb) // 2))  # 2 steps a range
    split = next((int(f[1:]) for f in flags if f.startswith("s")), split)
    return dict(
        m_tiles=int(mt),
        blocks=kb,
        n_tiles=nt,
        split=split,
        natural_b="b" in flags or "v" in flags,
        wide_b_stores="v" in flags,
        prefetch="p" in flags,
        out_m_fastest="c" in flags,
    )


def main():
    table = []
    sms = torch.cuda.get_device_properties(DEVICE).multi_processor_count
    for (M, K), (n, m), tokens in itertools.product(SHAPES, PATTERNS, TOKENS):
        case = nm_case(M, K, n, m, tokens, DTYPE)
        W, want, bits, words = (case[k] for k in ("W", "want", "bits", "words"))
        b = case["x"].t()  # (K, tokens), unit stride along K: as linear passes x^T
        copies = max(2, copies_for(W.values.nbytes + words.nbytes, DEVICE))
        weights = [(W.values.clone(), words.clone()) for _ in range(copies)]
        timed = {"dense": dense_cold(case), "linear": linear_cold(case, copies, n, m)}
        out = torch.empty(M, tokens, device="cuda", dtype=DTYPE)
        wg = spmm_nm_wgmma_config(max(tokens, 4), n, m, 1, 1, torch.bfloat16, M, K, sms)
        if wg is not None:

            def run_wgmma(values, words, wg=wg):
                spmm_nm_wgmma(
                    values=values, words=words, bits=bits, b=b, bias=None, out=out, n=n, m=m,
                    vector=1, activation="none", block_m=wg.block_m, block_g=wg.block_g,
                    block_n=wg.block_n, split=wg.split,
                )  # fmt: skip

            timed["wgmma"] = checked_cold_us("wgmma", run_wgmma, weights, out, want)
        timed["permute B"] = do_bench_cudagraph(lambda: permuted_b(b, n, m), rep=30) * 1e3
        prepared = [
            (
                v,
                metadata_words(W.indices, M, 1, n, m),
                class_words(W.indices, M, 1, n) if m == 8 else None,
            )
            for v, _ in weights
        ]  # (the metadata copies rotate with the values)
        prepared = [(v, meta.clone(), c if c is None else c.clone()) for v, meta, c in prepared]
        columns = torch.empty(tokens, M, device="cuda", dtype=DTYPE).t()  # linear's W x^T
        for name in CONFIGS:
            config = parse(name, M, tokens, K, sms)
            into = columns if {"o", "c"} & set(name.split("/")[1:]) else out

            def run(values, metadata, classes, config=config, into=into):
                spmm_nm_mma_sp(
                    values=values, metadata=metadata, classes=classes, n=n, m=m, b=b, bias=None,
                    out=into, activation="none", ordered=ORDERED, **config,
                )  # fmt: skip

            timed[f"{name}/s{config['split']}"] = checked_cold_us(
                name, run, prepared, into, want
            )  # fmt: skip
        label = f"{M}x{K} {n}:{m} t{tokens}"
        print(label, f"copies {copies}", {k: round(v, 1) for k, v in timed.items()}, flush=True)
        table.append((label, timed))
    names = sorted({c for _, timed in table for c in timed}, key=lambda c: (c != "dense", c))
    print(f"\nordered metadata {ORDERED}, split for {WAVE} programs an SM")
    print(f"{'case':<24} " + " ".join(f"{c:>17}" for c in names))
    for label, timed in table:
        print(f"{label:<24} " + " ".join(f"{timed.get(c, float('nan')):17.1f}" for c in names))


if __name__ == "__main__":
    main()
