"""Compile _nm_decode_kernel for sm_90 (Triton 3.6) with the launches linear uses (route_probe.
decode_launch) and variants; print sm90_compile_stats.stats plus loop-body counts from the SASS.
Run as benchmarks/sweeps/sm90_compile_stats.py is run (its PYTHONPATH); DUMP=folder as there."""
import os, re, sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks" / "sweeps"), str(ROOT / "src"), str(Path(__file__).parent)]
import triton  # noqa
from triton.backends.compiler import GPUTarget  # noqa
from triton.compiler import ASTSource  # noqa
import sm90_compile_stats as s90  # noqa
from sparsekernels.kernels.spmm_nm_decode import _nm_decode_kernel  # noqa
from route_probe import decode_launch  # noqa

OUT_DIR = Path(__file__).parent / "dump"


def loop_body(sass_lines):
    best = (0, 0, 0)
    for i, line in enumerate(sass_lines):
        br = re.search(r"/\*([0-9a-f]+)\*/.*\bBRA\b.*?0x([0-9a-f]+)", line)
        if br:
            here, target = int(br.group(1), 16), int(br.group(2), 16)
            if target < here and here - target > best[1] - best[0]:
                best = (target, here, 0)
    body = [l for l in sass_lines
            if best[0] <= int(re.match(r"\s+/\*([0-9a-f]+)\*/", l).group(1), 16) <= best[1]]
    return body


def classify(body):
    c = Counter()
    for l in body:
        op = re.search(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)", l)
        if not op:
            continue
        full = op.group(1)
        base = full.split(".")[0]
        if base in ("LDG", "STG", "LDS", "STS", "LDL", "STL"):
            c[full] += 1
        c["op:" + base] += 1
    return c


def compile_case(name, const, warps, out_ptr="*bf16", ones=("stride_bn", "stride_om"), maxnreg=None):
    k = _nm_decode_kernel
    const = dict(const)
    for a in ones:
        const[a] = 1
    ptrs = ["*bf16", "*i32", "*bf16", "*bf16", out_ptr]
    sig = {a: "constexpr" if a in const else (ptrs.pop(0) if ptrs else "i32") for a in k.arg_names}
    names = list(k.arg_names)
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in names if sig[a] != "constexpr"}
    src = ASTSource(fn=k, signature=sig, constexprs=const, attrs=attrs)
    opts = {"num_warps": warps}
    if maxnreg:
        opts["maxnreg"] = maxnreg
    comp = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
    OUT_DIR.mkdir(exist_ok=True)
    dump = OUT_DIR / re.sub(r"\W+", "_", name)
    dump.with_suffix(".ttgir").write_text(comp.asm["ttgir"])
    line = s90.stats(comp.asm["ptx"], dump)
    sass = dump.with_suffix(".sass").read_text()
    lines = [l for l in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4,}\*/", l)]
    body = loop_body(lines)
    c = classify(body)
    return line, body, c, comp.metadata.shared


def slots_per_iter(const):
    return const["BLOCK_W"] * (32 // const["BITS"]) * const["BLOCK"]


def report(name, launch_const, warps, steps_per_row=None, **kw):
    line, body, c, shared = compile_case(name, launch_const, warps, **kw)
    spi = slots_per_iter(launch_const)
    bm = launch_const["BLOCK_M"]
    loads = {k: v for k, v in c.items() if not k.startswith("op:")}
    n = len(body)
    regs = int(re.search(r"registers (\d+)", line).group(1))
    ops = {k[3:]: v for k, v in c.items() if k.startswith("op:")}
    top = sorted(ops.items(), key=lambda kv: -kv[1])[:12]
    print(f"== {name}: warps {warps} BLOCK_M {bm} slots/iter {spi} BLOCK_N {launch_const['BLOCK_N']}")
    print(f"   {line} shared {shared}")
    print(f"   loop {n} instr/warp/iter; x warps {warps} = {n*warps} warp-instr/iter; "
          f"per slot (tile rows) {n*warps/spi:.2f}; per (row,slot) {n*warps/spi/bm:.3f}")
    print(f"   loop mem ops {dict(sorted(loads.items()))}")
    print(f"   loop ops {top}")
    return dict(name=name, n=n, warps=warps, spi=spi, bm=bm, regs=regs, line=line, loads=loads)


if __name__ == "__main__":
    R, K = 4096, 4096
    cases = []
    for (n, m, v, t) in [(4, 8, 8, 2), (4, 8, 8, 8), (2, 8, 8, 2), (1, 8, 8, 2), (4, 8, 8, 1)]:
        d = decode_launch(R, K, t, n, m, v)
        cases.append((f"{n}:{m} v={v} t={t} route", d["const"], d["warps"]))
    want = sys.argv[1:]
    for name, const, warps in cases:
        if want and not any(w in name for w in want):
            continue
        report(name, const, warps)
