"""Compile the B-reading cases of tests/test_compile_hopper.py for sm_90 under three alignment
variants (aligned, N unaligned, N + B's row stride unaligned) and tabulate the global loads
(LDG / LDGSTS by width), SASS instructions and longest loop.

    cd /work/main && /tmp/t36/bin/python scratch/unaligned_audit/audit.py [group-filter]

Raw outputs: scratch/unaligned_audit/raw/<group>/<variant>/ (stats.txt, *.sass, *.ttgir);
summary: scratch/unaligned_audit/summary.tsv.
"""
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path("/work/main")
HERE = ROOT / "scratch/unaligned_audit"
PY = "/tmp/t36/bin/python"
PYTHONPATH = ("/tmp/t36/lib/python3.11/site-packages:.venv/lib/python3.11/site-packages:"
              "src:tests")

# group: (case filter, ONES, B's row-stride arg or None, extra {variant: UNALIGNED})
GROUPS = {
    "expand": ("one-hot", "stride_bn", "stride_bk", {"N+stride+B_COLS (pre-fix)": "N,stride_bk,B_COLS"}),
    "decode": ("decode", "stride_bn", "stride_bk", {}),
    "sum_partials": ("sum partials", "stride_on", None, {"N+SPLIT_STRIDE": "N,SPLIT_STRIDE"}),
    "sddmm_tiles": ("sddmm tiles", "stride_xk,stride_yk", "stride_yn", {}),
    "csr_spmm": ("csr spmm", "stride_bn", "stride_bk", {}),
    "csr_few": ("csr few padded", "stride_bn", "stride_bk", {}),
    "csr_few_lines": ("csr few lines", "stride_bn", "stride_bk", {}),
    "unpack_rows": ("nm unpack", "stride_bn", "stride_bk", {}),
    "unpack_inplace": ("nm unpack", "stride_bk", "stride_bn", {}),
    "wgmma_kcontig": ("nm wgmma 2:8,nm wgmma 1:8", "stride_bk", "stride_bn", {}),
    "wgmma_rows": ("nm wgmma 2:4", "stride_bn", "stride_bk", {}),
    "mma_sp": ("nm mma.sp", "", "stride_b", {}),
    "scatter_rows": ("csr scatter", "stride_bn", "stride_bk", {}),
    "scatter_inplace": ("csr scatter", "stride_bk", "stride_bn", {}),
    "vector_wise_rows": ("nm vector-wise 16 x 32 B rows", "", "stride_bk", {}),
    "vector_wise_inplace": ("nm vector-wise 16 x 32 B in place", "", "stride_bn", {}),
}


def variants(row, extra):
    out = {"aligned": "", "N": "N"}
    if row:
        out["N+stride"] = f"N,{row}"
    out.update(extra)
    return out


def sass_stats(text: str) -> dict:
    lines = [l for l in text.splitlines() if re.match(r"\s+/\*[0-9a-f]{4,}\*/", l)]
    loads = Counter(re.findall(r"\b(LDGSTS[.\w]*|LDG\.E[.\w]*)", text))
    longest = 0
    for l in lines:
        m = re.search(r"/\*([0-9a-f]+)\*/.*\bBRA\b.*?0x([0-9a-f]+)", l)
        if m:
            here, target = int(m.group(1), 16), int(m.group(2), 16)
            if target < here:
                longest = max(longest, (here - target) // 16 + 1)
    return {"instructions": len(lines), "loop": longest, "loads": dict(sorted(loads.items()))}


def run(group, filt, ones, variant, unaligned):
    folder = HERE / "raw" / group / re.sub(r"\W+", "_", variant)
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TRITON_INTERPRET="", ALIGNED="1", ONES=ones, UNALIGNED=unaligned,
               DUMP=str(folder), PYTHONPATH=PYTHONPATH)
    cmd = [PY, "benchmarks/sweeps/sm90_compile_stats.py", *filt.split(",")]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    (folder / "stats.txt").write_text(
        f"# ONES={ones} UNALIGNED={unaligned}\n" + done.stdout + done.stderr[-3000:])
    return parse(group, folder, ones, variant, unaligned, done.stdout)


def parse(group, folder, ones, variant, unaligned, stdout):
    rows = []
    for line in stdout.splitlines():
        if " registers " not in line:
            continue
        name = line.split(" registers ")[0].strip()
        sass = folder / (re.sub(r"\W+", "_", name) + ".sass")
        s = sass_stats(sass.read_text()) if sass.exists() else {}
        regs = re.search(r"registers (\S+) spill (\d+)", line)
        rows.append((group, name, variant, ones, unaligned, regs.group(1) if regs else "?",
                     regs.group(2) if regs else "?", s.get("instructions"), s.get("loop"),
                     s.get("loads")))
    return rows


def main():
    wanted = sys.argv[1:]
    if wanted == ["--reparse"]:  # rebuild summary.tsv from raw/ without compiling
        out = ["group\tcase\tvariant\tONES\tUNALIGNED\tregs\tspill\tinstr\tloop\tloads"]
        for group, (filt, ones, row, extra) in GROUPS.items():
            for variant, unaligned in variants(row, extra).items():
                folder = HERE / "raw" / group / re.sub(r"\W+", "_", variant)
                text = (folder / "stats.txt").read_text()
                for r in parse(group, folder, ones, variant, unaligned, text):
                    out.append("\t".join(str(x) for x in r))
        (HERE / "summary.tsv").write_text("\n".join(out) + "\n")
        return
    summary = HERE / "summary.tsv"
    out = [] if wanted else ["group\tcase\tvariant\tONES\tUNALIGNED\tregs\tspill\tinstr\tloop\tloads"]
    for group, (filt, ones, row, extra) in GROUPS.items():
        if wanted and group not in wanted:
            continue
        for variant, unaligned in variants(row, extra).items():
            for r in run(group, filt, ones, variant, unaligned):
                line = "\t".join(str(x) for x in r)
                print(line, flush=True)
                out.append(line)
    with summary.open("a" if wanted else "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
