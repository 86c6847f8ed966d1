"""Join routes.jsonl (cases -> launch keys), configs.pkl (launches) and results.jsonl (compiles)
into tables: table_all.md (every distinct constexpr set, VECTOR folded), table_families.md
(tile families), spilling.md (spilling sets with the cases reaching them), and data.json."""

import collections
import json
import pickle
from pathlib import Path

H = Path(__file__).resolve().parent
configs = pickle.load(open(H / "configs.pkl", "rb"))
plan = json.load(open(H / "plan.json"))
import os
ROUTES = os.environ.get("ROUTES", "routes.jsonl")
SUFFIX = os.environ.get("SUFFIX", "")
cases = [json.loads(x) for x in open(H / ROUTES)]
res = {}
for line in open(H / "results.jsonl"):
    r = json.loads(line)
    if "error" not in r:
        res[r["key"]] = r

SHAPE = {(4096, 4096): "A", (14336, 4096): "T", (4096, 14336): "L"}
SHORT = {"_nm_decode_kernel": "decode", "_nm_unpack_kernel": "unpack",
         "_nm_expand_dot_kernel": "expand", "_spmm_nm_dot_kernel": "spmm_nm dot",
         "_spmm_nm_gather_kernel": "spmm_nm gather", "_nm_select_kernel": "select",
         "_sum_partials_kernel": "split-K sum"}  # fmt: skip
PATTERN = {"N_KEEP", "M_GROUP", "BITS", "VECTOR", "BLOCK", "LOG_N", "LOG_M"}
QUIET = {"ACTIVATION", "HAS_BIAS", "ACC_DTYPE", "B_INDEX", "GATHER_EVICTION", "STREAM_CACHE",
         "WIDE", "KEEP_SUMS", "UPCAST", "ASM"}  # fmt: skip


def dtype_of(c):
    sig = c["signature"]
    for name in ("values", "b", "x"):
        if name in sig and sig[name].startswith("*") and sig[name] != "*i32":
            return sig[name][1:]
    return sig[list(sig)[0]][1:]


def cset(key):
    c = configs[key]
    nm = dict(c["named"])
    nm.pop("VECTOR", None)
    return json.dumps([c["name"], dtype_of(c), c["options"]["num_warps"],
                       c["options"]["num_stages"], sorted((a, repr(b)) for a, b in nm.items())])  # fmt: skip


