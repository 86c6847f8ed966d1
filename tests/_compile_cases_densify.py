"""test_compile_hopper.py's cases for the densify through shared memory
(kernels/densify_shared.py): bf16 rows of 14336 columns one a program, fp32 rows of 1024 four
a program. A case: (kernel, pointer types, constexprs, warps)."""

DENSIFY_CASE_NAMES = ["densify shared bf16 1 x 16384", "densify shared fp32 4 x 1024"]


def densify_cases() -> dict:
    from triton.experimental.gluon import language as gl

    from sparsekernels.kernels.densify_shared import _densify_csr_shared_kernel, layouts

    cases = {}
    for name, rows, span, elem, bits, cols in (
        (DENSIFY_CASE_NAMES[0], 1, 16384, 2, gl.int16, "*i16"),
        (DENSIFY_CASE_NAMES[1], 4, 1024, 4, gl.int32, "*i32"),
    ):
        warps, block_nnz = 4, 1024 // rows  # (the tuning: 1024 entries a step over the rows)
        piece = min(span, 16 // elem * 32 * warps)
        constants = dict(ROWS=rows, ROW_SPAN=span, PIECE=piece, BLOCK_NNZ=block_nnz,
                         ELEM=elem, BITS=bits, **layouts(elem, warps, rows, block_nnz))  # fmt: skip
        value = "*i16" if elem == 2 else "*i32"
        cases[name] = (_densify_csr_shared_kernel, ["*i32", cols, value, value], constants, warps)
    return cases
