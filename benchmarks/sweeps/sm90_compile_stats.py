"""Registers and instruction counts of kernels compiled for sm_90 on a CPU machine, before
spending device time: tests/test_compile_hopper.py's cases (name filters as arguments, all
by default) through triton.compile for GPUTarget("cuda", 90, 32), then the wheel's ptxas -v
and cuobjdump -sass. Prints a line a case: registers, spill stores, SASS instructions, shared
stores (of them 16-byte), MMA instructions, global stores and loads by width. ALIGNED=1 marks
every pointer and integer argument divisible by 16, as Triton specializes them at a launch
where they are (so the vector widths, and the spills, are the device's for shapes of
multiples of 16: without it the unpack kernel's 4:8 step showed 344 B of spill that its
launches do not have). DUMP=folder writes each case's TTGIR and SASS there (<name>.ttgir,
<name>.sass). ONES=arg,... compiles those integer arguments as 1 (a launch specializes unit
strides); MAXNREG=N caps the registers; STAGES=N sets num_stages; UNALIGNED=arg,... leaves
those out of ALIGNED's marks
(a launch at 24 tokens: N and B's row stride divisible by 8, not 16).
    TRITON_INTERPRET= .venv/bin/python benchmarks/sweeps/sm90_compile_stats.py "mma.sp"
"""

import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "src")]

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.backends.nvidia.compiler import get_ptxas  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource, GluonJITFunction  # noqa: E402

import test_compile_hopper  # noqa: E402


def ptxas_path() -> str:
    found = get_ptxas(90) if "arch" in get_ptxas.__code__.co_varnames else get_ptxas()
    return getattr(found, "path", found)


def stats(ptx: str, dump: Path | None = None) -> str:
    folder = tempfile.mkdtemp()
    ptxas = ptxas_path()
    Path(folder, "k.ptx").write_text(ptx)
    run = subprocess.run(
        [ptxas, "-v", "-arch=sm_90a", f"{folder}/k.ptx", "-o", f"{folder}/k.cubin"],
        capture_output=True,
        text=True,
    )
    registers = ",".join(re.findall(r"Used (\d+) registers", run.stderr))
    spilled = sum(int(b) for b in re.findall(r"(\d+) bytes spill stores", run.stderr))
    cuobjdump = os.path.join(os.path.dirname(ptxas), "cuobjdump")
    sass = subprocess.run(
        [cuobjdump, "-sass", f"{folder}/k.cubin"], capture_output=True, text=True
    ).stdout
    if dump is not None:
        dump.with_suffix(".sass").write_text(sass)
    lines = [line for line in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4,}\*/", line)]
    stores = [line for line in lines if "STS" in line]
    wide = sum("STS.128" in line for line in stores)
    mma = sum(("HMMA" in line) or ("HGMMA" in line) for line in lines)
    global_ops = Counter(re.findall(r"\b((?:STG|LDG)\.E[.\w]*)", sass))
    return (
        f"registers {registers} spill {spilled} B instructions {len(lines)} "
        f"(longest loop {longest_loop(lines)}) "
        f"STS {len(stores)} ({wide} x 16 B) MMA {mma} {dict(sorted(global_ops.items()))}"
    )


def longest_loop(lines: list[str]) -> int:
    """Instructions of the longest backward branch's body: the main loop, usually."""
    longest = 0
    for line in lines:
        branch = re.search(r"/\*([0-9a-f]+)\*/.*\bBRA\b.*?0x([0-9a-f]+)", line)
        if branch:
            here, target = int(branch.group(1), 16), int(branch.group(2), 16)
            if target < here:
                longest = max(longest, (here - target) // 16 + 1)
    return longest


def _maxnreg() -> dict:
    """MAXNREG=N caps the registers a thread, as a launch's maxnreg does."""
    return {"maxnreg": int(os.environ["MAXNREG"])} if os.environ.get("MAXNREG") else {}


def _stages() -> dict:
    """STAGES=N pipelines loops N deep, as a launch's num_stages does (Triton's default 3)."""
    return {"num_stages": int(os.environ["STAGES"])} if os.environ.get("STAGES") else {}


def main():
    wanted = sys.argv[1:]
    for name, (kernel, pointers, constants, warps) in test_compile_hopper._cases().items():
        if wanted and not any(w in name for w in wanted):
            continue
        pointers = list(pointers)
        ones = os.environ.get("ONES", "").split(",")
        constants = {**constants, **{arg: 1 for arg in ones if arg in kernel.arg_names}}
        signature = {
            arg: "constexpr" if arg in constants else (pointers.pop(0) if pointers else "i32")
            for arg in kernel.arg_names
        }
        names = list(kernel.arg_names)
        unaligned = os.environ.get("UNALIGNED", "").split(",")
        aligned = [n for n in names if signature[n] != "constexpr" and n not in unaligned]
        attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in aligned}
        source_type = GluonASTSource if isinstance(kernel, GluonJITFunction) else ASTSource
        source = source_type(
            fn=kernel,
            signature=signature,
            constexprs=constants,
            attrs=attrs if os.environ.get("ALIGNED") == "1" else None,
        )
        compiled = triton.compile(
            source,
            target=GPUTarget("cuda", 90, 32),
            options={"num_warps": warps, **_maxnreg(), **_stages()},
        )
        dump = None
        if os.environ.get("DUMP"):
            dump = Path(os.environ["DUMP"], re.sub(r"\W+", "_", name))
            dump.parent.mkdir(parents=True, exist_ok=True)
            dump.with_suffix(".ttgir").write_text(compiled.asm["ttgir"])
        shared = compiled.metadata.shared
        print(f"{name:48s} {stats(compiled.asm['ptx'], dump)} shared {shared}", flush=True)


if __name__ == "__main__":
    main()
