"""Compile the captured launches (launches.pkl from capture.py) for sm_90 with Triton 3.6 exactly
as launched (signature, constexprs, specialization attrs, num_warps, num_stages), then:
- ptxas -v (the wheel's, same flags as Triton's make_cubin: -lineinfo -v --gpu-name=sm_90a) on
  the PTX: registers, spill stores / loads;
- the cubin Triton built: cuobjdump -sass (full dump) and nvdisasm -gi (SASS with source lines,
  inlined-at included) for the per-line attribution of the loop (e.g. `_tile_mask`).
Writes <DUMP>/<tag>__<kernel>__<variant>.{ttgir,ptx,sass,lsass,ptxas} and one JSON a launch
to compiled.jsonl. analyze.py reads them.

    PYTHONPATH=/tmp/t36:/work/main/.venv/lib/python3.11/site-packages:/work/main/src \
        /work/main/.venv/bin/python compile.py [-j 4] [tag ...]
"""

import argparse
import importlib
import json
import os
import pickle
import re
import subprocess
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)
HERE = Path(os.environ.get("OUT", "/tmp/attn_audit"))
DUMP = HERE / "dumps"


def variant_name(la):
    c = {la["signature_names"][k[0]]: v for k, v in la["constexprs"].items()}
    name = la["name"].replace("_attn_", "").replace("_kernel", "")
    if "MERGE" in c:
        v = f"perm{int(c['ROW_PERM'])}{int(c['COL_PERM'])}_merge{int(c['MERGE'])}_final{int(c['STORE_FINAL'])}"
    elif "ACCUMULATE" in c:
        v = f"perm{int(c['ROW_PERM'])}{int(c['COL_PERM'])}_acc{int(c['ACCUMULATE'])}"
    else:
        v = "delta"
    bm = c.get("BLOCK_M")
    bn = c.get("BLOCK_N", "")
    o = la["options"]
    return f"{la['tag']}__{name}__{v}__m{bm}n{bn}w{o['num_warps']}s{o['num_stages']}"


def compile_one(la):
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler import ASTSource

    t0 = time.time()
    fn = getattr(importlib.import_module(la["module"]), la["name"])
    constexprs = {}
    for k, v in la["constexprs"].items():
        if isinstance(v, str) and v.startswith("tl."):
            v = getattr(tl, v[3:])
        constexprs[k] = v
    src = ASTSource(fn, la["signature"], constexprs, la["attrs"])
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(la["options"]))
    stem = DUMP / la["variant"]
    stem.parent.mkdir(parents=True, exist_ok=True)
    for ext in ("ttir", "ttgir", "ptx"):
        Path(f"{stem}.{ext}").write_text(compiled.asm[ext])
    cubin = Path(f"{stem}.cubin")
    cubin.write_bytes(compiled.asm["cubin"])
    ptxas = get_ptxas(90).path
    bindir = os.path.dirname(ptxas)
    folder = tempfile.mkdtemp()
    Path(folder, "k.ptx").write_text(compiled.asm["ptx"])
    cmd = [ptxas, "-lineinfo", "-v", "--gpu-name=sm_90a", f"{folder}/k.ptx", "-o", f"{folder}/k.o"]
    err = subprocess.run(cmd, capture_output=True, text=True).stderr
    Path(f"{stem}.ptxas").write_text(" ".join(cmd) + "\n" + err)
    sass = subprocess.run(
        [f"{bindir}/cuobjdump", "-sass", str(cubin)], capture_output=True, text=True
    ).stdout
    Path(f"{stem}.sass").write_text(sass)
    lsass = subprocess.run(
        [f"{bindir}/nvdisasm", "-gi", "-c", str(cubin)], capture_output=True, text=True
    )
    Path(f"{stem}.lsass").write_text(lsass.stdout + lsass.stderr)
    return dict(
        variant=la["variant"],
        tag=la["tag"],
        name=la["name"],
        options=la["options"],
        grid=la["grid"],
        constexprs={la["signature_names"][k[0]]: v for k, v in la["constexprs"].items()},
        registers=[int(x) for x in re.findall(r"Used (\d+) registers", err)],
        spill_st=sum(int(b) for b in re.findall(r"(\d+) bytes spill stores", err)),
        spill_ld=sum(int(b) for b in re.findall(r"(\d+) bytes spill loads", err)),
        stack=[int(b) for b in re.findall(r"(\d+) bytes stack frame", err)],
        shared=compiled.metadata.shared,
        n_regs_meta=getattr(compiled, "n_regs", None),
        seconds=round(time.time() - t0, 1),
    )


def safe(la):
    try:
        return compile_one(la)
    except Exception as e:  # noqa: BLE001
        return dict(variant=la["variant"], error=f"{type(e).__name__}: {str(e)[:3000]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tags", nargs="*")
    ap.add_argument("-j", type=int, default=4)
    a = ap.parse_args()
    launches = pickle.load(open(HERE / "launches.pkl", "rb"))
    seen, todo = set(), []
    for la in launches:
        if a.tags and la["tag"] not in a.tags:
            continue
        la["signature_names"] = list(la["signature"])
        la["variant"] = variant_name(la)
        key = (la["name"], repr(la["signature"]), repr(la["constexprs"]), repr(la["attrs"]),
               repr(la["options"]))  # fmt: skip
        if key in seen:  # the same compile under another config tag (delta kernel, ...)
            continue
        seen.add(key)
        todo.append(la)
    done = set()
    if (HERE / "compiled.jsonl").exists():
        done = {json.loads(x)["variant"] for x in open(HERE / "compiled.jsonl") if x.strip()}
    todo = [la for la in todo if la["variant"] not in done]
    print(len(todo), "to compile", flush=True)
    out = open(HERE / "compiled.jsonl", "a")
    with ProcessPoolExecutor(a.j) as pool:
        for f in as_completed([pool.submit(safe, la) for la in todo]):
            r = f.result()
            out.write(json.dumps(r) + "\n")
            out.flush()
            print(r["variant"], r.get("registers"), r.get("spill_st"), r.get("shared"),
                  r.get("seconds"), r.get("error", "")[:500], flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
