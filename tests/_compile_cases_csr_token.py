"""test_compile_hopper.py's cases for the CSR one-token walks: the vector and lane-major walks
(spmm_csr_token.py, with x gathered by inline PTX too), the walk on the line layout
(spmm_csr_token_lines.py) and the stream walk (spmm_csr_token_stream.py); the few-token walk
on the line layout (spmm_csr_few_lines.py). A case: (kernel, pointer types, constexprs,
warps)."""


def csr_token_cases() -> dict:
    import triton.language as tl

    from sparsekernels.kernels.spmm_csr_few_lines import _spmm_csr_few_lines_kernel
    from sparsekernels.kernels.spmm_csr_token import _spmm_csr_token_kernel
    from sparsekernels.kernels.spmm_csr_token_lines import _spmm_csr_token_lines_kernel
    from sparsekernels.kernels.spmm_csr_token_stream import _spmm_csr_token_stream_kernel

    cases = {}
    for data, cols in (("*bf16", "*i16"), ("*fp64", "*i64")):  # the CSR one-token walk
        for lane_major in (False, True):
            constants = dict(HAS_BIAS=True, ACTIVATION=2, ROWS=2, BLOCK=256, GROUP=16,
                             ACC_DTYPE=tl.float64 if data == "*fp64" else tl.float32,
                             INDEX=tl.int64 if data == "*fp64" else tl.int32,
                             LANE_MAJOR=lane_major, ASM_GATHER=False, UNMASKED_MIDDLE=False,
                             PDL=0 if data == "*fp64" else 1 + (not lane_major))  # fmt: skip
            pointers = ["*i32", cols, data, data, data, "*i32", data]
            name = f"csr token {data}" + (" lane-major" if lane_major else "")
            cases[name] = (_spmm_csr_token_kernel, pointers, constants, 1)
    for rows, asm, unmasked in ((1, True, False), (2, True, False), (1, False, True),
                                (1, True, True), (2, True, True)):  # fmt: skip
        # the vector walk with x gathered by inline PTX (kernels/_gather.py), and with its
        # middle steps unmasked
        constants = dict(HAS_BIAS=True, ACTIVATION=0, ROWS=rows, BLOCK=256, GROUP=16,
                         ACC_DTYPE=tl.float32, INDEX=tl.int32, LANE_MAJOR=False,
                         ASM_GATHER=asm, UNMASKED_MIDDLE=unmasked, PDL=2)  # fmt: skip
        pointers = ["*i32", "*i16", "*bf16", "*bf16", "*bf16", "*i32", "*bf16"]
        name = f"csr token {rows} x 256" + " asm" * asm + " unmasked" * unmasked
        cases[name] = (_spmm_csr_token_kernel, pointers, constants, 1)
    for rows, block, asm in (
        (1, 256, False),
        (2, 256, False),
        (1, 512, False),
        (1, 256, True),
        (2, 256, True),
    ):  # fmt: skip  (the one-token walk on the line layout)
        constants = dict(HAS_BIAS=rows == 2, ACTIVATION=0, ACC_DTYPE=tl.float32, ROWS=rows,
                         BLOCK=block, LINE=64, HEAD_BASE=(1 << 24) - 1, PDL=2,
                         ASM_GATHER=asm, BY_SEQUENCE=False, AHEAD=1,
                         HELD_IN_ASM=False, IN_PLACE=False, FINITE=False)  # fmt: skip
        pointers = ["*i32", "*u8", "*i32", "*bf16", "*bf16", "*i32", "*bf16", "*bf16", "*i32",
                    "*bf16"]  # fmt: skip
        name = f"csr token lines {rows} x {block}" + " asm" * asm
        cases[name] = (_spmm_csr_token_lines_kernel, pointers, constants, 1)
    constants = {**constants, "BY_SEQUENCE": True, "AHEAD": 2}  # (the options, 2 x 256 asm)
    cases["csr token lines 2 x 256 asm sequence ahead 2"] = (
        _spmm_csr_token_lines_kernel, pointers, constants, 2)  # fmt: skip
    routed = {**constants, "AHEAD": 1}  # the route's form: a warp a row, rows in visiting order
    cases["csr token lines 2 x 256 asm sequence 2 warps"] = (
        _spmm_csr_token_lines_kernel, pointers, routed, 2)  # fmt: skip
    cases["csr token lines 2 x 256 asm sequence 2 warps held in asm"] = (
        _spmm_csr_token_lines_kernel, pointers, {**routed, "HELD_IN_ASM": True}, 2)  # fmt: skip
    for finite in (False, True):  # the CSR's own values: other rows' masked, or not (finite)
        cases["csr token lines 2 x 256 asm sequence 2 warps held in asm in place"
              + " finite" * finite] = (_spmm_csr_token_lines_kernel, pointers,
                                       {**routed, "HELD_IN_ASM": True, "IN_PLACE": True,
                                        "FINITE": finite}, 2)  # fmt: skip
    cases["csr token lines 2 x 256 asm sequence 2 warps held in asm 16-slot lines"] = (
        _spmm_csr_token_lines_kernel, pointers, {**routed, "HELD_IN_ASM": True, "LINE": 16},
        2)  # fmt: skip
    constants = dict(HAS_BIAS=True, ACTIVATION=1, ACC_DTYPE=tl.float32, INDEX=tl.int32, ROWS=4,
                     BLOCK=256, GROUP=16, PDL=2)  # fmt: skip
    pointers = ["*i32", "*i16", "*bf16", "*bf16", "*bf16", "*i32", "*bf16"]
    cases["csr token stream pdl"] = (_spmm_csr_token_stream_kernel, pointers, constants, 1)
    for n, block, asm in ((4, 256, False), (8, 128, False), (16, 64, False), (2, 256, True),
                          (4, 256, True), (8, 128, True), (16, 64, True)):  # fmt: skip
        # the few-token line walk, B padded: gathered by tl.load, or by inline PTX vectors
        constants = dict(HAS_BIAS=n == 4, ACTIVATION=0, ACC_DTYPE=tl.float32, ROWS=2,
                         BLOCK=block, BLOCK_N=n, PADDED_B=True, LINE=64,
                         HEAD_BASE=(1 << 24) - 1, BY_SEQUENCE=True, ASM_GATHER=asm,
                         IN_PLACE=False, FINITE=False)  # fmt: skip
        pointers = ["*i32", "*u8", "*i32", "*bf16", "*bf16", "*i32", "*bf16", "*bf16", "*i32",
                    "*bf16"]  # fmt: skip
        name = f"csr few lines {n} tokens 2 x {block}" + " asm" * asm
        cases[name] = (_spmm_csr_few_lines_kernel, pointers, constants, 2)
    in_place = {**constants, "BLOCK_N": 4, "BLOCK": 256, "HAS_BIAS": True, "IN_PLACE": True}
    for finite in (False, True):
        cases["csr few lines 4 tokens 2 x 256 asm in place" + " finite" * finite] = (
            _spmm_csr_few_lines_kernel, pointers, {**in_place, "FINITE": finite}, 2)  # fmt: skip
    return cases
