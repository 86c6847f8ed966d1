"""test_compile_hopper.py's cases for the Gluon kernels fed by a TMA ring: the N:M select kernel
(descriptors of int32 value pairs and offset bytes) and the CSR one-token kernel (boxes of
64-entry lines of values and columns). A case: (kernel, pointer and descriptor types, constexprs,
warps)."""


def ring_cases() -> dict:
    from triton.experimental.gluon import language as gl

    from sparsekernels.kernels.spmm_csr_ring import _csr_ring_kernel
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
    for data, columns, lines, warps, vector, pdl, prefetch in (
        ("bf16", "i16", 16, 4, 8, 2, False),
        ("fp16", "i32", 16, 4, 4, 1, False),
        ("bf16", "i16", 32, 8, 8, 0, True),
        ("bf16", "i16", 32, 4, 8, 0, False),
        ("bf16", "u8", 16, 4, 8, 2, False),
        ("bf16", "u8", 16, 4, 8, 0, True),
    ):  # CSR entries streamed through a TMA ring: boxes of (lines, 64) entries (u8: the line
        # form, byte offsets from each line's base column, a box of bases a step)
        width = {"u8": 8, "i16": 16, "i32": 32}[columns]
        value_box = f"tensordesc<{data}[{lines}, 64],{gl.NVMMASharedLayout(0, 16)!r}>"
        column_box = f"tensordesc<{columns}[{lines}, 64],{gl.NVMMASharedLayout(0, width)!r}>"
        base_box = value_box
        if columns == "u8":
            base_box = f"tensordesc<i32[{lines}, 4],{gl.NVMMASharedLayout(0, 32)!r}>"
        constants = dict(HAS_BIAS=pdl == 1, ACTIVATION=pdl, BR=lines, PER=vector, STAGES=4,
                         PREFETCH=prefetch, PDL=pdl, LINES=columns == "u8")  # fmt: skip
        pointers = [value_box, column_box, base_box, f"*{data}", f"*{columns}", "*i32", "*i32",
                    f"*{data}", f"*{data}", f"*{data}"]  # fmt: skip
        name = f"csr ring {data} {columns} {lines} x 64 {warps} warps {vector} a thread"
        name += " prefetch" * prefetch
        cases[name] = (_csr_ring_kernel, pointers, constants, warps)
    return cases
