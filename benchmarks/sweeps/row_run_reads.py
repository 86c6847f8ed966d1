"""How fast the H200 reads a weight in the mma.sp kernel's pattern: each program walks its
rows a step at a time, `run` bytes of each row a step. Is 1:8's 1.8 TB/s (64-byte runs) and
2:8's 2.6 (128) against 2:4's 3.3 (256) the run length, the bytes a step, or neither?

A plain Triton read (int32 words summed, one word a row stored) over the values of 1:8 and
2:8 on 4096 x 14336 (4096 rows of 3584 / 7168 bytes) and the dense bf16 weight (28672 bytes a
row), for runs of 64-512 bytes, 4-16 KB a program-step, split-K for 4 or 8 programs an SM, and
the same steps from a tiled copy (each program-step's bytes contiguous: the layout a prepared
operand could have). Cold L2 (copies rotated), CUDA-graph medians, TB/s on the bytes read.
    PYTHONPATH=src python3 benchmarks/sweeps/row_run_reads.py
"""

import itertools

import torch
import triton
import triton.language as tl
from triton.testing import do_bench_cudagraph

from sparsekernels.bench.harness import copies_for

ROWS = 4096
ROW_BYTES = {"1:8 values": 3584, "2:8 values": 7168, "dense": 28672}
RUNS = (64, 128, 256, 512)
STEP_BYTES = (4096, 16384)
WAVES = (4, 8)


@triton.jit
def _read_runs(x, out, stride_row, STEPS_PER_SPLIT, STEPS, BLOCK_R: tl.constexpr,
               RUN: tl.constexpr, TILED: tl.constexpr, STAGES: tl.constexpr):  # fmt: skip
    """Program (r, s): rows r * BLOCK_R on, steps s * STEPS_PER_SPLIT on, RUN words a row a
    step; TILED: step t of row block r lies at ((r * STEPS + t) * BLOCK_R + row) * RUN."""
    r, s = tl.program_id(0), tl.program_id(1)
    rows = tl.arange(0, BLOCK_R)[:, None]
    words = tl.arange(0, RUN)[None, :]
    first = s * STEPS_PER_SPLIT
    last = tl.minimum(first + STEPS_PER_SPLIT, STEPS)
    acc = tl.zeros([BLOCK_R, RUN], tl.int32)
    for t in tl.range(first, last, num_stages=STAGES):
        if TILED:
            ptrs = x + ((r * STEPS + t) * BLOCK_R + rows).to(tl.int64) * RUN + words
        else:
            ptrs = x + (r * BLOCK_R + rows).to(tl.int64) * stride_row + t * RUN + words
        acc += tl.load(ptrs)  # int32 sums wrap, as the check's do
    total = tl.sum(acc, 1)
    tl.store(out + s * tl.num_programs(0) * BLOCK_R + r * BLOCK_R + tl.arange(0, BLOCK_R), total)


def tiled(x: torch.Tensor, block_r: int, run: int) -> torch.Tensor:
    """x (rows, words) as (row blocks, steps, block_r, run): each program-step contiguous."""
    rows, words = x.shape
    return x.view(rows // block_r, block_r, words // run, run).transpose(1, 2).contiguous()


def main():
    device = torch.device("cuda")
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    print(f"# {torch.cuda.get_device_name()}, {sms} SMs; {ROWS} rows; cold L2; TB/s")
    rows_out = []
    for (name, row_bytes), run, step_bytes, wave, layout, stages in itertools.product(
        ROW_BYTES.items(), RUNS, STEP_BYTES, WAVES, ("rows", "tiled"), (1, 2)
    ):
        block_r = step_bytes // run
        words, run_words = row_bytes // 4, run // 4
        if block_r > ROWS or words % run_words or block_r < 4:
            continue
        steps = words // run_words
        blocks = ROWS // block_r
        split = max(1, min(wave * sms // blocks, steps))
        per_split = -(-steps // split)
        split = -(-steps // per_split)
        base = torch.randint(-(2**31), 2**31 - 1, (ROWS, words), device=device, dtype=torch.int32)
        want = base.view(blocks, block_r, steps, run_words)
        want = [want[:, :, i * per_split : (i + 1) * per_split] for i in range(split)]
        want = torch.stack([_wrapped_sums(w) for w in want])  # (split, blocks, block_r)
        copies = [base.clone() for _ in range(copies_for(base.numel() * 4, device))]
        if layout == "tiled":
            copies = [tiled(c, block_r, run_words) for c in copies]
        out = torch.empty(split * ROWS, device=device, dtype=torch.int32)

        def read(x, out=out):
            _read_runs[(blocks, split)](x, out, words, per_split, steps, BLOCK_R=block_r,
                                        RUN=run_words, TILED=layout == "tiled",
                                        STAGES=stages, num_warps=4)  # fmt: skip

        out.fill_(7)
        read(copies[0])
        if not torch.equal(out.view(split, blocks, block_r), want):
            print(name, run, step_bytes, wave, layout, stages, "WRONG", flush=True)
            continue
        us = do_bench_cudagraph(lambda: [read(c) for c in copies], rep=30) * 1e3 / len(copies)
        tbs = ROWS * row_bytes / us / 1e6
        row = (name, run, step_bytes, wave, layout, stages, split, us, tbs)
        print(*row[:7], f"{us:.1f} us {tbs:.2f} TB/s", flush=True)
        rows_out.append(row)
    print("\nweight       run  step_B  wave layout stages split      us   TB/s")
    for name, run, step_bytes, wave, layout, stages, split, us, tbs in rows_out:
        print(f"{name:11s} {run:4d} {step_bytes:7d} {wave:5d} {layout:6s} {stages:6d} "
              f"{split:5d} {us:7.1f} {tbs:6.2f}")  # fmt: skip


def _wrapped_sums(w: torch.Tensor) -> torch.Tensor:
    """Each row's sum of w (blocks, block_r, steps, run) in wrapping int32 arithmetic."""
    total = w.sum(dim=(2, 3), dtype=torch.int64)
    return ((total + 2**31) % 2**32 - 2**31).to(torch.int32)


if __name__ == "__main__":
    main()
