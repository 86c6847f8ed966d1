"""4:8 v=8 at 2 tokens on 4096 x 4096: the route's launch and tile/warp variants of the same kernel,
compiled for sm_90; a table of per-warp loop instructions, the whole weight's warp-instructions
and a per-warp serial issue bound."""
import sys
from compile_decode import compile_case
from route_probe import decode_launch
import re

R = K = 4096
SMS, GHZ = 132, 1.98


def row(name, n, m, v, t, bm=None, slots=None, warps=None):
    d = decode_launch(R, K, t, n, m, v)
    c = dict(d["const"])
    w = d["warps"]
    if bm:
        c["BLOCK_M"] = bm
        c["SHARED"] = v % bm == 0
    if slots:
        c["BLOCK_W"] = slots // (32 // c["BITS"])
    if warps:
        w = warps
    spi = c["BLOCK_W"] * (32 // c["BITS"])
    S = K * n // m
    steps = -(-S // spi)
    programs = -(-R // c["BLOCK_M"])
    line, body, cnt, shared = compile_case(name, c, w)
    regs = int(re.search(r"registers (\d+)", line).group(1))
    spill = int(re.search(r"spill (\d+)", line).group(1))
    L = len(body)
    total = L * w * steps * programs  # warp-instructions in the loop, whole weight
    issue_us = total / (SMS * 4) / (GHZ * 1e3)
    serial_us = L * steps / (GHZ * 1e3)  # one warp's loop at 1 instr/cycle, no stalls
    warps_sm = programs * w / SMS
    ldg = sum(v for k, v in cnt.items() if k.startswith("LDG"))
    lds = sum(v for k, v in cnt.items() if k.startswith("LDS"))
    sts = sum(v for k, v in cnt.items() if k.startswith("STS"))
    shfl = cnt.get("op:SHFL", 0)
    per_slot = L * w / spi
    print(f"| {name} | {c['BLOCK_M']}x{spi} | {w} | {regs} | {spill} | {shared} | {L} | {per_slot:.2f} | "
          f"{per_slot / c['BLOCK_M']:.3f} | {ldg}/{lds}/{sts}/{shfl} | {steps} | {programs} | {warps_sm:.1f} | "
          f"{total/1e6:.2f} | {issue_us:.2f} | {serial_us:.2f} |", flush=True)


if __name__ == "__main__":
    print("| case | tile rows x slots | warps | regs | spill B | smem B | loop instr/warp | warp-instr per slot-step | per (row,slot) | loop LDG/LDS/STS/SHFL per warp | steps | programs | warps/SM | loop warp-instr total (M) | aggregate issue us | one warp serial us |")
    print("|" + "---|" * 16)
    row("4:8 v8 t2 route", 4, 8, 8, 2)
    row("2:8 v8 t2 decode", 2, 8, 8, 2)
    row("1:8 v8 t2 decode", 1, 8, 8, 2)
    row("4:8 v8 t1 route", 4, 8, 8, 1)
    row("4:8 v8 t4 route", 4, 8, 8, 4)
    row("4:8 v8 t8 decode(8x256,2w)", 4, 8, 8, 8)
    if "--variants" in sys.argv:
        for bm, slots, warps in [(8, 256, 2), (8, 256, 4), (8, 512, 4), (8, 1024, 4), (8, 512, 8),
                                 (8, 128, 1), (4, 256, 1), (4, 256, 2), (4, 512, 4), (2, 256, 1), (8, 2048, 8)]:
            row(f"4:8 v8 t2 {bm}x{slots} {warps}w", 4, 8, 8, 2, bm, slots, warps)
