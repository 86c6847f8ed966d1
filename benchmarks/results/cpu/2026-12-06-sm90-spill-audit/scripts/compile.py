"""Compile captured Triton launches (configs.pkl, from routes.py) for sm_90 with Triton 3.6,
exactly as the launch would (its signature, specialization attrs, constexprs and options:
num_warps, num_stages), then ptxas -v -arch=sm_90a on the PTX (as sm90_compile_stats.py) and
cuobjdump -sass. Appends one JSON line a config to results.jsonl; skips keys already there.

    PYTHONPATH=/tmp/t36/lib/python3.11/site-packages:.venv/lib/python3.11/site-packages:src \
        /tmp/t36/bin/python scratch/spill61/compile.py KEYFILE [-j 2]
KEYFILE: a JSON list of config keys.
"""

import argparse
import importlib
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "src"))


def ptxas_path():
    from triton.backends.nvidia.compiler import get_ptxas

    found = get_ptxas(90) if "arch" in get_ptxas.__code__.co_varnames else get_ptxas()
    return getattr(found, "path", found)


def longest_loop(lines):
    best = (0, None, None)
    for line in lines:
        br = re.search(r"/\*([0-9a-f]+)\*/.*\bBRA\b.*?0x([0-9a-f]+)", line)
        if br:
            here, target = int(br.group(1), 16), int(br.group(2), 16)
            if target < here and (here - target) // 16 + 1 > best[0]:
                best = ((here - target) // 16 + 1, target, here)
    return best


def compile_one(cfg):
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    t0 = time.time()
    module = importlib.import_module(cfg["module"])
    fn = getattr(module, cfg["name"])
    constexprs = {}
    for k, v in cfg["constexprs"].items():
        if isinstance(v, str) and v.startswith("tl."):
            v = getattr(tl, {"fp32": "float32", "fp64": "float64"}.get(v[3:], v[3:]))
        constexprs[k] = v
    options = dict(cfg["options"])
    src = ASTSource(fn, cfg["signature"], constexprs, cfg["attrs"])
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    folder = tempfile.mkdtemp()
    Path(folder, "k.ptx").write_text(compiled.asm["ptx"])
    run = subprocess.run(
        [ptxas_path(), "-v", "-arch=sm_90a", f"{folder}/k.ptx", "-o", f"{folder}/k.cubin"],
        capture_output=True,
        text=True,
    )
    err = run.stderr
    regs = [int(x) for x in re.findall(r"Used (\d+) registers", err)]
    st = sum(int(b) for b in re.findall(r"(\d+) bytes spill stores", err))
    ld = sum(int(b) for b in re.findall(r"(\d+) bytes spill loads", err))
    stack = [int(b) for b in re.findall(r"(\d+) bytes stack frame", err)]
    cuobjdump = os.path.join(os.path.dirname(ptxas_path()), "cuobjdump")
    sass = subprocess.run(
        [cuobjdump, "-sass", f"{folder}/k.cubin"], capture_output=True, text=True
    ).stdout
    lines = [line for line in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4,}\*/", line)]
    loop, lo, hi = longest_loop(lines)
    in_loop = [
        line
        for line in lines
        if lo is not None and lo <= int(re.match(r"\s+/\*([0-9a-f]+)\*/", line).group(1), 16) <= hi
    ]
    res = dict(
        key=cfg["key"],
        registers=max(regs) if regs else None,
        spill_st=st,
        spill_ld=ld,
        stack=max(stack) if stack else None,
        instructions=len(lines),
        loop=loop,
        stl=sum("STL" in x for x in lines),
        ldl=sum("LDL" in x for x in lines),
        loop_stl=sum("STL" in x for x in in_loop),
        loop_ldl=sum("LDL" in x for x in in_loop),
        shared=compiled.metadata.shared,
        seconds=round(time.time() - t0, 1),
    )
    return res


def safe(cfg):
    try:
        return compile_one(cfg)
    except Exception as e:  # noqa: BLE001
        return dict(key=cfg["key"], error=f"{type(e).__name__}: {str(e)[:1500]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("keyfile")
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--out", default=str(HERE / "results.jsonl"))
    a = ap.parse_args()
    configs = pickle.load(open(HERE / "configs.pkl", "rb"))
    keys = json.load(open(a.keyfile))
    done = set()
    if os.path.exists(a.out):
        done = {json.loads(x)["key"] for x in open(a.out) if x.strip()}
    todo = [configs[k] for k in keys if k not in done]
    print(len(todo), "to compile", flush=True)
    with open(a.out, "a") as out, ProcessPoolExecutor(a.j) as pool:
        futures = [pool.submit(safe, c) for c in todo]
        for i, f in enumerate(as_completed(futures)):
            r = f.result()
            out.write(json.dumps(r) + "\n")
            out.flush()
            print(i, r.get("key"), r.get("registers"), r.get("spill_st"), r.get("seconds"),
                  r.get("error", "")[:200], flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
