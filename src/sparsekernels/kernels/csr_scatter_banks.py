"""Where each entry goes in its tile's run, so that the scatter kernels' shared stores meet few
bank conflicts (kernels/spmm_csr_scatter.py, spmm_csr_scatter_slices.py).

A thread loads 4 entries of a run (16 bytes), so a warp's store instruction (b, j) writes the
run's places 128 b + 4 lane + j; its shared-memory wavefronts are the most distinct 4-byte
words any one bank receives among those 32 (lanes writing the two halves of one word cost
one). Three orders, as wavefronts a store over the 64 x 64 tiles of a magnitude-pruned 4096 x
4096 weight (scatter_bank_stats below; the ideal is 1; builds on a 2-core CPU 0.1-2.3 s):

| order  | 50%  | 70%  | 90%  | 95%  |
|--------|------|------|------|------|
| plain (row, column) | 2.98 | 3.14 | 3.02 | 3.07 |
| spread | 1.57 | 1.84 | 1.82 | 2.13 |
| greedy | 1.00 | 1.03 | 1.26 | 1.49 |

`spread` took the scatter kernel 5-10% faster than plain at 70% (at-5bed061), where a store
hit 3.2 words a bank (ncu, at-35aed1b). `greedy` (the default since the sixty-sixth session,
untimed: `csr_scatter_cold.py`'s "/sp" forms compare) stores 44% fewer wavefronts again at
70%: a 64 x 64 step's ~338 shared wavefronts (results/cpu/2026-12-06-csr-scatter-analysis)
lose 33, at 90% 9 of ~266.
"""

from __future__ import annotations

import torch

BANK_ORDERS = ("greedy", "spread", "plain")


def placed_runs(tile_of, place, packed, counts, offsets, banks: str) -> torch.Tensor:
    """The entries vector (offsets[-1],) int32: run t's packed entries from offsets[t] on, in
    the order `banks` names (greedy_bank_places, spread_bank_order, or row and column order:
    "plain"), -1 (place 0xFFFF: skipped) after them. `place` is each entry's byte place in
    its shared tile (bank (place >> 2) % 32)."""
    if banks not in BANK_ORDERS:
        raise ValueError(f"banks must be one of {BANK_ORDERS}, got {banks!r}")
    entries = torch.full((int(offsets[-1]),), -1, dtype=torch.int32, device=packed.device)
    if banks == "greedy":
        in_run = greedy_bank_places(tile_of, place >> 2, counts)
        entries[offsets[:-1][tile_of.long()] + in_run] = packed
        return entries
    if banks == "spread":
        order = spread_bank_order(tile_of, (place >> 2) & 31, counts)
    else:
        order = torch.argsort(tile_of, stable=True)
    shift = offsets[:-1] - (counts.cumsum(0) - counts)  # a run's padded start less its packed one
    at = torch.arange(tile_of.numel(), device=packed.device) + shift[tile_of[order].long()]
    entries[at] = packed[order]
    return entries


def spread_bank_order(tile_of, bank, counts) -> torch.Tensor:
    """The entries' order in the runs (each tile's run together) that puts the entries one
    store instruction of a warp writes into different banks where it can: a tile's entries
    sorted by bank are dealt lane by lane (lane 0 takes the first c_0 of them, one for each
    (b, j) of its places, then lane 1...), so one store's lanes hold entries about n / 32
    apart in bank order: different banks unless a bank holds more than its share."""
    by_bank = torch.argsort(tile_of.long() * 32 + bank, stable=True)
    tile_sorted = tile_of[by_bank].long()
    firsts = (counts.cumsum(0) - counts)[tile_sorted]
    place = torch.arange(tile_of.numel(), device=tile_of.device) - firsts  # in its run
    n = counts[tile_sorted]
    lane, k = place % 128 // 4, place // 128 * 4 + place % 4
    # lane l's places come after those of lanes 0..l-1: 4 (n // 128) l + min(n % 128, 4 l)
    rank = n // 128 * 4 * lane + torch.minimum(n % 128, 4 * lane) + k
    return by_bank[firsts + rank]