def family(key):
    c = configs[key]
    nm = {a: b for a, b in c["named"].items() if a not in PATTERN and a not in QUIET
          and not a.startswith("stride") and a not in ("N", "M", "S", "K", "STEPS_PER_SPLIT")}  # fmt: skip
    if c["name"] == "_nm_decode_kernel":
        d = c["named"]
        nm.pop("BLOCK_W")
        nm["SLOTS"] = d["BLOCK_W"] * (32 // d["BITS"]) * d["BLOCK"]
    return (SHORT.get(c["name"], c["name"]), dtype_of(c), c["options"]["num_warps"],
            c["options"]["num_stages"], tuple(sorted((a, str(b)) for a, b in nm.items())))  # fmt: skip


def pattern_of(key):
    d = configs[key]["named"]
    return (d.get("N_KEEP"), d.get("M_GROUP"), d.get("BLOCK"))


# each launch key -> (result, how)
sets = collections.defaultdict(list)
for k in configs:
    sets[cset(k)].append(k)
fams = collections.defaultdict(list)
for k in configs:
    fams[family(k)].append(k)


def result_for(key):
    if key in res:
        return res[key], "compiled"
    same = [res[k] for k in sets[cset(key)] if k in res]
    if same:
        return max(same, key=lambda r: (r["spill_st"], r["registers"])), "same constexprs"
    c = configs[key]
    if c["name"] == "_spmm_nm_dot_kernel":  # fp16 as bf16 (checked on a sample)
        alt = cset(key).replace('"fp16"', '"bf16"')
        same = [res[k] for k in sets.get(alt, []) if k in res]
        if same:
            return max(same, key=lambda r: (r["spill_st"], r["registers"])), "bf16 twin"
    fam = [res[k] for k in fams[family(key)] if k in res]
    if fam:
        worst = max(fam, key=lambda r: (r["spill_st"], r["registers"]))
        return worst, "family (other pattern)"
    return None, "not compiled"


def compress(case_list):
    """cases -> lines 'dtype n:m bB vV | tokens | shapes'"""
    g = collections.defaultdict(lambda: [set(), set(), set()])
    for c in case_list:
        key = (c["dtype"], c["n"], c["m"], c["b"])
        g[key][0].add(c["v"])
        g[key][1].add(c["tokens"])
        g[key][2].add(SHAPE[(c["rows"], c["k"])])
    # merge dtypes with identical rest
    h = collections.defaultdict(list)
    for (dt, n, m, b), (vs, ts, ss) in g.items():
        h[(n, m, b, tuple(sorted(vs)), tuple(sorted(ts)), "".join(sorted(ss)))].append(dt)
    lines = []
    for (n, m, b, vs, ts, ss), dts in sorted(h.items()):
        lines.append(f"{'/'.join(sorted(dts))} {n}:{m} b{b} v{','.join(map(str, vs))} "
                     f"t{','.join(map(str, ts))} {ss}")  # fmt: skip
    return lines


def unit(key):
    return cset(key) + repr(sorted((str(x), repr(y)) for x, y in configs[key]["attrs"].items()))


def main():
    by_key = collections.defaultdict(list)
    for c in cases:
        for k in c.get("launches", []):
            by_key[k].append(c)
    units = collections.defaultdict(list)
    for k in configs:
        units[unit(k)].append(k)
    unit_res = {}
    for u, ks in units.items():
        comp = [res[k] for k in ks if k in res]
        if comp:
            unit_res[u] = (max(comp, key=lambda x: (x["spill_st"], x["registers"])), "compiled")
    # --- per constexpr set
    rows = []
    for s, keys in sets.items():
        us = sorted({unit(k) for k in keys})
        results, hows, spill_cases, reached = [], set(), [], []
        for u in us:
            uc = [c for k in units[u] for c in by_key[k]]
            reached += uc
            if u in unit_res:
                r, how = unit_res[u]
            else:
                comp = [unit_res[x][0] for x in us if x in unit_res]
                if comp:
                    r, how = max(comp, key=lambda x: (x["spill_st"], x["registers"])), "same constexprs"
                else:
                    r, how = result_for(units[u][0])
            if r is None:
                hows.add(how)
                continue
            results.append(r)
            hows.add(how)
            if r["spill_st"] > 0:
                spill_cases.append((r, uc, how))
        c0 = configs[keys[0]]
        rows.append(dict(set=s, keys=keys, name=SHORT.get(c0["name"], c0["name"]),
                         dtype=dtype_of(c0), warps=c0["options"]["num_warps"],
                         stages=c0["options"]["num_stages"],
                         named={a: b for a, b in c0["named"].items() if a not in QUIET},
                         results=results, hows=hows, cases=reached, spill_cases=spill_cases,
                         family=family(keys[0])))  # fmt: skip
    def rng(vals):
        vals = [v for v in vals if v is not None]
        if not vals:
            return "?"
        return f"{min(vals)}" if min(vals) == max(vals) else f"{min(vals)}-{max(vals)}"
    rows.sort(key=lambda x: (-max([r["spill_st"] for r in x["results"]] or [0]), -len(x["cases"])))
    out = ["# Every distinct reached Triton launch configuration (constexpr set, VECTOR folded)", "",
           "regs / spill: the range over the set's integer specializations (which pointers and "
           "integer arguments a launch sees divisible by 16 or equal to 1, as Triton specializes "
           "them; e.g. tokens 17 vs 32). how: compiled = every specialization of the set compiled; "
           "same constexprs = some specializations read from a compiled one of the set; bf16 twin "
           "= the fp16 dot tile read from its bf16 twin; family (other pattern) = set not "
           "compiled, the worst compiled member of its tile family shown.", "",
           "| kernel | dtype | warps | stages | constexprs | regs | spill st B | how | cases | "
           "reached by (dtype n:m bB vV tTokens shapes: A=4096^2 T=14336x4096 L=4096x14336) | "
           "spilling at |", "|---" * 11 + "|"]  # fmt: skip
    for x in rows:
        named = ", ".join(f"{a}={b}" for a, b in x["named"].items()
                          if a not in ("VECTOR",) and not a.startswith("stride")
                          and a not in ("N", "STEPS_PER_SPLIT"))  # fmt: skip
        spill_at = "; ".join(compress([c for _, uc, _ in x["spill_cases"] for c in uc]))
        out.append(f"| {x['name']} | {x['dtype']} | {x['warps']} | {x['stages']} | {named} | "
                   f"{rng([r['registers'] for r in x['results']])} | "
                   f"{rng([r['spill_st'] for r in x['results']])} | {', '.join(sorted(x['hows']))} | "
                   f"{len(x['cases'])} | {'; '.join(compress(x['cases']))} | {spill_at} |")  # fmt: skip
    (H / f"table_all{SUFFIX}.md").write_text("\n".join(out) + "\n")
    # --- per family
    famrows = collections.defaultdict(list)
    for x in rows:
        famrows[x["family"]].append(x)
    fout = ["| kernel | dtype | warps | stages | tile constexprs | sets | regs | spill st B | "
            "cases | reached by (dtype n:m bB vV tTokens shapes) | spilling at |",
            "|---" * 11 + "|"]  # fmt: skip
    fsum = []
    for f, xs in famrows.items():
        allr = [r for x in xs for r in x["results"]]
        n_cases = sum(len(x["cases"]) for x in xs)
        fsum.append((f, xs, allr, n_cases))
    fsum.sort(key=lambda t: (t[0][0], t[0][1], t[0][2], t[0][4]))
    for f, xs, allr, n_cases in fsum:
        tile = ", ".join(f"{a}={b}" for a, b in f[4])
        reached = [c for x in xs for c in x["cases"]]
        spill_at = "; ".join(compress([c for x in xs for _, uc, _ in x["spill_cases"] for c in uc]))
        hows = sorted({h for x in xs for h in x["hows"]})
        nc = sum(1 for x in xs if x["hows"] <= {"compiled", "same constexprs"})
        fout.append(f"| {f[0]} | {f[1]} | {f[2]} | {f[3]} | {tile} | {len(xs)} ({nc} compiled) | "
                    f"{rng([r['registers'] for r in allr])} | {rng([r['spill_st'] for r in allr])} | "
                    f"{n_cases} | {'; '.join(compress(reached))} | {spill_at} |")  # fmt: skip
    (H / f"table_families{SUFFIX}.md").write_text("\n".join(fout) + "\n")
    # --- spilling units, merged by (set, result)
    sout = []
    sp = []
    for x in rows:
        merged = collections.defaultdict(list)
        for r, uc, how in x["spill_cases"]:
            merged[(r["registers"], r["spill_st"], r["spill_ld"], r["loop_stl"], r["loop_ldl"], how)] += uc
        for (regs, st, ld, lst, lld, how), uc in merged.items():
            sp.append((x, regs, st, ld, lst, lld, how, uc))
    sp.sort(key=lambda t: (-len(t[7]), -t[2]))
    for x, regs, st, ld, lst, lld, how, uc in sp:
        named = ", ".join(f"{a}={b}" for a, b in x["named"].items()
                          if not a.startswith("stride") and a not in ("N", "STEPS_PER_SPLIT", "VECTOR"))  # fmt: skip
        sout.append(f"- **{x['name']} {x['dtype']} w{x['warps']} s{x['stages']}**: {named}: "
                    f"{regs} regs, spill {st}/{ld} B (main loop STL/LDL {lst}/{lld}), {how}, "
                    f"{len(uc)} cases: {'; '.join(compress(uc))}")  # fmt: skip
    (H / f"spilling{SUFFIX}.md").write_text("\n".join(sout) + "\n")
    json.dump([dict(kernel=x["name"], dtype=x["dtype"], warps=x["warps"], stages=x["stages"],
                    constexprs={a: str(b) for a, b in x["named"].items()}, regs=regs, spill_st=st,
                    spill_ld=ld, loop_stl=lst, loop_ldl=lld, how=how,
                    cases=[{k: c[k] for k in ("dtype", "n", "m", "v", "b", "tokens", "rows", "k")} for c in uc])
               for x, regs, st, ld, lst, lld, how, uc in sp], open(H / f"spilling{SUFFIX}.json", "w"), indent=0)  # fmt: skip
    print(len(rows), "sets,", len(fsum), "families,", len(sp), "spilling (set, result) groups,",
          sum(len(t[7]) for t in sp), "spilling cases")
    print(collections.Counter(h for x in rows for h in x["hows"]))


if __name__ == "__main__":
    main()
