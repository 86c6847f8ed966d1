"""The CSR line layout (formats/_line_layout.py): every stored entry lands once in a line of its
row at base + offset with its value, the padding holds zeros, no line spans more than 255
columns or crosses a row, and a pattern the span cuts too often is refused."""

import pytest
import torch

import sparsekernels as sk
from _helpers import random_csr
from sparsekernels.formats._line_layout import ALIGN, LINE, LINES, SPAN, build


def _unpacked(layout, values, shape):
    """The dense matrix the layout and its packed values describe (float64)."""
    slots, line = layout.row_slots.long(), layout.line
    assert (slots % line == 0).all() and (slots.diff() >= 0).all()
    lines_per_row = slots.diff() // line
    listed = torch.arange(shape[0]) if layout.row_sequence is None else layout.row_sequence
    line_rows = torch.repeat_interleave(listed.long(), lines_per_row)
    columns = layout.bases().repeat_interleave(line) + layout.offsets.long()
    dense = torch.zeros(shape, dtype=torch.float64)
    dense.index_put_((line_rows.repeat_interleave(line), columns), values.double(),
                     accumulate=True)  # fmt: skip
    return dense


@pytest.mark.parametrize("line", LINES)
@pytest.mark.parametrize(
    "M, K, density",
    [(7, 300, 0.3), (64, 4096, 0.3), (33, 1000, 0.05), (300, 1, 0.5), (5, 40000, 0.5),
     (1, 777, 0.9), (200, 2048, 0.7)],
)  # fmt: skip
def test_round_trip(M, K, density, line, gen):
    A = random_csr(M, K, density, gen, torch.float64, "cpu")
    layout = build(A.row_offsets, A.column_indices, K, most_slots=1000.0, line=line)
    LINE = layout.line
    packed = layout.pack(A.values)
    assert packed.shape == (layout.lines * LINE,) and layout.offsets.dtype == torch.uint8
    assert torch.equal(_unpacked(layout, packed, (M, K)), A.to_dense())
    source = layout.source()
    held = source >= 0
    assert torch.equal(source[held].sort().values, torch.arange(A.nnz))  # each once
    assert (packed[~held] == 0).all() and (layout.offsets[~held] == 0).all()
    # a line's columns rise from its base within the span, its first slot always held
    offsets = layout.offsets.view(-1, LINE).long()
    assert held.view(-1, LINE)[:, 0].all() and (offsets[:, 0] == 0).all()
    assert torch.equal(held.view(-1, LINE).sum(1), layout.held())  # held slots come first
    assert torch.equal(held.view(-1, LINE), torch.arange(LINE) < layout.held()[:, None])
    assert (offsets <= SPAN).all()


@pytest.mark.parametrize("M, K, density", [(50, 700, 0.3), (9, 3000, 0.05), (1, 200, 0.5)])
def test_rows_listed_in_a_sequence(M, K, density, gen):
    """Built with a row sequence (a shuffled permutation, empty rows among it), the rows'
    lines are stored in that order, row_slots indexed by place, and the matrix is the same."""
    A = random_csr(M, K, density, gen, torch.float64, "cpu")
    sequence = torch.randperm(M, generator=gen).to(torch.int32)
    layout = build(A.row_offsets, A.column_indices, K, most_slots=1000.0, row_sequence=sequence)
    assert layout.row_sequence is sequence
    assert torch.equal(_unpacked(layout, layout.pack(A.values), (M, K)), A.to_dense())
    natural = build(A.row_offsets, A.column_indices, K, most_slots=1000.0)
    lines = natural.row_slots.long().diff()
    assert torch.equal(layout.row_slots.long().diff(), lines[sequence.long()])
    first = natural.row_slots.long()[sequence[0].long()] // LINE  # the first listed row's lines
    count = int(lines[sequence[0].long()]) // LINE
    assert torch.equal(layout.heads[:count], natural.heads[first : first + count])


def test_lines_break_at_rows_at_64_and_at_the_span():
    """Row 0: 130 adjacent columns (lines of 64, 64, 2); row 1 empty; row 2: columns 0, 255,
    256 (a new line at 256, 256 past the base); row 3: one entry."""
    mask = torch.zeros(4, 1000, dtype=torch.bool)
    mask[0, :130] = True
    mask[2, [0, 255, 256]] = True
    mask[3, 999] = True
    A = sk.CSRMatrix.from_dense(torch.arange(1, 4001.0).view(4, 1000) * mask, mask=mask)
    layout = build(A.row_offsets, A.column_indices, 1000, most_slots=100.0)
    assert layout.row_slots.tolist() == [0, 192, 192, 320, 384]
    assert layout.bases().tolist() == [0, 64, 128, 0, 256, 999]
    assert layout.held().tolist() == [64, 64, 2, 2, 1, 1]
    assert layout.offsets.view(-1, LINE)[3, :3].tolist() == [0, 255, 0]


