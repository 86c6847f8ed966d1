"""Is cuSPARSELt's algorithm search safe to run, and what does its pick give? One subprocess a
case (a search that faults poisons its process's CUDA context): 2:4 weight (M, K) times x^T
(K, N) column-major as linear passes it, product row-major or written transposed, through
torch's older search (`_cslt_sparse_mm_search`: an algorithm) or the newer binding
(`torch._C._cusparselt.mm_search`: algorithm, split-K and its mode). Each case prints the pick,
its error against float32, and CUDA-graph medians (us) of algorithm 0 and of the pick.

    PYTHONPATH=src python3 benchmarks/sweeps/cusparselt_search_safety.py

SHAPES=MxK,..., TOKENS=n,..., DTYPES=bf16,fp16 (environment) replace the defaults.
"""

import json
import os
import subprocess
import sys

CASE = r"""
import json, sys, torch
from triton.testing import do_bench_cudagraph
M, K, N, dtype, transposed, api = sys.argv[1:]
M, K, N, transposed = int(M), int(K), int(N), transposed == "1"
dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
torch.manual_seed(0)
w = torch.randn(M, K, device="cuda", dtype=dtype)
w = w * torch.tensor([1, 1, 0, 0], device="cuda", dtype=dtype).repeat(K // 4)
packed = torch._cslt_compress(w)
pad = -N % 16
x = torch.randn(N + pad, K, device="cuda", dtype=dtype)
b = x.t()
if api == "old":
    setting = {"alg_id": int(torch._cslt_sparse_mm_search(packed, b, transpose_result=transposed))}
else:
    found = torch._C._cusparselt.mm_search(packed, b, None, None, None, transposed)
    setting = {"alg_id": int(found[0]), "split_k": int(found[1]), "split_k_mode": int(found[2])}
torch.cuda.synchronize()
want = w.float() @ b.float()
run = lambda **s: torch._cslt_sparse_mm(packed, b, transpose_result=transposed, **s)
got = run(**setting)
got = got.t() if transposed else got
err = ((got.float() - want).norm() / want.norm()).item()
us = lambda f: round(do_bench_cudagraph(f, rep=20, return_mode="median") * 1e3, 1)
print(json.dumps({"setting": setting, "err": err, "alg0_us": us(run), "pick_us": us(lambda: run(**setting))}))
"""


def main() -> None:
    shapes = os.environ.get("SHAPES", "4096x4096,1024x1024").split(",")
    tokens = os.environ.get("TOKENS", "16,128,2048").split(",")
    dtypes = os.environ.get("DTYPES", "bf16,fp16").split(",")
    for shape in shapes:
        M, K = shape.split("x")
        for N in tokens:
            for dtype in dtypes:
                for transposed in ("0", "1"):
                    for api in ("old", "new"):
                        args = [sys.executable, "-c", CASE, M, K, N, dtype, transposed, api]
                        try:
                            done = subprocess.run(args, capture_output=True, text=True, timeout=120)
                            lines = done.stdout.strip().splitlines()
                            result = (
                                json.loads(lines[-1])
                                if done.returncode == 0 and lines
                                else {
                                    "fault": (done.stderr.strip().splitlines() or ["?"])[-1][:160]
                                }
                            )
                        except subprocess.TimeoutExpired:
                            result = {"fault": "timeout"}
                        case = f"{shape} N={N} {dtype} transposed={transposed} {api}"
                        print(case, json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
