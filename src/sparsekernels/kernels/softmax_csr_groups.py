"""The row softmax's rows read in whole 16-byte groups (softmax_csr's ALIGN): vector loads and
stores. Two forms (softmax_csr.group_form): "aligned", each matrix's values starting on a
group (a batch stride that is a multiple of 16 entries: Triton's divisibility hint), and
"phased", any batch stride (a contiguous (heads, nnz) array at nnz % 16 != 0, as SDDMM writes
them): groups counted from the array's start, each head's base moved back to its group and its
row that many entries further in (head_phases, read_phased; PER_HEAD below). Rows longer than
the lanes are walked in groups (walk_in_groups) in both.

Each entry of a row read once is otherwise one 2-byte load and one 2-byte store, and in bf16
the kernel is bound by instructions issued (1.04-1.33 warp-instructions an entry compiled for
sm_90 on the softmax suite's patterns; 47-61% of copy bandwidth on the H200). Here the lanes
start at the group holding the row's start, the loads take whole groups (one mask a group: a
vector load), and the stores take the groups wholly inside the row (a vector store); the row's
first and last groups, where partial, are stored entry by entry from a small tensor reloaded
(an L1 hit) and recomputed with the row's shift and inverse. A row of whole groups (start and
end on group edges: local:256's rows past the first 256) needs no per-entry mask at all.
A helper's sm_90 compile (benchmarks/results/cpu/2026-12-06-softmax-lean-analysis): local:256
1.105 -> 0.735 warp-instructions an entry, strided:128:128 1.330 -> 1.083, random:0.1 1.042 ->
0.961 (and 72 -> 40 registers with maxnreg 40).

Two things Triton does that shape this code: a tensor with fewer entries than the program has
threads is copied into every thread (EDGE lanes: at least one an thread), and a second tensor
feeding the row's max and sum makes Triton convert the main tensor's layout through shared
memory (the edge tensor only stores; the TAIL lanes, when routed, pay it).
"""

import triton
import triton.language as tl


