"""Loop instructions by source line (with the line's text) for one variant: byline.py VARIANT"""
import json, sys
from pathlib import Path
recs = {r["variant"]: r for r in json.load(open("/tmp/attn_audit/summary.json"))}
SRC = Path("/work/main/src/sparsekernels/kernels")
for v in sys.argv[1:]:
    r = recs[v]
    print(f"== {v}: loop {r['loop']}")
    for where, n in r["loop_by_line"]:
        f, ln = where.rsplit(":", 1)
        p = SRC / f
        text = p.read_text().splitlines()[int(ln) - 1].strip() if p.exists() and int(ln) else f
        print(f"  {n:4d}  {where:34s} {text[:90]}")
