"""List each _cases() case: kernel name and runtime (non-constexpr) argument names."""
import sys
import test_compile_hopper
seen = {}
for name, (kernel, pointers, constants, warps) in test_compile_hopper._cases().items():
    rt = [a for a in kernel.arg_names if a not in constants]
    key = kernel.fn.__name__ if hasattr(kernel, "fn") else str(kernel)
    print(f"{name!r:70s} {key} warps={warps}")
    seen.setdefault(key, (rt, [a for a in kernel.arg_names if a in constants and not a.isupper()]))
print()
for k, (rt, lowconst) in seen.items():
    print(k, "RUNTIME:", rt, "LOWERCASE CONSTS:", lowconst)
