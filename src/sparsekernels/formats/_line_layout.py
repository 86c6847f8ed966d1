"""A CSR pattern packed into lines of 64 entries with one base column and a byte a column.

At one token a CSR product moves each stored entry's value and column once, so the column's
bytes are a third to a half of the traffic (int16 or int32 beside a 16-bit value). A 70%
sparse row's neighbouring entries are ~3.3 columns apart, so 64 of them span ~210 columns:
storing each line's first column once and every entry's column as a uint8 offset from it
takes 3.06 bytes an entry with a 16-bit value instead of 4 (or 6). Decoding is one add an
entry (no prefix sum over deltas). Lines never cross rows: each row's entries are cut into
lines of at most 64, a line also ending before an entry more than 255 columns past its base,
and every line is padded to 64 slots (zero values, offset 0). A line's head (one int32) holds
its base column (low 24 bits: up to 2**24 columns) and how many of its slots are held (high
8): a kernel masks the padding by it, so x's value at the base (inf, say) never meets a 0.
On 70%-sparse random rows of 4096 columns that is ~2.7% more slots; at 90% the lines are
mostly cut by the span (~2.5x the slots), and `build` gives up past `most_slots` a kept entry.
Shorter lines (`line` 16: ~160 columns at 90%) are cut rarely there, for a head every 16
entries (3.25 bytes an entry with a 16-bit value, against CSR's 4 with int16 columns).

An `in_place` layout lets a kernel read the CSR's own values instead of a packed copy (2 bytes
an entry less held). Slot s of a line is then CSR entry `window + s`, where the window starts
at the line's first entry rounded down to a multiple of ALIGN (so a slot's value loads as part
of an aligned 16-byte vector): the line's entries sit at slots lead .. end, lead = first entry
% ALIGN (0-7), and the head's high byte holds `end` (lead + entries) instead of the count. A
line whose window passes the last entry (only the last rows': `exact_from`) must be read slot
by slot, masked to its entries.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._pattern import index_dtype_for

LINE = 64  # entries a line (a layout's `line`: LINE or SHORT_LINE)
SHORT_LINE = 16  # for sparser rows, whose 64 entries span past SPAN
LINES = (LINE, SHORT_LINE)
SPAN = 255  # the farthest column a line's uint8 offset reaches from its base
HEAD_BASE = (1 << 24) - 1  # a head's base column bits
ALIGN = 8  # an in-place layout's windows start at multiples of this entry (16 bytes of bf16)


@dataclass(frozen=True)
class LineLayout:
    """Row r's slots are row_slots[r] .. row_slots[r + 1] (whole lines; with a row_sequence,
    row_sequence[p]'s are row_slots[p] .. row_slots[p + 1]); line i holds slots
    i * line .. (i + 1) * line of `offsets`, its slots lead .. heads[i] >> 24 the entries at
    columns (heads[i] & HEAD_BASE) + offsets (lead 0, or in_place: starts[i] % ALIGN)."""

    row_slots: torch.Tensor  # (M + 1,) int32 (int64 past 2**31 slots)
    heads: torch.Tensor  # (lines,) int32: base column | held slots << 24
    offsets: torch.Tensor  # (lines * line,) uint8: column - base (0 in padding)
    # (lines,) int32 (int64 past 2**31 entries): the CSR entry a line's first held slot holds
    # (its held slots hold the ones after it): a line's worth of bytes, where a slot's own
    # would double the layout's size
    starts: torch.Tensor
    # Rows in the order their slots are listed (row_slots[p] .. [p + 1] are row_sequence[p]'s),
    # or None: row r's slots at row_slots[r].
    row_sequence: torch.Tensor | None = None
    line: int = LINE  # slots a line (LINES)
    # Slot s of line i is CSR entry starts[i] // ALIGN * ALIGN + s (the module's docstring)
    in_place: bool = False
    # in_place: the first row (by index) with a line whose window passes the last entry; the
    # rows from it on are read slot by slot (`rows` where there is none)
    exact_from: int = 0
    entries: int = 0  # the CSR's stored entries

    @property
    def lines(self) -> int:
        return self.heads.numel()

    def bases(self) -> torch.Tensor:
        """Each line's base column (lines,), int64."""
        return self.heads.long() & HEAD_BASE

    def held(self) -> torch.Tensor:
        """Each line's end slot (lines,), int64: its held slots, past its lead."""
        return self.heads.long() >> 24

    def leads(self) -> torch.Tensor:
        """Each line's first held slot (lines,), int64: 0 unless in_place."""
        starts = self.starts.long()
        return starts % ALIGN if self.in_place else torch.zeros_like(starts)

    def source(self) -> torch.Tensor:
        """The CSR entry each slot holds (lines * line,), int64, -1 in the padding."""
        slot = torch.arange(self.line, device=self.starts.device)[None, :]
        leads = self.leads()[:, None]
        entries = self.starts.long()[:, None] - leads + slot
        held = (slot >= leads) & (slot < self.held()[:, None])
        return torch.where(held, entries, -1).reshape(-1)

    def pack(self, values: torch.Tensor) -> torch.Tensor:
        """The CSR values (nnz,) in slot order (lines * line,), zero in the padding."""
        source = self.source()
        held = source >= 0
        packed = values.new_zeros(source.shape)
        packed[held] = values[source[held]]
        return packed


