"""Per-variant numbers from compile.py's dumps: registers, spills, shared memory, the MMA kind
and count, the K/V pipeline (TTGIR buffers and schedule; LDGSTS / UTMALDG in SASS), the main
loop (longest backward branch) and what it holds, and the instructions of the partial-tile
mask unpack per tile (SASS line info: source lines of _tile_mask / _tile_mask_t, plus the
caller's tl.where line; and the size of the conditional block that holds them).

    /work/main/.venv/bin/python analyze.py   -> summary.json, summary.txt (per-variant detail)
"""

import json
import re
from collections import Counter
from pathlib import Path

HERE = Path("/tmp/attn_audit")
DUMP = HERE / "dumps"
SRC = "/work/main/src/sparsekernels/kernels/"
FWD, BWD = SRC + "attention_block.py", SRC + "attention_block_backward.py"


def fn_lines(path, name):
    """Line range (1-based, inclusive) of a @triton.jit function's body."""
    lines = Path(path).read_text().splitlines()
    start = next(i for i, s in enumerate(lines) if s.startswith(f"def {name}(")) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith(("def ", "@"))), len(lines))
    return start, end


TILE_MASK = fn_lines(FWD, "_tile_mask")
TILE_MASK_T = fn_lines(FWD, "_tile_mask_t")
WHERE_LINE = {  # the caller's line applying the mask
    "fwd": (FWD, next(i + 1 for i, s in enumerate(Path(FWD).read_text().splitlines())
                      if "s = tl.where(_tile_mask(" in s)),
    "bwd_dkdv": (BWD, next(i + 1 for i, s in enumerate(Path(BWD).read_text().splitlines())
                           if "p_t = tl.where(keep" in s)),
    "bwd_dq": (BWD, next(i + 1 for i, s in enumerate(Path(BWD).read_text().splitlines())
                         if "p = tl.where(_tile_mask(" in s)),
}  # fmt: skip
INSTR = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?);")


def parse_sass(text):
    out = []
    for line in text.splitlines():
        m = INSTR.match(line)
        if m:
            out.append((int(m.group(1), 16), m.group(2).strip()))
    return out


def parse_lsass(text):
    """addr -> (file, line) from nvdisasm -gi."""
    cur, where = None, {}
    for line in text.splitlines():
        m = re.match(r'\s*//## File "([^"]+)", line (\d+)', line)
        if m:
            cur = (m.group(1), int(m.group(2)))
            continue
        m = INSTR.match(line)
        if m:
            where[int(m.group(1), 16)] = cur
    return where


