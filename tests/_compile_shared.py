"""test_compile_hopper.py's check of the kernels whose inline PTX stores into shared memory at
offsets from the dynamic window's start: the compiled kernel's shared memory must be their
buffer alone (the scatter kernel's tile and B's, the warp-slice kernel's slabs, the densify's
rows), or it sits elsewhere."""


def buffer_mismatch(name: str, constants: dict, shared: int) -> str | None:
    """Why a compiled case's `shared` bytes are not its buffer's, or None (other kernels too)."""
    from sparsekernels.kernels.densify_shared import shared_bytes
    from sparsekernels.kernels.spmm_csr_scatter import buffer_alone

    if name.startswith("csr scatter slices"):  # the four warps' slabs, B's after them
        from sparsekernels.kernels.spmm_csr_scatter_slices import buffer_bytes

        alone = shared == buffer_bytes(constants["BLOCK_N"])
    elif name.startswith("csr scatter"):
        alone = buffer_alone(shared, constants["BK"], constants["BM"])
    elif name.startswith("densify shared"):
        alone = shared == shared_bytes(constants["ROWS"], constants["ROW_SPAN"], constants["ELEM"])
    else:
        return None
    return None if alone else f"{shared} bytes of shared memory, not the buffer's alone"
