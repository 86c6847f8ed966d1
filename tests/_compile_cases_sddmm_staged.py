"""test_compile_hopper.py's cases for the staged CSR SDDMM (kernels/sddmm_staged.py): float32
at K = 64 (128 x 128 blocks, 64 KB) and K = 48 (rows padded to 64 floats), four warps, 64
entries a step. A case: (kernel, pointer types, constexprs, warps)."""

STAGED_CASE_NAMES = ["sddmm staged fp32 k64", "sddmm staged fp32 k48"]


def staged_cases() -> dict:
    from sparsekernels.kernels.sddmm_staged import _sddmm_staged_kernel, config

    pointers = ["*i32"] * 5 + ["*fp32"] * 3
    return {
        name: (_sddmm_staged_kernel, pointers, config(k), 4)
        for name, k in zip(STAGED_CASE_NAMES, (64, 48), strict=True)
    }
