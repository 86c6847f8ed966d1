"""Fused block-sparse attention (flash style), forward and backward, over a block layout.

The layout (formats/_block_layout.py) lists, per component, the (BLOCK_M queries x BLOCK_N keys)
tiles to visit: a block-CSR by query tile (forward, dQ) and by key tile (dK, dV), a bit mask for
tiles not full, and optionally an order of queries (row_perm) and keys (col_perm) the component's
tile positions index. Scores are S = scale * Q K^T on tensor cores (fp32 accumulation), kept
in log2 units (times log2 e) so exp2 serves; masked positions are -inf.

- `_attn_fwd_kernel`: one program per (query tile, batch * head): online softmax over the tile
  row's key tiles, then O = acc / l and LSE = m + log2(l) (log2 units). With MERGE it starts from
  the (O, LSE) an earlier component wrote (O in fp32), so components combine exactly. With
  STORE_FINAL (the last component's pass) O goes to `final` in its dtype instead of `out`, which
  is then only read: no separate fp32 -> fp16/bf16 copy. A query with no keys gets O = 0 and
  LSE = -inf.
- `_attn_bwd_dkdv_kernel`: one program per (key tile, batch * head), over the query tiles of its
  key tile: P = exp2(S - LSE), dV += P^T dO, dS = P (dO V^T - delta), dK += dS^T Q.
- `_attn_bwd_dq_kernel`: one program per (query tile, batch * head): dQ += dS K.
  delta = rowsum(dO * O) comes from the caller. With ACCUMULATE both add to what is there.

Tensors: q (B, H, Lq, D), k (B, H, Lk, D), v (B, H, Lk, DV), out, final and d_out
(B, H, Lq, DV), any strides (passed per dimension; final's unused without STORE_FINAL); lse and
delta (B * H, Lq) fp32 contiguous; dq, dk, dv like q, k, v. Layout arrays are int32 and
contiguous. A masked-out position inside a visited tile still multiplies its V row (and K row
in dQ) by zero: a NaN or Inf there reaches the query's output, unlike the composed sparse path.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._sizes import next_power_of_2

LOG2E = 1.4426950408889634


@triton.jit
def _tile_mask(
    words, mask_id, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WORD_BITS: tl.constexpr
):
    """(BLOCK_M, BLOCK_N) bool: the stored positions of partial tile `mask_id`.

    Built from one (BLOCK_M,) load per word column and broadcasts, so the bits are made in the
    layout of the scores they mask (the MMA's). A 2-D load of the words took a shared-memory
    round trip to it every step, and Triton then reduced the scores in two layouts: the forward's
    loop ran 981 instructions and 200 registers, now 485 and 113 (sm90_compile_stats.py)."""
    WORDS: tl.constexpr = BLOCK_N // WORD_BITS
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    row_words = words + mask_id.to(tl.int64) * (BLOCK_M * WORDS) + r * WORDS
    w = tl.load(row_words)[:, None] + tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for j in tl.static_range(1, WORDS):
        w = tl.where((c // WORD_BITS)[None, :] == j, tl.load(row_words + j)[:, None], w)
    return ((w >> (c % WORD_BITS)[None, :]) & 1) != 0


@triton.jit
def _tile_mask_t(
    words, mask_id, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WORD_BITS: tl.constexpr
):
    """(BLOCK_N, BLOCK_M) bool: `_tile_mask` transposed, built the same way."""
    WORDS: tl.constexpr = BLOCK_N // WORD_BITS
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    row_words = words + mask_id.to(tl.int64) * (BLOCK_M * WORDS) + r * WORDS
    w = tl.load(row_words)[None, :] + tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.int32)
    for j in tl.static_range(1, WORDS):
        w = tl.where((c // WORD_BITS)[:, None] == j, tl.load(row_words + j)[None, :], w)
    return ((w >> (c % WORD_BITS)[:, None]) & 1) != 0


@triton.jit
def _positions(perm, tile, length, BLOCK: tl.constexpr, PERM: tl.constexpr):
    """The rows (int64) at the tile's positions, and which positions lie inside `length`."""
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    valid = offs < length
    if PERM:  # noqa: SIM108 (a constexpr branch)
        idx = tl.load(perm + offs, mask=valid, other=0).to(tl.int64)
    else:
        idx = offs.to(tl.int64)
    return idx, valid


@triton.jit
def _attn_fwd_kernel(
    q,
    k,
    v,
    out,
    final,
    lse,
    row_perm,
    col_perm,
    offsets,
    cols,
    masks,
    words,
    H,
    Lq,
    Lk,
    D,
    DV,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_ob,
    stride_oh,
    stride_om,
    stride_od,
    stride_fb,
    stride_fh,
    stride_fm,
    stride_fd,
    scale_log2e,
    ROW_PERM: tl.constexpr,
    COL_PERM: tl.constexpr,
    MERGE: tl.constexpr,
    STORE_FINAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    WORD_BITS: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,  # the CPU interpreter miscomputes bf16 tl.dot (triton 3.9): use fp32
):
    qt = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    q += b * stride_qb + h * stride_qh
    k += b * stride_kb + h * stride_kh
    v += b * stride_vb + h * stride_vh
    out += b * stride_ob + h * stride_oh
    final += b * stride_fb + h * stride_fh
    lse += bh.to(tl.int64) * Lq

    rows, valid_m = _positions(row_perm, qt, Lq, BLOCK_M, ROW_PERM)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    mask_d = offs_d < D
    mask_dv = offs_dv < DV
    q_tile = tl.load(
        q + rows[:, None] * stride_qm + offs_d[None, :] * stride_qd,
        mask=valid_m[:, None] & mask_d[None, :],
        other=0.0,
    )
    if UPCAST:
        q_tile = q_tile.to(tl.float32)
    o_ptrs = out + rows[:, None] * stride_om + offs_dv[None, :] * stride_od
    o_mask = valid_m[:, None] & mask_dv[None, :]
    if MERGE:  # continue the softmax an earlier component left: sum exp2(s - lse) = 1
        m_i = tl.load(lse + rows, mask=valid_m, other=float("-inf"))
        l_i = tl.where(m_i == float("-inf"), 0.0, 1.0)
        acc = tl.load(o_ptrs, mask=o_mask, other=0.0).to(tl.float32)
    else:
        m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
        l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_DV), dtype=tl.float32)

    start = tl.load(offsets + qt)
    end = tl.load(offsets + qt + 1)
    for e in range(start, end):
        kt = tl.load(cols + e)
        mask_id = tl.load(masks + e)
        keys, valid_n = _positions(col_perm, kt, Lk, BLOCK_N, COL_PERM)
        k_tile = tl.load(
            k + keys[None, :] * stride_kn + offs_d[:, None] * stride_kd,
            mask=valid_n[None, :] & mask_d[:, None],
            other=0.0,
        )
        v_tile = tl.load(
            v + keys[:, None] * stride_vn + offs_dv[None, :] * stride_vd,
            mask=valid_n[:, None] & mask_dv[None, :],
            other=0.0,
        )
        if UPCAST:
            k_tile = k_tile.to(tl.float32)
        s = tl.dot(q_tile, k_tile, input_precision=PRECISION) * scale_log2e
        if mask_id >= 0:
            s = tl.where(_tile_mask(words, mask_id, BLOCK_M, BLOCK_N, WORD_BITS), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        p = p.to(v_tile.dtype)
        if UPCAST:
            p = p.to(tl.float32)
            v_tile = v_tile.to(tl.float32)
        acc = tl.dot(p, v_tile, acc * alpha[:, None], input_precision=PRECISION)
        m_i = m_new

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    o = acc / l_safe[:, None]
    if STORE_FINAL:  # rounded to nearest even as torch's .to (on the GPU; the interpreter
        # truncates to bf16), so the fused conversion gives the former copy's bits
        f_ptrs = final + rows[:, None] * stride_fm + offs_dv[None, :] * stride_fd
        tl.store(f_ptrs, o.to(final.dtype.element_ty), mask=o_mask)
    else:
        tl.store(o_ptrs, o.to(out.dtype.element_ty), mask=o_mask)
    tl.store(lse + rows, tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe)), mask=valid_m)