def greedy_bank_places(tile_of: torch.Tensor, word: torch.Tensor, counts: torch.Tensor):
    """Each entry's place in its tile's run (the runs as tiled_entries lays them: unpadded
    length counts[t], entries first), dealt store by store: a store's lanes take one word (an
    entry, or the two entries sharing a 4-byte word) from each of the banks with the most
    words left, as many as its lanes hold; lanes still free take single entries, from banks
    the store has not used first. `word` is an entry's 4-byte word in the shared tile (bank
    word % 32). All tiles at once: a loop over the longest run's stores."""
    device = tile_of.device
    t, w = tile_of.long(), word.long()
    group_of = t * 32 + w % 32  # (tile, bank)
    tiles, nnz = counts.numel(), t.numel()
    order = torch.argsort(group_of * (1 << 20) + w, stable=True)  # words < 2^14
    sizes = torch.bincount(group_of, minlength=tiles * 32)
    starts = sizes.cumsum(0) - sizes
    sorted_word, sorted_group = w[order], group_of[order]
    new_word = torch.ones(nnz + 1, dtype=torch.long, device=device)  # (a zero past the end)
    new_word[1:-1] = (sorted_word[1:] != sorted_word[:-1]) | (sorted_group[1:] != sorted_group[:-1])
    new_word[-1] = 0
    pair_next = torch.zeros(nnz + 1, dtype=torch.bool, device=device)  # entry i and i + 1 share
    pair_next[:-1] = new_word[1:] == 0
    pair_next[nnz - 1] = False
    words_to_end = new_word.flip(0).cumsum(0).flip(0)  # word starts from position i on
    ends = starts + sizes
    taken = torch.zeros(tiles * 32, dtype=torch.long, device=device)
    # each store marks where its share of a (tile, bank)'s sorted entries begins
    first_of_store = torch.full((nnz,), -1, dtype=torch.int32, device=device)
    n = counts.long()
    stores = int((n.max() + 127) // 128 * 4) if nnz else 0
    for s in range(stores):
        lanes = ((n - 128 * (s // 4) - s % 4 + 3) // 4).clamp(0, 32)  # store (s // 4, s % 4)
        at = (starts + taken).clamp(max=nnz)
        has = (taken < sizes).view(tiles, 32)
        words_left = torch.where(has, (words_to_end[at] - words_to_end[ends]).view(tiles, 32), 0)
        offer = torch.where(has, 1 + pair_next[at].view(tiles, 32).long(), 0)
        _, by_words = words_left.sort(dim=1, descending=True, stable=True)
        offered = offer.gather(1, by_words)
        grab = torch.where((offered > 0) & (offered.cumsum(1) <= lanes[:, None]), offered, 0)
        got = torch.zeros_like(offer).scatter_(1, by_words, grab)
        left = lanes - grab.sum(1)
        while bool(left.any()):  # lanes a pair did not fit: single entries
            remaining = sizes.view(tiles, 32) - taken.view(tiles, 32) - got > 0
            key = torch.where(remaining, (got > 0).long() * 2**15 - words_left, 2**16)
            _, by_key = key.sort(dim=1, stable=True)
            free = remaining.gather(1, by_key)
            single = free & (free.cumsum(1) <= left[:, None])
            got.scatter_add_(1, by_key, single.long())
            left -= single.sum(1)
        got = got.view(-1)
        first_of_store[at[got > 0]] = s
        taken += got
    del sorted_word, sorted_group, new_word, pair_next, words_to_end  # (nnz each: free them)
    # a sorted entry's store: the mark at or before it (a group's first entry is always marked)
    marked = torch.where(first_of_store >= 0, torch.arange(nnz, device=device), -1)
    store = torch.empty_like(t)
    store[order] = first_of_store[marked.cummax(0).values].long()
    del marked, first_of_store
    # lanes: a store's entries in (bank, word) order
    slot = t * stores + store
    by_store = torch.argsort((slot * 32 + w % 32) * (1 << 14) + w, stable=True)
    in_store = torch.bincount(slot, minlength=tiles * stores)
    lane = torch.empty_like(t)
    lane[by_store] = (
        torch.arange(nnz, device=device) - (in_store.cumsum(0) - in_store)[slot[by_store]]
    )
    return 128 * (store // 4) + 4 * lane + store % 4


def scatter_bank_stats(tile_offsets: torch.Tensor, entries: torch.Tensor) -> float:
    """Mean over a run's store instructions of the most distinct 4-byte words one bank
    receives (the store's wavefronts): store (b, j) writes places 128 b + 4 lane + j."""
    offsets, device = tile_offsets.long(), entries.device
    lengths = offsets.diff()
    tile_of = torch.repeat_interleave(torch.arange(lengths.numel(), device=device), lengths)
    position = torch.arange(entries.numel(), device=device) - offsets[:-1][tile_of]
    store = tile_of * 8192 + position // 128 * 4 + position % 4  # (runs under 2^15 entries)
    places = (entries.long() >> 16) & 0xFFFF
    word = places >> 2
    stored = places != 0xFFFF
    if not stored.any():
        return 0.0
    words = torch.unique(((store * 32 + word % 32) * (1 << 14) + word)[stored])
    banks, per_bank = torch.unique(words >> 14, return_counts=True)
    stores, store_of = torch.unique(banks // 32, return_inverse=True)
    most = torch.zeros(stores.numel(), dtype=torch.long, device=device)
    most.scatter_reduce_(0, store_of, per_bank, reduce="amax")
    return float(most.double().mean())
