"""The report's tables from summary.json (analyze.py) and the layout's trip counts:
per variant registers, spills, shared, CTAs/SM, MMA, loads, buffers, loop and mask counts, and
a static estimate of issued warp-instructions per pass:
    sum over programs of warps x (pre + post + trips x loop - full tiles x mask block)
(pre / post: SASS instructions before / after the loop, each counted once; not a timing).

    PYTHONPATH=/work/main/src /work/main/.venv/bin/python table.py > table.md
"""

import json
import math

import sparsekernels as sk
from sparsekernels.formats import _block_layout
from sparsekernels.kernels.attention_tuning import BLOCK_ATTENTION_SPLIT_FILL

recs = json.load(open("/tmp/attn_audit/summary.json"))
L, BH = 8192, 8
pattern = sk.nn.SparseAttention.local_strided(L, window=128, stride=128).pattern
rows, cols = pattern.pattern.row_indices().long(), pattern.column_indices.long()
layouts = {}


def trips(bm, bn, comp, by_key):
    if (bm, bn) not in layouts:
        layouts[bm, bn] = _block_layout.build(rows, cols, (L, L), bm, bn, BLOCK_ATTENTION_SPLIT_FILL)
    c = layouts[bm, bn].components[comp]
    off, masks = (c.t_offsets, c.t_masks) if by_key else (c.offsets, c.masks)
    out = []
    for j in range(off.numel() - 1):
        m = masks[off[j]:off[j + 1]]
        out.append((m.numel(), int((m < 0).sum())))
    return out


def ctas_per_sm(regs, warps, shared):
    warp_regs = math.ceil(regs * 32 / 256) * 256
    by_regs = (65536 // warp_regs) // warps
    by_smem = 233472 // (shared + 1024)
    return min(by_regs, by_smem, 32, 64 // warps), by_regs, by_smem


def short(r):
    k = r["variant"].split("__")
    kern = {"fwd": "fwd", "bwd_dkdv": "dkdv", "bwd_dq": "dq", "bwd_delta": "delta"}[k[1]]
    comp = "perm" if "perm11" in k[2] else ("nat" if "perm00" in k[2] else "-")
    return k[0], kern, comp, k[3]


rows_out = []
for r in recs:
    tag, kern, comp, cfg = short(r)
    if tag == "s4" and kern == "delta":
        continue
    o = r["options"]
    c = r["constexprs"]
    regs = max(r["registers"])
    occ, by_r, by_s = ctas_per_sm(regs, o["num_warps"], r["shared"])
    mma = f"{r['in_loop'].get('HGMMA', 0)} wgmma ({'/'.join(k.split('.')[1] for k in r['hgmma_shapes'])})" if r["hgmma_shapes"] else "-"
    ld = r["ldgsts_widths"]
    ldgsts = sum(ld.values())
    bufs = [v for k, v in r.get("smem_buffers", {}).items() if v.endswith("bf16")]
    nbuf = bufs[0].split("x")[0] if bufs else ("regs->STS" if o["num_stages"] == 1 and kern != "delta" else "-")
    mask_block = r["mask_blocks"][0]["size"] if r.get("mask_blocks") else 0
    mask_unpack = r.get("mask_unpack_in_loop", 0)
    mask_ldg = sum(r["mask_blocks"][0]["ldg"].values()) if r.get("mask_blocks") else 0
    est = None
    if kern != "delta":
        comp_i = 1 if comp == "perm" else 0
        t = trips(c["BLOCK_M"], c["BLOCK_N"], comp_i, kern == "dkdv")
        per = sum(r["pre"] + r["post"] + n * r["loop"] - full * mask_block for n, full in t)
        est = per * o["num_warps"] * BH / 1e6
    rows_out.append(dict(
        tag=tag, kern=kern, comp=comp, cfg=cfg, regs=regs,
        spill=f"{r['spill_st']}/{r['spill_ld']}", smem=round(r["shared"] / 1024, 1),
        occ=f"{occ} ({by_r}r/{by_s}s)", mma=mma, ldgsts=ldgsts, nbuf=nbuf,
        loop=r["loop"], pre=r["pre"], post=r["post"], mask=f"{mask_block} ({mask_unpack}+{r.get('mask_apply_in_loop', 0)}; {mask_ldg} LDG)",
        est=None if est is None else round(est, 2),
    ))

order = {"base": 0, "fwd_s2": 1, "bwd_s1": 2, "bwd_s3": 3, "s4": 4, "m128w8": 5, "m128w4": 6, "cap96": 7, "cap104": 8, "cap120": 9, "cap128": 10, "cap168": 11}
kord = {"fwd": 0, "dkdv": 1, "dq": 2, "delta": 3}
rows_out.sort(key=lambda x: (kord[x["kern"]], x["comp"], order[x["tag"]]))
print("| kernel | comp | config | regs | spill st/ld B | smem KB | CTAs/SM (reg/smem bound) | HGMMA | LDGSTS | K/V bufs | loop | pre/post | mask block per partial tile (unpack+apply; LDG) | est. Mwarp-instr/pass |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for x in rows_out:
    print(f"| {x['kern']} | {x['comp']} | {x['tag']} {x['cfg']} | {x['regs']} | {x['spill']} | {x['smem']} | {x['occ']} | "
          f"{x['mma']} | {x['ldgsts']} | {x['nbuf']} | {x['loop']} | {x['pre']}/{x['post']} | {x['mask']} | {x['est']} |")


def brief():
    """The report's condensed table: baseline and the brief's alternatives only."""
    keep = {"base", "fwd_s2", "bwd_s1", "bwd_s3", "m128w8"}
    print("\n| kernel / pass | config | regs | spill | smem KB | CTAs/SM | wgmma / tile | K/V copy | loop | pre/post | mask / partial tile | est. M warp-instr |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for x in rows_out:
        if x["tag"] not in keep or (x["tag"] == "fwd_s2" and x["kern"] != "fwd") or (
                x["tag"] in ("bwd_s1", "bwd_s3") and x["kern"] == "fwd"):
            continue
        copy = "-" if x["kern"] == "delta" else (f"LDG+STS" if x["nbuf"] == "regs->STS" else f"cp.async x{x['nbuf']}")
        wg = x["mma"].split(" ")[0] if x["mma"] != "-" else "-"
        occ = x["occ"].split(" ")[0]
        print(f"| {x['kern']} {x['comp']} | {x['tag']} {x['cfg']} | {x['regs']} | {x['spill']} | {x['smem']} | {occ} | "
              f"{wg} | {copy} | {x['loop']} | {x['pre']}/{x['post']} | {x['mask'].split(' (')[0] if x['kern'] != 'delta' else '-'}"
              f"{' (' + x['mask'].split('; ')[1] if x['kern'] != 'delta' else ''} | {x['est'] if x['est'] is not None else '-'} |")


brief()