def _strides4(t: torch.Tensor) -> tuple[int, int, int, int]:
    return tuple(t.stride())


def _dot_flags(q: torch.Tensor) -> dict:
    upcast = q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16)
    precision = "ieee" if q.dtype == torch.float32 or upcast else "tf32"
    return {"PRECISION": precision, "UPCAST": upcast}


def _blocks(q, v, block_m, block_n) -> dict:
    return {
        "BLOCK_M": block_m,
        "BLOCK_N": block_n,
        "BLOCK_D": max(16, next_power_of_2(q.shape[-1])),
        "BLOCK_DV": max(16, next_power_of_2(v.shape[-1])),
        "WORD_BITS": min(32, block_n),
    }


def _component_args(component: list[torch.Tensor]):
    row_perm, col_perm = component[0], component[1]
    flags = {"ROW_PERM": row_perm.numel() > 0, "COL_PERM": col_perm.numel() > 0}
    # an unused perm still needs a valid pointer
    return (
        row_perm if flags["ROW_PERM"] else component[2],
        (col_perm if flags["COL_PERM"] else component[2]),
        flags,
    )


def block_attention_forward(
    *,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    component: list[torch.Tensor],
    merge: bool,
    final: torch.Tensor | None = None,
    scale: float,
    block_m: int,
    block_n: int,
    num_warps: int,
    num_stages: int,
    maxnreg: int | None = None,
):
    """One component's pass: out (B, H, Lq, DV) and lse (B * H, Lq) fp32, written (or merged into
    when `merge`: then out must be fp32 and hold the earlier components' result). With `final`
    (like out, any dtype and strides) the output is stored there instead and out only read.
    `maxnreg` caps the registers a thread (more programs an SM); returns the launched kernel."""
    batch, heads, lq, d = q.shape
    lk, dv = k.shape[2], v.shape[3]
    row_perm, col_perm, flags = _component_args(component)
    offsets, cols, masks, words = component[2], component[3], component[4], component[8]
    grid = (offsets.numel() - 1, batch * heads)
    store_final = final is not None
    final = final if store_final else out  # an unused pointer must still be valid
    options = {} if maxnreg is None else {"maxnreg": maxnreg}
    return _attn_fwd_kernel[grid](
        q, k, v, out, final, lse, row_perm, col_perm, offsets, cols, masks, words,
        heads, lq, lk, d, dv,
        *_strides4(q), *_strides4(k), *_strides4(v), *_strides4(out), *_strides4(final),
        scale * LOG2E,
        MERGE=merge, STORE_FINAL=store_final,
        **flags, **_blocks(q, v, block_m, block_n), **_dot_flags(q),
        num_warps=num_warps, num_stages=num_stages, **options,
    )  # fmt: skip


def log2_lse_to_natural(lse: torch.Tensor) -> torch.Tensor:
    """The kernels' LSE is in log2 units of the scaled scores; this is log(sum exp(scale s))."""
    return lse * math.log(2.0)