def longest_loop(ins):
    best = (0, None, None)
    for addr, text in ins:
        m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
        if m:
            tgt = int(m.group(1), 16)
            if tgt < addr and (addr - tgt) // 16 + 1 > best[0]:
                best = ((addr - tgt) // 16 + 1, tgt, addr)
    return best


def opcode(text):
    t = re.sub(r"^@!?U?P\w+\s+", "", text)
    return t.split()[0] if t else ""


CATS = {
    "HGMMA": lambda o: o.startswith("HGMMA"),
    "HMMA": lambda o: o.startswith("HMMA"),
    "LDGSTS": lambda o: o.startswith("LDGSTS"),
    "UTMALDG": lambda o: o.startswith("UTMALDG"),
    "LDG": lambda o: o.startswith("LDG.") or o == "LDG",
    "STG": lambda o: o.startswith("STG"),
    "LDS": lambda o: o.startswith("LDS") and not o.startswith("LDSM"),
    "LDSM": lambda o: o.startswith("LDSM"),
    "STS": lambda o: o.startswith("STS"),
    "STL/LDL": lambda o: o.startswith(("STL", "LDL")),
    "MUFU.EX2": lambda o: o.startswith("MUFU.EX2"),
    "cvt(F2F/F2FP/I2F/F2I)": lambda o: o.startswith(("F2F", "F2FP", "I2F", "F2I", "I2FP")),
    "SHFL": lambda o: o.startswith("SHFL"),
    "BAR": lambda o: o.startswith("BAR"),
    "DEPBAR": lambda o: "DEPBAR" in o,
    "IMAD.WIDE": lambda o: o.startswith("IMAD.WIDE"),
    "64b-add(.X)": lambda o: o.startswith(("IADD3.X", "LEA.HI.X", "IMAD.X", "IADD.64")) or (
        o.startswith(("IADD3", "LEA")) and ".X" in o),
}


def classify(ins_texts):
    c = Counter()
    for t in ins_texts:
        o = opcode(t)
        for k, f in CATS.items():
            if f(o):
                c[k] += 1
    return c


def ttgir_pipeline(ttgir):
    """K/V (or Q/dO) buffers and the loop's schedule of async copies, waits and dots."""
    allocs = re.findall(r"%(\w+) = ttg\.local_alloc : \(\) -> !ttg\.memdesc<([0-9x]+)x(bf16|f32|i32|f16)", ttgir)
    bufs = {name: f"{shape}x{dt}" for name, shape, dt in allocs}
    # the main scf.for body, top level only
    lines = ttgir.splitlines()
    start = next(i for i, s in enumerate(lines) if re.search(r"= scf\.for ", s) or s.strip().startswith("scf.for "))
    depth, body = 0, []
    for s in lines[start:]:
        depth += s.count("{") - s.count("}")
        body.append(s)
        if depth <= 0 and len(body) > 1:
            break
    sched = []
    d = 0
    for s in body[1:]:
        if d == 0:
            m = re.search(r"%(\w+) = ttg\.async_copy_global_to_local .*?-> <([0-9x]+)x(\w+)", s)
            if m:
                sched.append(f"cp.async {m.group(1).rsplit('_', 1)[0]}")
            m = re.search(r"ttg\.async_wait .*\{num = (\d+)", s)
            if m:
                sched.append(f"wait({m.group(1)})")
            if "ttng.warp_group_dot_wait" in s:
                sched.append("wgmma.wait(" + re.search(r"pendings = (\d+)", s).group(1) + ")")
            elif "ttng.warp_group_dot " in s:
                sched.append("wgmma")
            elif " tt.dot " in s:
                sched.append("mma")
            if re.search(r"= tt\.load ", s):
                sched.append("ld " + re.search(r"%(\w+) = tt\.load", s).group(1).rsplit("_", 1)[0])
            if "ttg.local_alloc %" in s:
                sched.append("local_alloc(reg->smem)")
            if "scf.if" in s:
                sched.append("if{mask}")
        d += s.count("{") - s.count("}")
    # collapse consecutive duplicates
    out = []
    for x in sched:
        if out and out[-1][0] == x:
            out[-1][1] += 1
        else:
            out.append([x, 1])
    sched = [x if n == 1 else f"{x} x{n}" for x, n in out]
    mma = re.search(r"#mma\d* = #ttg\.nvidia_mma<\{versionMajor = (\d)[^}]*instrShape = \[([0-9, ]+)\]", ttgir)
    return bufs, sched, (mma.group(1), mma.group(2)) if mma else None


def analyze(rec):
    stem = DUMP / rec["variant"]
    ins = parse_sass(Path(f"{stem}.sass").read_text())
    where = parse_lsass(Path(f"{stem}.lsass").read_text())
    n, lo, hi = longest_loop(ins)
    loop = [(a, t) for a, t in ins if lo is not None and lo <= a <= hi]
    kernel = rec["variant"].split("__")[1]
    r = dict(rec)
    r["sass_total"] = len(ins)
    r["pre"] = sum(1 for a, _ in ins if lo is not None and a < lo)
    r["post"] = sum(1 for a, _ in ins if hi is not None and a > hi)
    r["loop"] = n
    r["loop_range"] = [hex(lo) if lo is not None else None, hex(hi) if hi is not None else None]
    r["all"] = dict(classify([t for _, t in ins]))
    r["in_loop"] = dict(classify([t for _, t in loop]))
    r["ldgsts_widths"] = dict(Counter(opcode(t) for _, t in ins if opcode(t).startswith("LDGSTS")))
    r["ldg_widths_loop"] = dict(Counter(opcode(t) for _, t in loop if opcode(t).startswith("LDG")))
    r["hgmma_shapes"] = dict(Counter(opcode(t) for _, t in ins if opcode(t).startswith(("HGMMA", "HMMA"))))
    # per source line in the loop
    per_line = Counter()
    for a, _ in loop:
        f, ln = where.get(a) or ("?", 0)
        per_line[(Path(f).name, ln)] += 1
    r["loop_by_line"] = [[f"{f}:{ln}", c] for (f, ln), c in per_line.most_common()]
    if kernel in WHERE_LINE:
        tm = TILE_MASK_T if kernel == "bwd_dkdv" else TILE_MASK
        wf, wl = WHERE_LINE[kernel]
        unpack = sum(
            1 for a, _ in loop
            if where.get(a) and where[a][0] == FWD and tm[0] <= where[a][1] <= tm[1]
        )
        apply_ = sum(1 for a, _ in loop if where.get(a) == (wf, wl))
        unpack_outside = sum(
            1 for a, _ in ins
            if not (lo <= a <= hi) and where.get(a) and where[a][0] == FWD
            and tm[0] <= where[a][1] <= tm[1]
        )
        # forward branches inside the loop that skip a block holding unpack instructions
        blocks = []
        for a, t in loop:
            m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", t)
            if m and lo <= int(m.group(1), 16) <= hi and int(m.group(1), 16) > a:
                tgt = int(m.group(1), 16)
                inside = [(b, u) for b, u in loop if a < b < tgt]
                n_unpack = sum(1 for b, _ in inside if where.get(b) and where[b][0] == FWD
                               and tm[0] <= where[b][1] <= tm[1])
                if n_unpack:
                    blocks.append(dict(branch=hex(a), target=hex(tgt), size=len(inside),
                                       unpack_lines=n_unpack,
                                       ops=dict(classify([u for _, u in inside])),
                                       ldg=dict(Counter(opcode(u) for _, u in inside
                                                        if opcode(u).startswith("LDG")))))
        r["mask_unpack_in_loop"] = unpack
        r["mask_apply_in_loop"] = apply_
        r["mask_unpack_hoisted"] = unpack_outside
        r["mask_blocks"] = blocks
    ttgir = Path(f"{stem}.ttgir").read_text()
    if "scf.for" in ttgir:
        r["smem_buffers"], r["loop_schedule"], r["mma_layout"] = ttgir_pipeline(ttgir)
    return r


def main():
    recs = [json.loads(x) for x in open(HERE / "compiled.jsonl") if x.strip()]
    out = [analyze(r) for r in recs if "error" not in r]
    out.sort(key=lambda r: r["variant"])
    json.dump(out, open(HERE / "summary.json", "w"), indent=1)
    with open(HERE / "summary.txt", "w") as f:
        for r in out:
            f.write(f"== {r['variant']} grid {r.get('grid')}\n")
            f.write(f"  regs {r['registers']} spill st/ld {r['spill_st']}/{r['spill_ld']} "
                    f"shared {r['shared']} sass {r['sass_total']} loop {r['loop']} {r['loop_range']}\n")
            f.write(f"  mma {r['hgmma_shapes']} layout {r.get('mma_layout')}\n")
            f.write(f"  ldgsts {r['ldgsts_widths']}  loop LDG {r['ldg_widths_loop']}\n")
            f.write(f"  all   {r['all']}\n  loop  {r['in_loop']}\n")
            if "smem_buffers" in r:
                f.write(f"  smem  {r['smem_buffers']}\n  sched {' | '.join(r['loop_schedule'])}\n")
            if "mask_unpack_in_loop" in r:
                f.write(f"  mask: unpack lines in loop {r['mask_unpack_in_loop']}, apply line "
                        f"{r['mask_apply_in_loop']}, unpack hoisted out of loop "
                        f"{r['mask_unpack_hoisted']}; blocks {r['mask_blocks']}\n")
            f.write(f"  loop by line {r['loop_by_line'][:14]}\n")
    print(open(HERE / "summary.txt").read())


if __name__ == "__main__":
    main()
