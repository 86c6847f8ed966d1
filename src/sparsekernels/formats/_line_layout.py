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
an entry less held). Its lines are cut so that most start at an entry that is a multiple of
ALIGN (a row's first line holds up to `line` - first % ALIGN entries; a line the span cuts
ends at such an entry where it can): such a line whose `line` slots end inside the values is
read in place, slot s being CSR entry start + s (an aligned 16-byte vector of values; the
slots past its entries hold the next row's, masked). The rest (a row's first line where the
row starts off the alignment, lines after an unaligned cut, and the last lines of all) have
their values in a small packed copy, `pack_rest` (~a line a row). `windows` tells a kernel
which: an in-place line's start, or -1 - its index in that copy.
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
    i * line .. (i + 1) * line of `offsets`, its first heads[i] >> 24 of them the entries at
    columns (heads[i] & HEAD_BASE) + offsets."""

    row_slots: torch.Tensor  # (M + 1,) int32 (int64 past 2**31 slots)
    heads: torch.Tensor  # (lines,) int32: base column | held slots << 24
    offsets: torch.Tensor  # (lines * line,) uint8: column - base (0 in padding)
    # (lines,) int32 (int64 past 2**31 entries): the CSR entry a line's first slot holds (its
    # held slots hold the ones after it): a line's worth of bytes, where a slot's own would
    # double the layout's size
    starts: torch.Tensor
    # Rows in the order their slots are listed (row_slots[p] .. [p + 1] are row_sequence[p]'s),
    # or None: row r's slots at row_slots[r].
    row_sequence: torch.Tensor | None = None
    line: int = LINE  # slots a line (LINES)
    # in_place: (lines,) like starts: a line read in place, its start (a multiple of ALIGN);
    # else -1 - its index among the lines pack_rest copies (the module's docstring)
    windows: torch.Tensor | None = None
    entries: int = 0  # the CSR's stored entries (in_place: the values a kernel reads)
    rest_lines: int = 0  # in_place: the lines not read in place (pack_rest's)

    @property
    def lines(self) -> int:
        return self.heads.numel()

    @property
    def in_place(self) -> bool:
        return self.windows is not None

    def bases(self) -> torch.Tensor:
        """Each line's base column (lines,), int64."""
        return self.heads.long() & HEAD_BASE

    def held(self) -> torch.Tensor:
        """Each line's held slots (lines,), int64."""
        return self.heads.long() >> 24

    def source(self, lines: torch.Tensor | None = None) -> torch.Tensor:
        """The CSR entry each slot holds (lines * line,), int64, -1 in the padding; of the
        lines at indices `lines` only, if given."""
        slot = torch.arange(self.line, device=self.starts.device)
        starts, held = self.starts.long(), self.held()
        if lines is not None:
            starts, held = starts[lines], held[lines]
        entries = starts[:, None] + slot[None, :]
        return torch.where(slot[None, :] < held[:, None], entries, -1).reshape(-1)

    def pack(self, values: torch.Tensor) -> torch.Tensor:
        """The CSR values (nnz,) in slot order (lines * line,), zero in the padding."""
        return _gathered(values, self.source())

    def pack_rest(self, values: torch.Tensor) -> torch.Tensor:
        """An in-place layout's lines not read in place: their values in slot order (zero in
        the padding), in the order `windows` numbers them."""
        if self.windows is None:
            raise ValueError("pack_rest needs an in-place layout (build(in_place=True))")
        rest = torch.nonzero(self.windows < 0).reshape(-1)
        return _gathered(values, self.source(rest))


def _gathered(values: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
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
    neighbouring memory. `line`: slots a line, one of LINES. `in_place`: lines cut for reading
    the CSR's own values, with their `windows` (the module's docstring)."""
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
        room = line - start % ALIGN if in_place else line  # (the next line starts aligned)
        end = torch.minimum(torch.minimum(reach, start + room), row_end)
        if in_place:  # a line the span cuts ends at an aligned entry where one lies past its start
            aligned = end - end % ALIGN
            end = torch.where((end == reach) & (end < row_end) & (aligned > start), aligned, end)
        line_rows.append(row)
        line_starts.append(start)
        line_counts.append(end - start)
        found += row.numel()
        if found > limit:
            return None
        going = end < row_end
        row, start, row_end = row[going], end[going], row_end[going]
    if found == 0:
        return _empty(rows, device, row_sequence, line, in_place)
    line_rows_all = torch.cat(line_rows)
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
    slot = torch.arange(line, device=device)
    source = starts[:, None] + slot[None, :]
    held = slot[None, :] < counts[:, None]
    source = torch.where(held, source, -1).reshape(-1)
    bases = cols[starts]
    offsets_of = torch.where(held.reshape(-1), cols[source.clamp(min=0)] - bases.repeat_interleave(
        line), 0)  # fmt: skip
    index = index_dtype_for(nnz + line)
    windows, rest_lines = None, 0
    if in_place:  # aligned lines whose slots end inside the values are read there
        read = (starts % ALIGN == 0) & (starts + line <= nnz)
        windows = torch.where(read, starts, -torch.cumsum(~read, 0)).to(index)
        rest_lines = int((~read).sum())
    return LineLayout(
        row_slots=row_slots.to(index_dtype_for(int(row_slots[-1]))),
        heads=(bases | counts << 24).to(torch.int32),
        offsets=offsets_of.to(torch.uint8),
        starts=starts.to(index),
        row_sequence=row_sequence,
        line=line,
        windows=windows,
        entries=nnz,
        rest_lines=rest_lines,
    )


def _empty(rows: int, device: torch.device, row_sequence=None, line: int = LINE,
           in_place: bool = False) -> LineLayout:  # fmt: skip
    none = torch.zeros(0, dtype=torch.int32, device=device)
    return LineLayout(
        row_slots=torch.zeros(rows + 1, dtype=torch.int32, device=device),
        heads=none,
        offsets=torch.zeros(0, dtype=torch.uint8, device=device),
        starts=none,
        row_sequence=row_sequence,
        line=line,
        windows=none if in_place else None,
    )
