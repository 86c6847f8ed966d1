"""Small Gluon helpers the register-level kernels share (spmm_nm_wgmma.py, spmm_nm_mma_sp.py,
spmm_csr_scatter.py, spmm_nm_select_ring.py):
indices along one axis of a distributed layout, the layouts of a one-warpgroup wgmma's
accumulator and B tile, single PTX bit instructions whose edge cases the kernels rely on
(shifts of 32 or more give 0; byte permutes with zeros), and the check that a kernel storing
into shared memory by PTX holds its buffer alone (spmm_csr_scatter.py, densify_shared.py)."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

# compiled kernels checked by check_buffer_alone, held so that no other object takes their id
_ALONE: dict = {}


def check_buffer_alone(compiled, want: int, what: str) -> None:
    """Raise unless a compiled kernel's shared memory is its `want`-byte buffer alone: its PTX
    stores address the buffer from the dynamic window's start (`global_smem`), so anything
    else there (a reduction's scratch) would move it. Once per compiled kernel, after its
    first launch."""
    if _ALONE.get(id(compiled)) is compiled:
        return
    if compiled.metadata.shared != want:
        raise RuntimeError(
            f"{what}: the kernel holds {compiled.metadata.shared} bytes of shared memory, not "
            f"its buffer's {want} alone: the buffer's offset is unknown"
        )
    _ALONE[id(compiled)] = compiled


# the CTA barrier (Gluon renamed it after Triton 3.6, the H200's)
cta_barrier = gl.thread_barrier if hasattr(gl, "thread_barrier") else gl.barrier
# a shared buffer seen as another type and shape: `reinterpret` in later Tritons (the H200's
# Triton 3.6 names it `_reinterpret`)
REINTERPRET_PUBLIC: gl.constexpr = gl.constexpr(hasattr(gl.shared_memory_descriptor, "reinterpret"))


@gluon.constexpr_function
def _axis_layout(layout, axis, rank):
    """The 1-D layout whose arange, expanded on every other axis, lies along `axis` of a
    rank-`rank` tensor in `layout`."""
    for dim in reversed(range(rank)):
        if dim != axis:
            layout = gl.SliceLayout(dim, layout)
    return layout


@gluon.jit
def _along(size: gl.constexpr, axis: gl.constexpr, rank: gl.constexpr, layout: gl.constexpr):
    """arange(size) along `axis` of a rank-`rank` tensor in `layout` (1 on the other axes)."""
    index = gl.arange(0, size, layout=_axis_layout(layout, axis, rank))
    for dim in gl.static_range(rank):
        if dim != axis:
            index = gl.expand_dims(index, dim)
    return index


def wgmma_b_layouts(block_k: int, block_n: int, k_contiguous: bool) -> dict:
    """ACC_LAYOUT, B_LOAD and B_SHARED for one warpgroup's wgmma over a (block_k, block_n) B
    tile loaded from global memory (16-byte loads along K where B's rows are unit stride,
    else along N) and stored to shared memory for the MMA."""
    if k_contiguous:
        b_load = gl.BlockedLayout([8, 1], [32, 1], [1, 4], [0, 1])
    else:
        b_load = gl.BlockedLayout([1, 8], [32, 1], [4, 1], [1, 0])
    return {
        "ACC_LAYOUT": gl.NVMMADistributedLayout([3, 0], [4, 1], [16, block_n, 16]),
        "B_LOAD": b_load,
        "B_SHARED": gl.NVMMASharedLayout(128 if block_k >= 64 else 0, 16, 2, transposed=True),
    }


@gluon.jit
def _clamped_shl(a, amount):
    """a << amount as PTX's shl: amounts past 31 (negative ones too, read unsigned) give 0."""
    return gl.inline_asm_elementwise(
        "shl.b32 $0, $1, $2;", "=r,r,r", [a, amount], dtype=gl.int32, is_pure=True, pack=1
    )


@gluon.jit
def _permute(a, selector):
    """PTX prmt.b32 of (a, 0): byte k of the result is byte (selector >> 4k) & 7 of a's four
    bytes followed by four zero bytes (only the selector's low 16 bits count)."""
    return gl.inline_asm_elementwise(
        "prmt.b32 $0, $1, 0, $2;", "=r,r,r", [a, selector], dtype=gl.int32, is_pure=True,
        pack=1,
    )  # fmt: skip


@gluon.jit
def _permute_pair(a, b, selector):
    """PTX prmt.b32 of (a, b): byte k of the result is byte (selector >> 4k) & 7 of {b, a}'s
    eight bytes (only the selector's low 16 bits count)."""
    return gl.inline_asm_elementwise(
        "prmt.b32 $0, $1, $2, $3;", "=r,r,r,r", [a, b, selector], dtype=gl.int32, is_pure=True,
        pack=1,
    )  # fmt: skip


@gluon.jit
def _shr(a, amount):
    """a >> amount as PTX's shr.b32: logical, amounts of 32 or more give 0."""
    return gl.inline_asm_elementwise(
        "shr.b32 $0, $1, $2;", "=r,r,r", [a, amount], dtype=gl.int32, is_pure=True, pack=1
    )


@gluon.jit
def pdl_start(PDL: gl.constexpr):
    """Programmatic dependent launch (kernels/_pdl.py) for a Gluon kernel: at its start let
    the next kernel launch, then wait for the one before (PDL 1; 2 is taken as 1)."""
    if PDL > 0:
        pdl_launch_dependents()
        pdl_wait()


@gluon.jit
def pdl_launch_dependents():
    """Let the next kernel in the stream launch (griddepcontrol.launch_dependents)."""
    gl.inline_asm_elementwise(
        "griddepcontrol.launch_dependents; // dummy $0", "=r", [], dtype=gl.int32,
        is_pure=False, pack=1,
    )  # fmt: skip


@gluon.jit
def pdl_wait():
    """Wait for the kernel before to complete, its writes visible (griddepcontrol.wait)."""
    gl.inline_asm_elementwise(
        "griddepcontrol.wait; // dummy $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1
    )