def build(
    row_offsets: torch.Tensor,
    column_indices: torch.Tensor,
    columns: int,
    most_slots: float,
    row_sequence: torch.Tensor | None = None,
    line: int = LINE,
    in_place: bool = False,
) -> LineLayout | None:
    """The line layout of a CSR pattern (columns strictly increasing within rows), or None when
    it would hold more than `most_slots` slots a stored entry (the span cuts too many lines) or
    its columns pass a head's 24 bits. Every row's next line is found at once, an iteration a
    line of the longest row. With `row_sequence` (a permutation of the rows: the order a kernel
    visits them), the rows' lines are stored in that order, so programs that run together read
    neighbouring memory. `line`: slots a line, one of LINES. `in_place`: windows of the CSR's
    own values (the module's docstring); a line then holds up to `line` - lead entries."""
    if line not in LINES:
        raise ValueError(f"line must be one of {LINES}, got {line}")
    if columns > HEAD_BASE + 1:
        return None
    device = row_offsets.device
    offsets = row_offsets.to(torch.int64)
    rows, nnz = offsets.numel() - 1, column_indices.numel()
    cols = column_indices.to(torch.int64)
    lengths = offsets.diff()
    # A key that grows along the whole array and jumps more than SPAN between rows: the end of
    # a line's reach is one searchsorted over every row at once.
    width = columns + SPAN + 1
    keys = torch.repeat_interleave(torch.arange(rows, device=device) * width, lengths,
                                   output_size=nnz) + cols  # fmt: skip
    limit = most_slots * max(nnz, 1) / line
    line_rows, line_starts, line_counts = [], [], []
    row = torch.arange(rows, device=device)[lengths > 0]
    start, row_end = offsets[:-1][lengths > 0], offsets[1:][lengths > 0]
    found = 0
    while row.numel():
        reach = torch.searchsorted(keys, keys[start] + SPAN, right=True)
        room = line - start % ALIGN if in_place else line
        end = torch.minimum(torch.minimum(reach, start + room), row_end)
        line_rows.append(row)
        line_starts.append(start)
        line_counts.append(end - start)
        found += row.numel()
        if found > limit:
            return None
        going = end < row_end
        row, start, row_end = row[going], end[going], row_end[going]
    if found == 0:
        return _empty(rows, device, row_sequence, line, in_place, nnz)
    line_rows_all = torch.cat(line_rows)
    exact_from = rows
    if in_place:  # the rows of lines whose window passes the last entry
        line_starts_all = torch.cat(line_starts)
        past = line_starts_all - line_starts_all % ALIGN + line > nnz
        if past.any():
            exact_from = int(line_rows_all[past].min())
    if row_sequence is not None:  # each line's row by its place in the sequence
        place = torch.empty(rows, dtype=torch.int64, device=device)
        place[row_sequence.long()] = torch.arange(rows, device=device)
        line_rows_all = place[line_rows_all]
    # A row's lines were found in order: a stable sort by row puts them in place.
    order = torch.argsort(line_rows_all, stable=True)
    starts = torch.cat(line_starts)[order]
    counts = torch.cat(line_counts)[order]
    per_row = torch.bincount(line_rows_all, minlength=rows)
    row_slots = torch.zeros(rows + 1, dtype=torch.int64, device=device)
    row_slots[1:] = per_row.cumsum(0) * line
    slot = torch.arange(line, device=device)[None, :]
    leads = (starts % ALIGN if in_place else torch.zeros_like(starts))[:, None]
    ends = leads[:, 0] + counts
    held = (slot >= leads) & (slot < ends[:, None])
    source = torch.where(held, starts[:, None] - leads + slot, -1).reshape(-1)
    bases = cols[starts]
    offsets_of = torch.where(held.reshape(-1), cols[source.clamp(min=0)] - bases.repeat_interleave(
        line), 0)  # fmt: skip
    return LineLayout(
        row_slots=row_slots.to(index_dtype_for(int(row_slots[-1]))),
        heads=(bases | ends << 24).to(torch.int32),
        offsets=offsets_of.to(torch.uint8),
        starts=starts.to(index_dtype_for(nnz + line)),  # (a window's last slot too)
        row_sequence=row_sequence,
        line=line,
        in_place=in_place,
        exact_from=exact_from,
        entries=nnz,
    )


def _empty(rows: int, device: torch.device, row_sequence=None, line: int = LINE,
           in_place: bool = False, entries: int = 0) -> LineLayout:  # fmt: skip
    return LineLayout(
        row_slots=torch.zeros(rows + 1, dtype=torch.int32, device=device),
        heads=torch.zeros(0, dtype=torch.int32, device=device),
        offsets=torch.zeros(0, dtype=torch.uint8, device=device),
        starts=torch.zeros(0, dtype=torch.int32, device=device),
        row_sequence=row_sequence,
        line=line,
        in_place=in_place,
        exact_from=rows,
        entries=entries,
    )
