"""Extra: the baseline launches recompiled with a register cap (a launch's maxnreg option,
which block_attention_forward accepts but the library does not pass), to see whether one more
CTA per SM fits without spilling. Appends to compiled.jsonl under tag 'cap<N>'."""
import json, pickle, sys
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
import compile as C
CAPS = {("_attn_fwd_kernel", True): 128, ("_attn_fwd_kernel", False): 96,
        ("_attn_bwd_dq_kernel", True): 128, ("_attn_bwd_dq_kernel", False): 120,
        ("_attn_bwd_dkdv_kernel", True): 168, ("_attn_bwd_dkdv_kernel", False): 168}
launches = [la for la in pickle.load(open("/tmp/attn_audit/launches.pkl", "rb")) if la["tag"] == "base"]
out = open("/tmp/attn_audit/compiled.jsonl", "a")
for la in launches:
    names = list(la["signature"])
    perm = any(names[k[0]] == "ROW_PERM" and v for k, v in la["constexprs"].items())
    cap = CAPS.get((la["name"], perm))
    if cap is None:
        continue
    la = dict(la, tag=f"cap{cap}", options=dict(la["options"], maxnreg=cap), signature_names=names)
    la["variant"] = C.variant_name(la)
    r = C.safe(la)
    out.write(json.dumps(r) + "\n"); out.flush()
    print(r["variant"], r.get("registers"), r.get("spill_st"), r.get("spill_ld"), r.get("error", "")[:300])
