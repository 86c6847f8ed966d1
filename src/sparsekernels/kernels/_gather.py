"""A gather of a 16-bit x by inline PTX, for the one-token walks.

tl.load's gather of x at loaded columns takes a layout of its own (its addresses are not
contiguous, so Triton's coalescing gives it one element a thread), and each step's columns
or pointers then cross to it through shared memory: on sm_90 the line walk's step spent 8
64-bit stores and loads and two barriers on it. An elementwise inline-asm op keeps its
operands' layout, so the gather stays in the step's own. Not in the interpreter (no PTX):
callers pass it as a constexpr choice."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def gather16(x, index, held):
    """x[index] where held, else 0, for a 16-bit x (its own dtype back)."""
    address = (x + index).to(tl.int64, bitcast=True)
    bits = tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $2, 0; mov.b16 $0, 0; @p ld.global.b16 $0, [$1]; }",
        "=h,l,r",
        [address, held.to(tl.int32)],
        dtype=tl.int16,
        is_pure=True,
        pack=1,
    )
    return bits.to(x.dtype.element_ty, bitcast=True)


@triton.jit
def gather16_below(x, index, within, count):
    """x[index] where within < count, else 0, for a 16-bit x: the mask's compare made inside
    the PTX, where a mask passed in costs a select and a compare more an element."""
    address = (x + index).to(tl.int64, bitcast=True)
    bits = tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.lt.s32 p, $2, $3; mov.b16 $0, 0; @p ld.global.b16 $0, [$1]; }",
        "=h,l,r,r",
        [address, within, count],
        dtype=tl.int16,
        is_pure=True,
        pack=1,
    )
    return bits.to(x.dtype.element_ty, bitcast=True)


@triton.jit
def gather16_all(x, index):
    """x[index] for a 16-bit x, every element read (no mask: a step known to be whole)."""
    address = (x + index).to(tl.int64, bitcast=True)
    bits = tl.inline_asm_elementwise(
        "ld.global.b16 $0, [$1];", "=h,l", [address], dtype=tl.int16, is_pure=True, pack=1
    )
    return bits.to(x.dtype.element_ty, bitcast=True)


# Rows of a B padded to 2-16 16-bit columns (a few-token walk's gather): 4, 8 or 16 bytes a
# row by one vector load a slot, in the slot's own layout, as 32-bit words (two columns each).


@triton.jit
def gather_words1(address, held):
    """The 32-bit word at each int64 address where held, else 0."""
    return tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $2, 0; mov.b32 $0, 0; @p ld.global.b32 $0, [$1]; }",
        "=r,l,r",
        [address, held.to(tl.int32)],
        dtype=tl.int32,
        is_pure=True,
        pack=1,
    )


@triton.jit
def gather_words2(address, held):
    """The two 32-bit words at each 8-byte-aligned int64 address where held, else 0s."""
    return tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $3, 0; mov.b32 $0, 0; mov.b32 $1, 0;"
        " @p ld.global.v2.b32 {$0, $1}, [$2]; }",
        "=r,=r,l,r",
        [address, held.to(tl.int32)],
        dtype=(tl.int32, tl.int32),
        is_pure=True,
        pack=1,
    )


@triton.jit
def gather_words4(address, held):
    """The four 32-bit words at each 16-byte-aligned int64 address where held, else 0s."""
    return tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $5, 0; mov.b32 $0, 0; mov.b32 $1, 0; mov.b32 $2, 0;"
        " mov.b32 $3, 0; @p ld.global.v4.b32 {$0, $1, $2, $3}, [$4]; }",
        "=r,=r,=r,=r,l,r",
        [address, held.to(tl.int32)],
        dtype=(tl.int32, tl.int32, tl.int32, tl.int32),
        is_pure=True,
        pack=1,
    )