@triton.jit
def read_whole_groups(
    values, out, start, end, lanes, mask_h, scale, stride_ve, stride_oe,
    ACC_DTYPE: tl.constexpr, GROUP: tl.constexpr,
):  # fmt: skip
    """A row of whole groups (start and end multiples of GROUP) within the lanes: group masks
    only, one vector load and store a group."""
    first = tl.multiple_of(start, GROUP)
    offs = (first + lanes)[None, :]
    whole = mask_h[:, None] & ((first + lanes // GROUP * GROUP)[None, :] < end)
    z = tl.load(values + offs * stride_ve, mask=whole, other=float("-inf"))
    z = tl.where(whole, z.to(ACC_DTYPE) * scale, float("-inf"))
    row_max = tl.max(z, axis=1)
    shift = tl.where(row_max == float("-inf"), 0.0, row_max)[:, None]
    p = tl.exp2(z - shift)
    inverse = (1.0 / tl.sum(p, axis=1))[:, None]
    tl.store(out + offs * stride_oe, (p * inverse).to(out.dtype.element_ty), mask=whole)


@triton.jit
def read_in_groups(
    values, out, start, end, lanes, mask_h, scale, stride_ve, stride_oe,
    ACC_DTYPE: tl.constexpr, INDEX: tl.constexpr, BLOCK: tl.constexpr, TAIL: tl.constexpr,
    GROUP: tl.constexpr, EDGE: tl.constexpr, PER_HEAD: tl.constexpr = False,
):  # fmt: skip
    """A row within BLOCK + TAIL lanes from the group holding its start, its groups' ends
    within the array: whole groups loaded, the groups inside the row stored whole, the partial
    first and last groups stored entry by entry from EDGE lanes (>= 2 GROUP, >= the threads a
    head). PER_HEAD: start and end are (heads, 1), each head's row at its own place within its
    groups (softmax_csr's PHASED), `values` and `out` (heads, 1) pointers."""
    UNSIGNED: tl.constexpr = tl.uint32 if tl.int32 == INDEX else tl.uint64
    first = _group_start(start, GROUP, PER_HEAD)
    width = tl.cast(end - start, UNSIGNED)
    offs = _along(first, lanes, PER_HEAD)
    groups = _along(first, lanes // GROUP * GROUP, PER_HEAD)
    inside = mask_h[:, None] & (groups >= start) & (groups + GROUP <= end)
    live = mask_h[:, None] & (tl.cast(offs - start, UNSIGNED) < width)  # start <= offs < end
    z = tl.load(
        values + offs * stride_ve, mask=mask_h[:, None] & (groups < end), other=float("-inf")
    )
    z = tl.where(live, z.to(ACC_DTYPE) * scale, float("-inf"))
    row_max = tl.max(z, axis=1)
    if TAIL > 0:  # entries past BLOCK on TAIL lanes (whole groups: TAIL >= GROUP)
        tail_lanes = tl.arange(0, TAIL).to(INDEX)
        tail_offs = _along(first + BLOCK, tail_lanes, PER_HEAD)
        tail_groups = _along(first + BLOCK, tail_lanes // GROUP * GROUP, PER_HEAD)
        tail_live = mask_h[:, None] & (tail_offs < end)  # past the start already
        zt = tl.load(
            values + tail_offs * stride_ve,
            mask=mask_h[:, None] & (tail_groups < end),
            other=float("-inf"),
        )
        zt = tl.where(tail_live, zt.to(ACC_DTYPE) * scale, float("-inf"))
        row_max = tl.maximum(row_max, tl.max(zt, axis=1))
    ze, edge_offs, edge_store = _edges(
        values, start, end, first, mask_h, scale, stride_ve, ACC_DTYPE, INDEX, GROUP, EDGE,
        PER_HEAD,
    )  # fmt: skip

    shift = tl.where(row_max == float("-inf"), 0.0, row_max)[:, None]
    p = tl.exp2(z - shift)
    row_sum = tl.sum(p, axis=1)
    if TAIL > 0:
        pt = tl.exp2(zt - shift)
        row_sum += tl.sum(pt, axis=1)
    inverse = (1.0 / row_sum)[:, None]
    tl.store(out + offs * stride_oe, (p * inverse).to(out.dtype.element_ty), mask=inside)
    if TAIL > 0:
        tail_inside = mask_h[:, None] & (tail_groups + GROUP <= end)
        tl.store(
            out + tail_offs * stride_oe, (pt * inverse).to(out.dtype.element_ty), mask=tail_inside
        )
    pe = tl.exp2(ze - shift) * inverse
    tl.store(out + edge_offs * stride_oe, pe.to(out.dtype.element_ty), mask=edge_store)


@triton.jit
def _along(base, lanes, PER_HEAD: tl.constexpr):
    """(heads or 1, lanes) offsets: base a scalar, or with PER_HEAD a (heads, 1) tensor."""
    if PER_HEAD:  # noqa: SIM108 (a constexpr branch: Triton compiles one side)
        offs = base + lanes[None, :]
    else:
        offs = (base + lanes)[None, :]
    return offs


@triton.jit
def _group_start(at, GROUP: tl.constexpr, PER_HEAD: tl.constexpr):
    """The start of the group holding `at` (a scalar, or with PER_HEAD a (heads, 1) tensor),
    marked a multiple of GROUP."""
    # (a tensor's: Triton infers x // GROUP * GROUP's divisibility; multiple_of on a tensor of
    # one head failed its coalescing pass, Triton 3.6)
    if PER_HEAD:  # noqa: SIM108 (a constexpr branch: Triton compiles one side)
        start = at // GROUP * GROUP
    else:
        start = tl.multiple_of(at // GROUP * GROUP, GROUP)
    return start


@triton.jit
def _edges(
    values, start, end, first, mask_h, scale, stride_ve,
    ACC_DTYPE: tl.constexpr, INDEX: tl.constexpr, GROUP: tl.constexpr, EDGE: tl.constexpr,
    PER_HEAD: tl.constexpr,
):  # fmt: skip
    """A row's partial first and last groups, entry by entry on EDGE lanes (the first group on
    lanes 0..GROUP-1, the one holding end - 1 on the next GROUP): their scaled values (-inf
    elsewhere), offsets and store mask."""
    last = _group_start(end - 1, GROUP, PER_HEAD)
    e = tl.arange(0, EDGE).to(INDEX)
    if PER_HEAD:
        edge_group = tl.where((e < GROUP)[None, :], first, last)
        once = e[None, :] < tl.where(last > first, 2 * GROUP, GROUP)
    else:
        edge_group = tl.where(e < GROUP, first, last)[None, :]
        once = (e < tl.where(last > first, 2 * GROUP, GROUP))[None, :]
    edge_offs = edge_group + (e % GROUP)[None, :]
    edge_live = mask_h[:, None] & (edge_offs >= start) & (edge_offs < end)
    edge_live &= once  # one group: once
    partial = (edge_group < start) | (edge_group + GROUP > end)
    edge_store = edge_live & partial
    ze = tl.load(values + edge_offs * stride_ve, mask=edge_store, other=float("-inf"))
    ze = tl.where(edge_store, ze.to(ACC_DTYPE) * scale, float("-inf"))
    return ze, edge_offs, edge_store


@triton.jit
def walk_in_groups(
    values, out, start, end, mask_h, scale, stride_ve, stride_oe,
    ACC_DTYPE: tl.constexpr, INDEX: tl.constexpr, BLOCK: tl.constexpr, BLOCK_H: tl.constexpr,
    GROUP: tl.constexpr, EDGE: tl.constexpr, PER_HEAD: tl.constexpr = False,
):  # fmt: skip
    """A long row walked twice in whole groups from the one holding its start, its groups'
    ends within the array: steps of BLOCK entries as (BLOCK / GROUP, GROUP) lanes, a thread a
    group, so each step's max is taken within the thread (as softmax_csr_walks._walk_per_thread with
    a group a thread) and a group is one vector load; the second pass stores the groups inside
    the row whole and the partial first and last groups entry by entry (_edges). PER_HEAD as
    read_in_groups' (start and end (heads, 1), each head's row at its own place)."""
    W: tl.constexpr = BLOCK // GROUP
    UNSIGNED: tl.constexpr = tl.uint32 if tl.int32 == INDEX else tl.uint64
    lanes = (tl.arange(0, W)[:, None] * GROUP + tl.arange(0, GROUP)[None, :]).to(INDEX)
    lanes = lanes[None, :, :]
    starts = (tl.arange(0, W) * GROUP).to(INDEX)[None, :, None]  # each group's first entry
    first = _group_start(start, GROUP, PER_HEAD)
    # a step count (first + i * BLOCK keeps first's divisibility, where a loop from first loses
    # it): the most any head needs
    if PER_HEAD:
        steps = tl.cdiv(tl.max(tl.max(end - first, axis=1), axis=0), BLOCK)
    else:
        steps = tl.cdiv(end - first, BLOCK)
    start_3, end_3, first_3 = _3d(start, PER_HEAD), _3d(end, PER_HEAD), _3d(first, PER_HEAD)
    width = tl.cast(end_3 - start_3, UNSIGNED)
    values_3 = values[:, :, None]
    out_3 = out[:, :, None]
    mask_h_3 = mask_h[:, None, None]
    m = tl.full((BLOCK_H, W), float("-inf"), dtype=ACC_DTYPE)
    s = tl.zeros((BLOCK_H, W), dtype=ACC_DTYPE)
    for i in range(0, steps):
        e = first_3 + i * BLOCK
        offs = e + lanes
        whole = mask_h_3 & ((e + starts) < end_3)
        z = tl.load(values_3 + offs * stride_ve, mask=whole, other=float("-inf"))
        live = mask_h_3 & (tl.cast(offs - start_3, UNSIGNED) < width)  # start <= offs < end
        z = tl.where(live, z.to(ACC_DTYPE) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(z, axis=2))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp2(m - shift) + tl.sum(tl.exp2(z - shift[:, :, None]), axis=2)
        m = m_new
    row_max = tl.max(m, axis=1)
    shift = tl.where(row_max == float("-inf"), 0.0, row_max)[:, None]
    inverse = (1.0 / tl.sum(s * tl.exp2(m - shift), axis=1))[:, None]
    shift_3 = shift[:, :, None]
    inverse_3 = inverse[:, :, None]
    for i in range(0, steps):
        e = first_3 + i * BLOCK
        offs = e + lanes
        groups = e + starts
        whole = mask_h_3 & (groups < end_3)
        z = tl.load(values_3 + offs * stride_ve, mask=whole, other=float("-inf"))
        # rounded as in pass 1 (the select keeps z * scale - shift from contracting to an fma)
        z = tl.where(whole, z.to(ACC_DTYPE) * scale, float("-inf"))
        p = tl.exp2(z - shift_3) * inverse_3
        inside = mask_h_3 & (groups >= start_3) & (groups + GROUP <= end_3)
        tl.store(out_3 + offs * stride_oe, p.to(out.dtype.element_ty), mask=inside)
    ze, edge_offs, edge_store = _edges(
        values, start, end, first, mask_h, scale, stride_ve, ACC_DTYPE, INDEX, GROUP, EDGE,
        PER_HEAD,
    )  # fmt: skip
    pe = tl.exp2(ze - shift) * inverse
    tl.store(out + edge_offs * stride_oe, pe.to(out.dtype.element_ty), mask=edge_store)


@triton.jit
def _3d(x, PER_HEAD: tl.constexpr):
    """A (heads, 1) tensor as (heads, 1, 1) with PER_HEAD; a scalar as it is."""
    if PER_HEAD:  # noqa: SIM108 (a constexpr branch: Triton compiles one side)
        x = x[:, :, None]
    return x


@triton.jit
def head_phases(
    heads, batch, nnz, stride_vb, stride_ob, end, INDEX: tl.constexpr, ALIGN: tl.constexpr
):
    """Each head's phase (where its matrix starts within a group of ALIGN entries, the same in
    both arrays), the heads' bases moved back to their groups (multiples of ALIGN as Triton
    sees them: vectors), and whether the last head's groups end within the array as its entries
    do (then every head's do)."""
    at_v = heads * stride_vb
    base_v = at_v // ALIGN * ALIGN  # (Triton infers the divisibility: multiple_of on a tensor
    phase = at_v - base_v  # of one head failed its coalescing pass, Triton 3.6)
    base_o = heads * stride_ob // ALIGN * ALIGN  # (the same phase: strides equal modulo ALIGN)
    phase = phase.to(INDEX)
    last_phase = ((batch - 1).to(tl.int64) * stride_vb % ALIGN).to(INDEX)
    inside = (end + last_phase + ALIGN - 1) // ALIGN * ALIGN <= nnz + last_phase
    return phase, base_v, base_o, inside


@triton.jit
def read_phased(
    values, out, start, end, lanes, heads, mask_h, scale, batch, nnz, stride_vb, stride_ob,
    stride_ve, stride_oe, ACC_DTYPE: tl.constexpr, INDEX: tl.constexpr, BLOCK: tl.constexpr,
    TAIL: tl.constexpr, ALIGN: tl.constexpr, EDGE: tl.constexpr,
):  # fmt: skip
    """The row read in groups when each head's matrix starts `phase` entries past a group (a
    batch stride that is no multiple of 16 entries: Triton cannot see its matrices aligned,
    e.g. a contiguous (heads, nnz) array at nnz % 8 != 0): each head's base moved back to its
    group, its row `phase` entries further in, both arrays alike (their strides equal modulo
    ALIGN). Whether it was taken: its groups must fit the lanes for every head, and the last
    head's reach the array's end no further than the entries already do."""
    phase, base_v, base_o, inside = head_phases(
        heads, batch, nnz, stride_vb, stride_ob, end, INDEX, ALIGN
    )
    start_h = start + phase
    fits = (end - start) + tl.max(start_h % ALIGN, axis=0) <= BLOCK + TAIL
    if fits & inside:
        read_in_groups(
            values + base_v[:, None], out + base_o[:, None], start_h[:, None],
            (end + phase)[:, None], lanes, mask_h, scale, stride_ve, stride_oe, ACC_DTYPE, INDEX,
            BLOCK, TAIL, ALIGN, EDGE, True,
        )  # fmt: skip
    return fits & inside
