"""NMMatrix: a weight with exactly n kept of every m consecutive elements along its columns.

Layout (PyTorch's (out_features, in_features) weight layout, groups along in_features):
- `vector` consecutive rows share one choice (element-wise 1, vector-wise 4..128);
- `block` consecutive columns move together (block-wise): kept elements come in aligned runs of
  `block` columns, so each group keeps n / block of its m / block blocks.

Storage:
- `values` (rows, groups * n): the kept values of each row, group by group, in column order;
- `indices` uint8 (ceil(rows / vector), groups * n / block): the kept block of each slot as an
  offset within its group (0 .. m / block - 1), strictly increasing within a group.
`packed_indices()` gives the same offsets in ceil(log2(m / block)) bits each, which is what a
memory-bound kernel should read.
"""

from __future__ import annotations

import math

import torch

from .. import _checks
from .._cache_mode import derived, untraced_version, version
from . import _values_state, semi_structured
from ._pattern import Pattern, column_dtype_for, index_dtype_for


class NMMatrix:
    """Example:
    >>> w = torch.tensor([[0.0, 1.0, 0.0, 2.0], [3.0, 0.0, 0.0, 4.0]])
    >>> W = NMMatrix.from_dense(w, n=2, m=4)
    >>> W.indices.tolist(), W.values.tolist()
    ([[1, 3], [0, 3]], [[1.0, 2.0], [3.0, 4.0]])
    """

    def __init__(
        self,
        values: torch.Tensor,
        indices: torch.Tensor,
        shape: tuple[int, int],
        n: int,
        m: int,
        vector: int = 1,
        block: int = 1,
        *,
        check: bool = True,
    ):
        shape = _checks.shape2d("shape", shape)
        n, m, vector, block = check_pattern_args(shape, n, m, vector, block)
        self.shape, self.n, self.m, self.vector, self.block = shape, n, m, vector, block
        if check:
            _validate(values, indices, shape, n, m, vector, block)
        self._values = values
        self._indices = indices
        self._indices_at = untraced_version(indices)  # (an in-place edit since: checked again)
        self._cache: dict[str, object] = {}

    def __getstate__(self) -> dict:
        """Pickled (torch.save of a layer too) without what is derived: it holds a weak
        reference (cuSPARSELt's packed weight), and is remade on use; its indices are checked
        again at their first use."""
        return {**self.__dict__, "_cache": {}, "_indices_at": None}

    __setstate__ = _values_state.set_state

    @property
    def values(self) -> torch.Tensor:
        """(rows, groups * n), the kept values row by row. Assigning checks the new tensor's
        shape, dtype and device, as the constructor does: a wrong size would be misread."""
        return self._values

    @values.setter
    def values(self, values: torch.Tensor) -> None:
        _check_values(values, self.shape, self.n, self.m)
        if values.device != self.indices.device:
            raise ValueError(
                f"values must be on the indices' device {self.indices.device}, got {values.device}"
            )
        self._values = values

    @property
    def indices(self) -> torch.Tensor:
        """(ceil(rows / vector), groups * n / block) uint8: each kept value's (or block's)
        offset in its group. Assigning checks the new tensor as the constructor does: an
        offset past its group would be read past B's rows."""
        return self._indices

    @indices.setter
    def indices(self, indices: torch.Tensor) -> None:
        _check_indices(indices, self.shape, self.n, self.m, self.vector, self.block,
                       self._values.device)  # fmt: skip
        self._indices = indices
        self._indices_at = untraced_version(indices)

    # ----------------------------------------------------------------- properties
    @property
    def groups(self) -> int:
        return self.shape[1] // self.m

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    @property
    def nnz(self) -> int:
        return self.values.numel()

    @property
    def density(self) -> float:
        return self.n / self.m

    @property
    def pattern_name(self) -> str:
        extra = "".join(f",{k}={v}" for k, v in (("v", self.vector), ("b", self.block)) if v != 1)
        return f"{self.n}:{self.m}{extra}"

    @property
    def index_bits(self) -> int:
        """Bits that hold one block offset within a group."""
        return max(1, math.ceil(math.log2(self.m // self.block)))

    @property
    def nbytes(self) -> int:
        """Bytes of values plus bit-packed indices."""
        index_bytes = math.ceil(self.indices.numel() * self.index_bits / 8)
        return self.values.numel() * self.values.element_size() + index_bytes

    def __repr__(self) -> str:
        return (
            f"NMMatrix(shape={self.shape}, pattern={self.pattern_name}, "
            f"dtype={self.dtype}, device={self.device})"
        )

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_dense(
        cls,
        dense: torch.Tensor,
        n: int,
        m: int,
        vector: int = 1,
        block: int = 1,
        mask: torch.Tensor | None = None,
    ) -> NMMatrix:
        """Compress a dense weight that already follows the n:m pattern.

        The kept positions are the nonzeros (or `mask`, so kept zeros stay kept, and the matrix
        is dense * mask); groups with fewer than n / block active blocks are completed with the
        first inactive ones (zeros). A group with more raises a ValueError saying where.
        """
        _checks.tensor("dense", dense)
        _checks.ndim("dense", dense, [2])
        _checks.float_dtype("dense", dense)
        _checks.has_data("dense", dense)
        shape = tuple(dense.shape)
        n, m, vector, block = check_pattern_args(shape, n, m, vector, block)
        if mask is None:
            active = dense != 0
        else:
            _checks.tensor("mask", mask)
            _checks.has_data("mask", mask)
            if mask.shape != dense.shape:
                raise ValueError(f"mask must have dense's shape {shape}, got {tuple(mask.shape)}")
            active = mask.to(device=dense.device, dtype=torch.bool)
        rows, cols = shape
        row_groups, blocks_per_group, kept_blocks = -(-rows // vector), m // block, n // block
        padded = active.new_zeros(row_groups * vector, cols)
        padded[:rows] = active
        blocks = padded.view(row_groups, vector, cols // m, blocks_per_group, block).any(4).any(1)
        counts = blocks.sum(-1)
        if counts.numel() and int(counts.max()) > kept_blocks:
            g, k = (int(i) for i in (counts > kept_blocks).nonzero()[0])
            kind = "nonzero" if mask is None else "kept"  # (the mask's, when one is given)
            unit = f"{kind} positions" if block == 1 else f"{kind} blocks of {block} columns"
            raise ValueError(
                f"{'dense' if mask is None else 'mask'} breaks the {n}:{m} pattern "
                f"(vector={vector}, block={block}): rows "
                f"{g * vector}..{min(rows, (g + 1) * vector) - 1}, "
                f"columns {k * m}..{k * m + m - 1} "
                f"hold {int(counts[g, k])} {unit} where at most {kept_blocks} may be kept"
            )
        # Active blocks first, then the lowest inactive ones; kept in ascending order.
        position = torch.arange(blocks_per_group, device=dense.device)
        score = blocks.long() * blocks_per_group - position
        chosen = score.topk(kept_blocks, dim=-1).indices.sort(-1).values
        indices = chosen.reshape(row_groups, cols // m * kept_blocks).to(torch.uint8)
        matrix = cls(dense.new_zeros(0), indices, shape, n, m, vector, block, check=False)
        # Slots past a group's masked positions (fillers, a vector's other rows, a block's
        # other columns) hold zeros: the matrix is dense * mask, as CSRMatrix.from_dense's.
        source = dense if mask is None else dense.masked_fill(~active, 0)
        matrix.values = source.gather(1, matrix.column_indices())
        return matrix

    def with_values(self, values: torch.Tensor) -> NMMatrix:
        """The same pattern with other values (rows, groups * n)."""
        _check_values(values, self.shape, self.n, self.m)
        if values.device != self.indices.device:
            raise ValueError(f"values must be on {self.indices.device}, got {values.device}")
        matrix = NMMatrix(
            values, self.indices, self.shape, self.n, self.m, self.vector, self.block, check=False
        )
        matrix._cache = self._cache
        return matrix

    # ----------------------------------------------------------------- derived (cached)
    def column_indices(self) -> torch.Tensor:
        """The column of every stored value, (rows, groups * n) int64. Built each call, not
        kept: at 8 bytes a stored value it would hold 2.7x the weight (2:8, bf16)."""
        return nm_columns(self.indices, self.shape[0], self.n, self.m, self.vector, self.block)

    def csr_pattern(self) -> Pattern:
        """This pattern as CSR (every row holds groups * n entries, already sorted)."""

        def build() -> Pattern:
            rows, cols = self.shape
            per_row = self.groups * self.n
            offsets = torch.arange(rows + 1, device=self.indices.device) * per_row
            return Pattern(
                offsets.to(index_dtype_for(rows * per_row)),
                self.column_indices().reshape(-1).to(column_dtype_for(cols)),
                self.shape,
            )

        return derived(self._cache, "csr", build, self.indices)  # type: ignore[return-value]

    def packed_indices(self, bits: int | None = None) -> torch.Tensor:
        """Indices packed `bits` each (default `index_bits`) into int32 words, 32 // bits a
        word, little end first, per row group. The decode kernel asks for a power of two."""
        bits = self.index_bits if bits is None else bits
        if not _checks.is_int(bits) or not self.index_bits <= bits <= 8:
            raise ValueError(f"bits must be an int from {self.index_bits} to 8, got {bits!r}")
        bits = int(bits)  # (one cache key for 4 and np.int64(4))
        key, build = f"packed{bits}", lambda: pack_offsets(self.indices, bits)
        return derived(self._cache, key, build, self.indices)  # type: ignore[return-value]

    # ----------------------------------------------------------------- conversion
    def to_csr(self):
        """The same matrix as a CSRMatrix (values shared, differentiable)."""
        from .csr import CSRMatrix

        return CSRMatrix._from_pattern(self.csr_pattern(), self.values.reshape(-1), check=False)

    def to_dense(self) -> torch.Tensor:
        """Dense (rows, cols); differentiable in the values."""
        out = self.values.new_zeros(self.shape)
        return out.scatter(1, self.column_indices(), self.values)

    def to_semi_structured(self) -> torch.Tensor:
        """This 2:4 weight as torch's semi-structured tensor (cuSPARSELt, or CUTLASS when torch is
        told to): CUDA, fp16/bf16, rows and columns multiples of 16; a ValueError says what is
        off. Not differentiable; `F.linear(x, W.to_semi_structured())` runs torch's 2:4 matmul."""
        return semi_structured.to_semi_structured(self)

    @classmethod
    def from_semi_structured(cls, t: torch.Tensor) -> NMMatrix:
        """The 2:4 NMMatrix of a torch semi-structured tensor, on its device (see
        `formats/semi_structured.py`: a cuSPARSELt tensor is read back on its GPU)."""
        return semi_structured.from_semi_structured(t)

    def to(self, device=None, dtype: torch.dtype | None = None) -> NMMatrix:
        if isinstance(device, torch.dtype):  # (.to(torch.float16), as tensors and modules take)
            if dtype is not None:
                raise TypeError(f"dtype given twice: {device} and {dtype}")
            device, dtype = None, device
        if device is not None:
            device = _checks.device("device", device)
        if dtype is not None and dtype not in _checks.FLOAT_DTYPES:
            raise TypeError(f"dtype must be a floating dtype, got {dtype}")
        values = self.values.to(device=device, dtype=dtype)
        matrix = NMMatrix(
            values,
            self.indices.to(values.device),
            self.shape,
            self.n,
            self.m,
            self.vector,
            self.block,
            check=False,
        )
        if values.device == self.device:
            matrix._cache = self._cache
        return matrix

    def cuda(self) -> NMMatrix:
        return self.to(device="cuda")

    def cpu(self) -> NMMatrix:
        return self.to(device="cpu")


def pack_offsets(indices: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 offsets (rows, slots) -> int32 words (rows, ceil(slots / (32 // bits))), `bits`
    each, little end first; a word never splits an offset."""
    per_word = 32 // bits
    idx = indices.long()
    pad = (-idx.shape[1]) % per_word
    words_per_row = (idx.shape[1] + pad) // per_word
    idx = torch.nn.functional.pad(idx, (0, pad)).view(idx.shape[0], words_per_row, per_word)
    shifts = torch.arange(per_word, device=idx.device) * bits
    words = (idx << shifts).sum(-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def nm_columns(
    indices: torch.Tensor,
    rows: int,
    n: int,
    m: int,
    vector: int,
    block: int,
    dtype: torch.dtype = torch.int64,
) -> torch.Tensor:
    """The column of every stored value, (rows, groups * n) of `dtype` (int64: what indexing
    takes; int32 for torch's CSR tensors), from the uint8 block offsets: a widening copy, an
    in-place add of the group starts, and for vector-wise rows one expanding copy (fewer passes
    than repeat_interleave's, which took 2-4x as long)."""
    kept = n // block
    vector_rows = indices.shape[0]
    groups = indices.shape[1] // kept if kept else 0
    device = indices.device
    columns = indices.reshape(vector_rows, groups, kept).to(dtype, copy=True)  # added to below
    if block > 1:  # each kept block's columns
        within = torch.arange(block, device=device, dtype=dtype)
        columns = (columns * block)[..., None] + within
    columns = columns.view(vector_rows, groups, n)
    columns += torch.arange(groups, device=device, dtype=dtype)[:, None] * m  # group starts
    columns = columns.view(vector_rows, 1, groups * n).expand(vector_rows, vector, groups * n)
    return columns.reshape(vector_rows * vector, groups * n)[:rows]


def check_pattern_args(shape: tuple[int, int], n, m, vector, block) -> tuple[int, int, int, int]:
    """n:m, vector and block must describe a pattern that fits `shape`; returns (n, m, vector,
    block) as Python ints (NumPy integers converted)."""
    m = _checks.positive_int("m", m, minimum=2)
    n = _checks.positive_int("n", n)
    vector = _checks.positive_int("vector", vector)
    block = _checks.positive_int("block", block)
    if m > 256:
        raise ValueError(f"m must be at most 256, got {m}")
    if n >= m:
        raise ValueError(f"n must be smaller than m, got n={n}, m={m}")
    if n % block or m % block:
        raise ValueError(f"block must divide both n and m, got block={block} for {n}:{m}")
    if shape[1] % m:
        raise ValueError(
            f"the reduction dimension (columns, in_features) {shape[1]} must be a multiple of m={m}"
        )
    return n, m, vector, block


def _check_values(values, shape, n, m) -> None:
    _checks.tensor("values", values)
    _checks.float_dtype("values", values)
    want = (shape[0], shape[1] // m * n)
    if tuple(values.shape) != want:
        raise ValueError(
            f"values must have shape {want} for {n}:{m} and shape {shape}, "
            f"got {tuple(values.shape)}"
        )


def check_current(W: NMMatrix, name: str = "W") -> None:
    """Raise a ValueError naming `name` where W no longer holds what was validated when it was
    built: values of another shape set behind the `values` setter (`.data`, `resize_`), or its
    indices edited in place since (they may be the caller's own tensor: checked again, once an
    edit). The kernels would read past the values' rows, or past B's."""
    want = (W.shape[0], W.shape[1] // W.m * W.n)
    if tuple(W._values.shape) != want:
        raise ValueError(
            f"{name}.values must have shape {want} for {W.n}:{W.m} and shape {W.shape}, got "
            f"{tuple(W._values.shape)} (set behind the values setter?)"
        )
    if torch.compiler.is_compiling():
        return
    now = version(W._indices)
    if now is None or now == getattr(W, "_indices_at", None):
        return
    try:
        _check_indices(W._indices, W.shape, W.n, W.m, W.vector, W.block, W._values.device)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{name}'s indices changed after it was built: {error}") from None
    W._indices_at = now


def _validate(values, indices, shape, n, m, vector, block) -> None:
    _check_values(values, shape, n, m)
    _check_indices(indices, shape, n, m, vector, block, values.device)


def _check_indices(indices, shape, n, m, vector, block, device) -> None:
    _checks.tensor("indices", indices)
    if indices.dtype != torch.uint8:
        raise TypeError(f"indices must be uint8, got {indices.dtype}")
    kept = n // block
    want = (-(-shape[0] // vector), shape[1] // m * kept)
    if tuple(indices.shape) != want:
        raise ValueError(f"indices must have shape {want}, got {tuple(indices.shape)}")
    if indices.device != device:
        raise ValueError(f"indices must be on values' device {device}, got {indices.device}")
    _checks.has_data("indices", indices)
    if indices.numel():
        grouped = indices.long().view(want[0], -1, kept)
        if int(grouped.max()) >= m // block:
            raise ValueError(f"indices must be block offsets below m / block = {m // block}")
        if kept > 1 and bool((grouped.diff(dim=-1) <= 0).any()):
            raise ValueError("indices must be strictly increasing within each group")
