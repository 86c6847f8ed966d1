"""The block layout of an attention pattern: which (BLOCK_M x BLOCK_N) tiles a fused kernel visits.

A pattern (Lq, Lk) is cut into tiles of BLOCK_M queries x BLOCK_N keys. A tile holding any stored
entry is visited; a tile whose BLOCK_M * BLOCK_N positions are all stored is *full* and needs no
mask; the others carry a bit mask of their stored positions (padding past Lq or Lk is never
stored, so every edge tile is partial).

Patterns such as the Sparse Transformer's strided one touch every causal tile with a single
diagonal of entries. So the entries may be split into two *components*, each visited in its
own order of queries and keys:
- the first in natural order, holding the tiles at least `split_fill` full;
- the rest's entries on the diagonals i - j = 0 mod g (g the most common gap between the rest's
  offsets |i - j|), with queries and keys both ordered by position modulo g: keys i - g,
  i - 2g, ... of query i then land in one dense tile row; or the rest's entries in columns
  shared by many queries (fixed "summary" columns), with those columns moved to the front.
The builder keeps whichever choice visits the fewest tiles. Every entry lies in exactly one
component, so the fused kernel merges the components' partial softmaxes exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class BlockComponent:
    """One pass of the fused kernel over a subset of the entries, in its own query/key order.

    row_perm (Lq,) / col_perm (Lk,) int32: the query / key at each position of this order
    (None: natural order). Tiles index positions in that order.
    offsets (n_query_tiles + 1,) int32, cols (tiles,) int32, masks (tiles,) int32: a block-CSR of
    the visited tiles by query tile; masks[t] is the tile's row in `words`, or -1 when full.
    t_offsets (n_key_tiles + 1,), t_rows (tiles,), t_masks (tiles,): the same tiles by key tile.
    words (partial tiles, BLOCK_M, words per row) int32: bit c % WORD_BITS of word c // WORD_BITS
    of row r says whether position (r, c) of the tile is stored.
    """

    row_perm: torch.Tensor | None
    col_perm: torch.Tensor | None
    offsets: torch.Tensor
    cols: torch.Tensor
    masks: torch.Tensor
    t_offsets: torch.Tensor
    t_rows: torch.Tensor
    t_masks: torch.Tensor
    words: torch.Tensor

    @property
    def tiles(self) -> int:
        return self.cols.numel()

    @property
    def partial(self) -> int:
        return self.words.shape[0]

    def tensors(self) -> list[torch.Tensor]:
        """The component as tensors (an empty tensor for a natural order)."""
        empty = self.offsets.new_empty(0)
        return [
            empty if self.row_perm is None else self.row_perm,
            empty if self.col_perm is None else self.col_perm,
            self.offsets,
            self.cols,
            self.masks,
            self.t_offsets,
            self.t_rows,
            self.t_masks,
            self.words,
        ]


TENSORS_PER_COMPONENT = 9


@dataclass(frozen=True)
class BlockLayout:
    block_m: int
    block_n: int
    shape: tuple[int, int]
    nnz: int
    components: tuple[BlockComponent, ...]

    @property
    def tiles(self) -> int:
        return sum(c.tiles for c in self.components)

    @property
    def fill(self) -> float:
        """Stored entries per visited tile position: 1.0 when every visited tile is full."""
        area = self.tiles * self.block_m * self.block_n
        return self.nnz / area if area else 1.0

    def tensors(self) -> list[torch.Tensor]:
        return [t for c in self.components for t in c.tensors()]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors())


def word_bits(block_n: int) -> int:
    """Bits used per int32 mask word: 32, or the whole tile row when it is narrower."""
    return min(32, block_n)


def build(
    rows: torch.Tensor,
    cols: torch.Tensor,
    shape: tuple[int, int],
    block_m: int,
    block_n: int,
    split_fill: float,
) -> BlockLayout:
    """The layout of the entries (rows[e], cols[e]) of a (Lq, Lk) pattern (no duplicates)."""
    rows, cols = rows.long(), cols.long()
    lq, lk = shape
    best = (_component(rows, cols, None, None, shape, block_m, block_n),)
    n_key_tiles = -(-lk // block_n)
    if rows.numel() and split_fill > 0:
        tile = (rows // block_m) * n_key_tiles + cols // block_n
        _, inverse, counts = _unique(tile, -(-lq // block_m) * n_key_tiles)
        sparse = counts[inverse] < split_fill * block_m * block_n
        for tail, row_perm, col_perm in _splits(rows, cols, sparse, shape, block_m):
            head = ~tail
            p_rows = rows[tail] if row_perm is None else _inverse(row_perm)[rows[tail]]
            p_cols = cols[tail] if col_perm is None else _inverse(col_perm)[cols[tail]]
            split = (
                _component(rows[head], cols[head], None, None, shape, block_m, block_n),
                _component(p_rows, p_cols, row_perm, col_perm, shape, block_m, block_n),
            )
            if sum(c.tiles for c in split) < sum(c.tiles for c in best):
                best = split
    return BlockLayout(block_m, block_n, shape, rows.numel(), best)


def _splits(rows, cols, sparse, shape, block_m):
    """Candidate second passes (which entries, row order, column order), taken from the entries
    of sparse tiles (`sparse`): those on the period's diagonals, or those in heavy columns."""
    lq, lk = shape
    if not sparse.any():
        return
    offsets = (rows - cols).abs()
    present, _, _ = _unique(offsets[sparse], max(lq, lk))
    period = _period(present)
    if period >= 2:  # keys i - g, i - 2g, ... of query i become neighbours
        tail = sparse & (offsets % period == 0)
        yield tail, _residue_order(lq, period, rows.device), _residue_order(lk, period, rows.device)
    heavy = torch.bincount(cols[sparse], minlength=lk) >= max(2, block_m // 2)
    if heavy.any() and int(heavy.sum()) <= lk // 2:  # few keys shared by many queries
        tail = sparse & heavy[cols]
        order = torch.cat([heavy.nonzero()[:, 0], (~heavy).nonzero()[:, 0]])
        yield tail, None, order.to(torch.int32)


def _period(offsets: torch.Tensor) -> int:
    """The most common gap between consecutive distinct offsets |i - j| (sorted ascending)."""
    if offsets.numel() == 1:
        return int(offsets[0])
    if offsets.numel() == 0:
        return 0
    return int(torch.bincount(offsets.diff()).argmax())


_BINCOUNT_MAX = 1 << 26


def _unique(values: torch.Tensor, bound: int):
    """torch.unique(values, return_inverse, return_counts) for values in [0, bound): a bincount
    when the range is small (sorting millions of entries is slow on a CPU)."""
    if bound > _BINCOUNT_MAX:
        return torch.unique(values, return_inverse=True, return_counts=True)
    counts = torch.bincount(values, minlength=bound)
    present = counts > 0
    rank = torch.cumsum(present.long(), 0) - 1
    return present.nonzero()[:, 0], rank[values], counts[present]


def _residue_order(length: int, period: int, device) -> torch.Tensor:
    """Positions ordered by (position mod period, position)."""
    i = torch.arange(length, device=device)
    return torch.argsort((i % period) * length + i).to(torch.int32)


def _inverse(perm: torch.Tensor) -> torch.Tensor:
    inv = torch.empty(perm.numel(), dtype=torch.int64, device=perm.device)
    inv[perm.long()] = torch.arange(perm.numel(), device=perm.device)
    return inv


def _component(rows, cols, row_perm, col_perm, shape, block_m, block_n) -> BlockComponent:
    """Block-CSR (and its transpose) of the entries at positions (rows, cols) of one order."""
    lq, lk = shape
    device = rows.device
    n_q, n_k = -(-lq // block_m), -(-lk // block_n)
    tile = (rows // block_m) * n_k + cols // block_n
    ids, inverse, counts = _unique(tile, n_q * n_k)
    q_of, k_of = ids // n_k, ids % n_k
    full = counts == block_m * block_n
    partial_index = torch.cumsum((~full).long(), 0) - 1
    masks = torch.where(full, -1, partial_index)

    bits = word_bits(block_n)
    per_row = block_n // bits
    n_partial = int((~full).sum())
    words = torch.zeros(n_partial * block_m * per_row, dtype=torch.int64, device=device)
    in_partial = ~full[inverse]
    if in_partial.any():
        r, c = rows[in_partial] % block_m, cols[in_partial] % block_n
        word = (masks[inverse[in_partial]] * block_m + r) * per_row + c // bits
        words.scatter_add_(0, word, torch.ones_like(c) << (c % bits))  # distinct bits: add = or
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)

    offsets = _offsets(q_of, n_q, device)
    order = torch.argsort(k_of * max(n_q, 1) + q_of)
    return BlockComponent(
        row_perm=row_perm,
        col_perm=col_perm,
        offsets=offsets,
        cols=k_of.to(torch.int32),
        masks=masks.to(torch.int32),
        t_offsets=_offsets(k_of, n_k, device),
        t_rows=q_of[order].to(torch.int32),
        t_masks=masks[order].to(torch.int32),
        words=words.view(n_partial, block_m, per_row),
    )


def _offsets(owner: torch.Tensor, n: int, device) -> torch.Tensor:
    offsets = torch.zeros(n + 1, dtype=torch.int64, device=device)
    offsets[1:] = torch.cumsum(torch.bincount(owner, minlength=n), 0)
    return offsets.to(torch.int32)


def to_dense_mask(layout: BlockLayout) -> torch.Tensor:
    """(Lq, Lk) bool: the positions the layout's tiles keep (a test and reference helper)."""
    lq, lk = layout.shape
    bm, bn = layout.block_m, layout.block_n
    bits = word_bits(bn)
    keep = torch.zeros(lq, lk, dtype=torch.bool)
    r_in, c_in = torch.arange(bm), torch.arange(bn)
    for comp in layout.components:
        comp = BlockComponent(*(None if t is None else t.cpu() for t in comp.__dict__.values()))
        row_perm = torch.arange(lq) if comp.row_perm is None else comp.row_perm.long()
        col_perm = torch.arange(lk) if comp.col_perm is None else comp.col_perm.long()
        n_q = comp.offsets.numel() - 1
        for qt in range(n_q):
            for e in range(int(comp.offsets[qt]), int(comp.offsets[qt + 1])):
                kt, m = int(comp.cols[e]), int(comp.masks[e])
                pr, pc = qt * bm + r_in, kt * bn + c_in
                if m < 0:
                    tile = torch.ones(bm, bn, dtype=torch.bool)
                else:
                    w = comp.words[m].long()[:, c_in // bits]
                    tile = ((w >> (c_in % bits)) & 1).bool()
                ok = (pr < lq)[:, None] & (pc < lk)[None, :]
                assert not (tile & ~ok).any(), "a tile keeps a position past the pattern"
                rr, cc = torch.nonzero(tile & ok, as_tuple=True)
                spot = (row_perm[pr[rr]], col_perm[pc[cc]])
                assert not keep[spot].any(), "an entry lies in two tiles"
                keep[spot] = True
    return keep
