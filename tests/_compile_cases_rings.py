"""test_compile_hopper.py's cases for the Gluon kernel fed by a TMA ring: the N:M select kernel
(descriptors of int32 value pairs and offset bytes). A case: (kernel, pointer and descriptor
types, constexprs, warps). (The CSR one-token TMA ring, measured slower than the plain loads'
route in the forty-second session, was removed: restore from dd4abbb.)"""


def ring_cases() -> dict:
    from triton.experimental.gluon import language as gl

    from sparsekernels.kernels.spmm_nm_select_ring import _nm_select_ring_kernel

    cases = {}
    for n, rows, warps, stages, data, producer, pdl, counted, permute in (
        (1, 8, 8, 4, "bf16", True, 2, False, False),
        (2, 16, 4, 3, "fp16", False, 1, True, False),
        (1, 16, 4, 2, "bf16", False, 2, False, False),
        (1, 16, 4, 2, "bf16", False, 2, True, True),
        (2, 16, 4, 2, "fp16", False, 0, True, True),
    ):  # the select kernel fed by a TMA ring: descriptors of int32 value pairs and offset bytes
        span = 32 * warps
        value_box = f"tensordesc<i32[{rows}, {span}],{gl.NVMMASharedLayout(0, 32)!r}>"
        offset_box = f"tensordesc<u8[{rows}, {span}],{gl.NVMMASharedLayout(0, 8)!r}>"
        constants = dict(N_KEEP=n, BF16=data == "bf16", HAS_BIAS=n == 2, ACTIVATION=2 * (n - 1),
                         R=rows, U=span, STAGES=stages, PRODUCER=producer, PREFETCH=not producer,
                         COUNTED=counted, MASKED=not permute, PERMUTE=permute,
                         PDL=pdl)  # fmt: skip
        pointers = [value_box, offset_box, f"*{data}", f"*{data}", f"*{data}"]
        name = f"nm select ring {n}:8 {rows} x {span} {data}" + " producer" * producer
        name += " permuted unmasked" * permute
        cases[name] = (_nm_select_ring_kernel, pointers, constants, warps)
    return cases
