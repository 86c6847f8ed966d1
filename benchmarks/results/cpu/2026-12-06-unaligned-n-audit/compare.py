"""Side-by-side view of summary.tsv: per case, each variant's loads/instructions/loop; marks
cases whose global loads change between the aligned and an unaligned variant."""
import ast
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).parent
rows = [l.split("\t") for l in (HERE / "summary.tsv").read_text().splitlines()[1:] if l.strip()]
by = defaultdict(dict)
for group, case, variant, ones, un, regs, spill, instr, loop, loads in rows:
    by[(group, case)][variant] = (regs, spill, instr, loop, ast.literal_eval(loads) if loads != "None" else {})


def short(loads):
    return " ".join(f"{k.replace('LDGSTS', 'CP').replace('LDG.E', 'LDG')}x{v}" for k, v in loads.items())


for (group, case), vs in by.items():
    base = vs["aligned"][3]
    changed = any(v[4] != vs["aligned"][4] for v in vs.values())
    print(f"{'**' if changed else '  '} [{group}] {case}")
    for variant, (regs, spill, instr, loop, loads) in vs.items():
        print(f"      {variant:26s} regs {regs:>4} spill {spill:>4} instr {instr:>5} loop {loop:>4}  {short(loads)}")
