"""Every token count 1-64 (not only the brief's sample) through the same route simulation, for all
patterns, shapes and dtypes: which launches the other counts reach. New launches are added to
configs.pkl (routes_all.jsonl holds the cases); units (constexpr set + integer specialization)
not seen before are listed in keys_alltok.json where their set compiled at >= 200 registers or
spilled, or the set is new."""
import json, pickle, itertools, sys, traceback, importlib.util, collections
from pathlib import Path
H = Path(__file__).resolve().parent
sys.path.insert(0, str(H))
import routes as R
configs = pickle.load(open(H/"configs.pkl", "rb"))
new = {}
out = open(H/"routes_all.jsonl", "w")
for (n, m, v, blk), (rows, k), dtype, tokens in itertools.product(list(R.pattern_space()), R.SHAPES, R.DTYPES, range(1, 65)):
    if k % m or m % blk or n % blk: continue
    case = dict(dtype=dtype, rows=rows, k=k, tokens=tokens, n=n, m=m, v=v, b=blk)
    r = R.route(dtype, rows, k, tokens, n, m, v, blk)
    case["backend"] = r["backend"]
    keys = []
    for l in r.get("launches", []):
        key = R.launch_key(l); keys.append(key)
        if key not in configs and key not in new:
            new[key] = dict(key=key, name=l["name"], module=l["fn"].fn.__module__, signature=l["signature"],
                            constexprs={a: R.spec_value(b) for a, b in l["constexprs"].items()}, attrs=l["attrs"],
                            options=l["options"].__dict__, named=R.named_constexprs(l))
    case["launches"] = keys
    case["kernel"] = r.get("kernel") or (r["launches"][0]["name"] if r.get("launches") else r["backend"])
    out.write(json.dumps(case) + "\n")
out.close()
configs.update(new)
pickle.dump(configs, open(H/"configs.pkl", "wb"))
print(len(new), "new launches")
