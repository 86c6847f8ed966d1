"""The sparse-tensor-core kernel's register shuffles (spmm_nm_mma_sp.py): a step's operands
split into their k32 blocks, and m = 8's values made into the A registers of their groups'
two halves by the groups' classes."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ._gluon_bits import _along, _shr

AXES = gl.constexpr(7)  # (WMT, KB, RH, G, NT, Q, RC): the kernel's


@gluon.jit
def split_blocks(x, KB: gl.constexpr, LAYOUT: gl.constexpr):
    """x (D0, KB, D2, 8, D4, 4, D6) as KB tensors (D0, D2, 8, D4, 4, D6) in LAYOUT, one a k32
    block (a split is a register renaming: the KB axis is a thread's registers)."""
    s0: gl.constexpr = x.shape[0]
    s2: gl.constexpr = x.shape[2]
    s4: gl.constexpr = x.shape[4]
    s6: gl.constexpr = x.shape[6]
    if KB == 4:  # kb = 2 k1 + k0
        y = gl.permute(gl.reshape(x, [s0, 2, 2, s2, 8, s4, 4, s6]), (0, 3, 4, 5, 6, 7, 1, 2))
        k0, k1 = gl.split(y)
        b0, b2 = gl.split(k0)
        b1, b3 = gl.split(k1)
        parts = (b0, b1, b2, b3)
    else:  # kb = 4 k2 + 2 k1 + k0
        y = gl.reshape(x, [s0, 2, 2, 2, s2, 8, s4, 4, s6])
        y = gl.permute(y, (0, 4, 5, 6, 7, 8, 1, 2, 3))
        k0, k1 = gl.split(y)
        b00, b10 = gl.split(k0)
        b01, b11 = gl.split(k1)
        b0, b4 = gl.split(b00)
        b2, b6 = gl.split(b10)
        b1, b5 = gl.split(b01)
        b3, b7 = gl.split(b11)
        parts = (b0, b1, b2, b3, b4, b5, b6, b7)
    out = ()
    for kb in gl.static_range(KB):
        out = out + (gl.convert_layout(parts[kb], LAYOUT),)
    return out


@gluon.jit
def half_registers(words, classes, N_KEEP: gl.constexpr):
    """m = 8: a lane's words (WMT, SP, I, G, 1, Q, RC) as the A registers of their groups'
    two halves, (WMT, SP, KL, RH, G, 1, Q, RC) (nm_mma_sp_operands). 2:8, a group a word:
    half 0 word & (~0 >> 16 class), half 1 word >> (32 - 16 class), class 2 bits at
    8 (2 s + rc) + 2 kl of the lane's word of the step (s: the step's span). 1:8, two groups
    a word (kl = 2 i + hi, low first): a group's value in the half its class bit (at
    8 rc + kl) names, zero in the other."""
    layout: gl.constexpr = words.type.layout
    if N_KEEP == 2:
        shift = 16 * _along(words.shape[1], 1, AXES, layout) + 8 * _along(2, 6, AXES, layout)
        cls = (classes >> (shift + 2 * _along(4, 2, AXES, layout))) & 3
        low = words & _shr(gl.full(cls.shape, -1, gl.int32, layout), 16 * cls)
        high = _shr(words, 32 - 16 * cls)
        registers = gl.permute(gl.join(low, high), (0, 1, 2, 7, 3, 4, 5, 6))
    else:
        shift = 8 * _along(2, 6, AXES, layout) + 2 * _along(4, 2, AXES, layout)
        first, second = words & 0xFFFF, _shr(words, 16)
        cls = (classes >> shift) & 1
        first = gl.join(first & (cls - 1), first & (0 - cls))  # (.., RH)
        cls = (classes >> (shift + 1)) & 1
        second = gl.join(second & (cls - 1), second & (0 - cls))
        registers = gl.permute(gl.join(first, second), (0, 1, 2, 8, 7, 3, 4, 5, 6))
        s0: gl.constexpr = registers.shape[0]
        s1: gl.constexpr = registers.shape[1]
        registers = gl.reshape(registers, [s0, s1, 8, 2, 8, 1, 4, 2])
    return registers