def test_refused_past_most_slots(gen):
    A = random_csr(40, 4000, 0.02, gen, torch.float32, "cpu")  # ~80 columns apart: cut lines
    assert build(A.row_offsets, A.column_indices, 4000, most_slots=1.5) is None
    assert build(A.row_offsets, A.column_indices, 4000, most_slots=100.0) is not None


def test_short_lines_hold_a_sparser_pattern(gen):
    """At 90% 64 entries span past 255 columns (lines cut: ~2.5 slots an entry); 16-slot lines
    span ~160 and hold it in few slots. A line length outside LINES is refused."""
    A = random_csr(64, 4096, 0.1, gen, torch.float32, "cpu", empty_rows=False)
    assert build(A.row_offsets, A.column_indices, 4096, most_slots=1.25) is None
    short = build(A.row_offsets, A.column_indices, 4096, most_slots=1.25, line=16)
    assert short.line == 16 and short.lines * 16 < 1.1 * A.nnz
    assert torch.equal(_unpacked(short, short.pack(A.values), (64, 4096)), A.to_dense().double())
    with pytest.raises(ValueError, match="line"):
        build(A.row_offsets, A.column_indices, 4096, most_slots=1.25, line=32)


def test_empty_pattern():
    A = sk.CSRMatrix.from_dense(torch.zeros(3, 10))
    layout = build(A.row_offsets, A.column_indices, 10, most_slots=2.0)
    assert layout.lines == 0 and layout.row_slots.tolist() == [0, 0, 0, 0]
    assert layout.pack(A.values).numel() == 0


def test_refused_past_a_heads_24_bits():
    offsets, columns = torch.tensor([0, 2]), torch.tensor([0, 2**24])
    assert build(offsets, columns, 2**24 + 1, most_slots=100.0) is None
    assert build(offsets, columns - 1 + torch.tensor([1, 0]), 2**24, 100.0) is not None


def test_the_layout_costs_about_a_byte_an_entry(gen):
    """A 70%-sparse pattern's layout (offsets, heads, per-line starts, row slots) holds ~1.2
    bytes a stored entry beside the packed values: nothing a slot wider than its offset."""
    A = random_csr(256, 4096, 0.3, gen, torch.float32, "cpu")
    layout = build(A.row_offsets, A.column_indices, 4096, most_slots=1.25)
    held = [layout.row_slots, layout.heads, layout.offsets, layout.starts]
    assert sum(t.numel() * t.element_size() for t in held) < 1.3 * A.nnz


@pytest.mark.parametrize("line", LINES)
@pytest.mark.parametrize(
    "M, K, density",
    [(7, 300, 0.3), (64, 4096, 0.3), (33, 1000, 0.05), (300, 1, 0.5), (1, 777, 0.9),
     (200, 2048, 0.7), (3, 50, 0.1)],
)  # fmt: skip
def test_in_place_windows(M, K, density, line, gen):
    """An in-place layout holds the pattern like any layout; a line read in place starts at a
    multiple of ALIGN and its `line` slots end inside the values, slot s being entry start +
    s; the others are numbered in order for pack_rest, which holds their packed values. On
    dense-enough rows about one line a row is not read in place (a row's first, where the row
    starts off the alignment)."""
    A = random_csr(M, K, density, gen, torch.float64, "cpu")
    layout = build(A.row_offsets, A.column_indices, K, most_slots=1000.0, line=line,
                   in_place=True)  # fmt: skip
    assert layout.in_place and layout.entries == A.nnz
    packed = layout.pack(A.values)
    assert torch.equal(_unpacked(layout, packed, (M, K)), A.to_dense())
    source = layout.source().view(-1, line)
    held = source >= 0
    assert torch.equal(source[held].sort().values, torch.arange(A.nnz))  # each once
    windows, starts = layout.windows.long(), layout.starts.long()
    read = windows >= 0
    assert torch.equal(windows[read], starts[read]) and (starts[read] % ALIGN == 0).all()
    assert (starts[read] + line <= A.nnz).all()
    assert torch.equal(-1 - windows[~read], torch.arange(int((~read).sum())))
    assert layout.rest_lines == int((~read).sum())
    assert torch.equal(layout.pack_rest(A.values), packed.view(-1, line)[~read].reshape(-1))
    if density >= 0.3 and K >= 2048:
        assert layout.rest_lines <= 1.2 * M
