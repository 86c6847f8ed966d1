"""linear on the CPU backend (torch's sparse CSR matmul) against dense x @ W^T: N:M and CSR
weights of 4096 x 4096 at 1, 16 and 112 tokens, fp32 and bf16; median of 5 calls after one
warm-up, ms. Run from the repository root: PYTHONPATH=src python THIS_FILE."""

import time
import warnings

import torch

import sparsekernels as sk

warnings.filterwarnings("ignore")  # torch's "sparse CSR is beta"


def ms(fn, reps: int = 5) -> float:
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[reps // 2] * 1e3


def main():
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for dtype in (torch.float32, torch.bfloat16):
        w = torch.randn(4096, 4096).to(dtype)
        weights = {
            f"{n}:{m}": sk.NMMatrix.from_dense(w, n, m, mask=sk.prune.nm_mask(w.float(), n, m))
            for n, m in ((2, 4), (2, 8), (1, 8))
        }
        mask = sk.prune.magnitude_mask(w.float(), 0.9)
        weights["CSR 90%"] = sk.CSRMatrix.from_dense(w, mask=mask)
        for tokens in (1, 16, 112):
            x = torch.randn(tokens, 4096).to(dtype)
            row = [f"dense {ms(lambda: x @ w.t()):7.2f}"]
            for name, W in weights.items():
                row.append(f"{name} {ms(lambda W=W: sk.linear(x, W, backend='torch_sparse')):7.2f}")
            print(f"{str(dtype)[6:]:8s} {tokens:3d} tokens  " + "  ".join(row), flush=True)


if __name__ == "__main__":
    main()
