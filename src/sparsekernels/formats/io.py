"""Reading and writing sparse matrices: DLMC's .smtx text files and safetensors files.

A truncated or corrupted file raises a ValueError naming the file and what is wrong; it never
yields a wrong matrix (every structure read back is validated by the format's constructor).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from .. import _checks
from .csr import CSRMatrix
from .nm import NMMatrix


def load_smtx(
    path: str | Path,
    values: torch.Tensor | None = None,
    *,
    dtype: torch.dtype | None = None,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> CSRMatrix:
    """Read a DLMC .smtx pattern; values are given (nnz,) or drawn from N(0, 1) with `seed`,
    in `dtype` (default: the given values' dtype, else float32)."""
    if dtype is not None and dtype not in _checks.FLOAT_DTYPES:  # (the caller's, not the file's)
        raise TypeError(f"dtype must be float16, bfloat16, float32 or float64, got {dtype}")
    if values is not None:
        _checks.tensor("values", values)
        _checks.float_dtype("values", values)
        _checks.has_data("values", values)
    if not _checks.is_int(seed):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    seed = int(seed)
    device = _checks.device("device", device)
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not an .smtx text file (not UTF-8 text)") from None
    except OSError as error:  # (missing, a folder, unreadable: as load_safetensors says it)
        raise ValueError(f"path {str(path)!r} cannot be read: {error.strerror or error}") from None
    if len(lines) < 2:
        raise ValueError(
            f"{path}: an .smtx file needs a header and row offsets, found {len(lines)} line(s)"
        )
    fields = lines[0].split(",")
    header = _ints(path, "header (rows, cols, nnz)", " ".join(fields))
    if header.size != 3 or len(fields) != 3:
        raise ValueError(f"{path}: header must be 'rows, cols, nnz', got {lines[0]!r}")
    rows, cols, nnz = (int(v) for v in header)
    if min(rows, cols, nnz) < 0:
        raise ValueError(f"{path}: header's rows, cols and nnz must be >= 0, got {lines[0]!r}")
    extra = next((i for i, line in enumerate(lines[3:], 4) if line.strip()), None)
    if extra is not None:
        held = lines[extra - 1][:40]
        raise ValueError(f"{path}: an .smtx file has three lines; line {extra} holds {held!r}")
    offsets = _ints(path, "row offsets", lines[1])
    columns = _ints(path, "column indices", lines[2] if len(lines) > 2 else "")
    if offsets.size != rows + 1:
        raise ValueError(
            f"{path}: expected {rows + 1} row offsets, found {offsets.size} (truncated?)"
        )
    if columns.size != nnz:
        raise ValueError(
            f"{path}: expected {nnz} column indices, found {columns.size} (truncated?)"
        )
    if values is not None and tuple(values.shape) != (nnz,):
        raise ValueError(f"values must have shape ({nnz},): one a stored entry of {path}, got "
                         f"{tuple(values.shape)}")  # fmt: skip
    if values is None:
        generator = torch.Generator().manual_seed(seed)
        values = torch.randn(nnz, generator=generator, dtype=torch.float32)
    try:
        return CSRMatrix(
            torch.from_numpy(offsets).to(device),
            torch.from_numpy(columns).to(device),
            values.to(device=device, dtype=values.dtype if dtype is None else dtype),
            (rows, cols),
        )
    except (ValueError, TypeError) as error:
        raise ValueError(f"{path}: not a valid sparse matrix: {error}") from None


def save_smtx(matrix: CSRMatrix, path: str | Path) -> None:
    """Write the pattern of `matrix` as .smtx (the format holds no values)."""
    if not isinstance(matrix, CSRMatrix):
        raise TypeError(f"matrix must be a CSRMatrix, got {type(matrix).__name__}")
    rows, cols = matrix.shape
    offsets = " ".join(map(str, matrix.row_offsets.tolist()))
    columns = " ".join(map(str, matrix.column_indices.tolist()))
    Path(path).write_text(f"{rows}, {cols}, {matrix.nnz}\n{offsets}\n{columns}\n")


def _ints(path: Path, what: str, line: str) -> np.ndarray:
    try:
        return np.array(line.split(), dtype=np.int64)
    except ValueError:
        raise ValueError(f"{path}: {what} must be integers") from None
    except OverflowError:
        raise ValueError(f"{path}: {what} must be integers below 2**63") from None


def save_safetensors(matrix: CSRMatrix | NMMatrix, path: str | Path) -> None:
    """Save a CSRMatrix or NMMatrix (tensors plus its shape and pattern as metadata)."""
    from safetensors.torch import save_file

    if isinstance(matrix, CSRMatrix):
        tensors = {
            "row_offsets": matrix.row_offsets,
            "column_indices": matrix.column_indices,
            "values": matrix.values,
        }
        meta = {"format": "csr", "shape": list(matrix.shape)}
    elif isinstance(matrix, NMMatrix):
        tensors = {"values": matrix.values, "indices": matrix.indices}
        meta = {
            "format": "nm",
            "shape": list(matrix.shape),
            **{k: getattr(matrix, k) for k in ("n", "m", "vector", "block")},
        }
    else:
        raise TypeError(f"matrix must be a CSRMatrix or NMMatrix, got {type(matrix).__name__}")
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    save_file(tensors, str(path), metadata={"sparsekernels": json.dumps(meta)})


def load_safetensors(path: str | Path, device: str | torch.device = "cpu") -> CSRMatrix | NMMatrix:
    """Load what save_safetensors wrote; the structure is validated as on construction."""
    from safetensors import SafetensorError, safe_open

    device = _checks.device("device", device)

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads((f.metadata() or {}).get("sparsekernels", "null"))
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no iterator)
    except (OSError, ValueError, RuntimeError, SafetensorError) as error:
        raise ValueError(
            f"{path}: not a readable sparsekernels safetensors file: {error}"
        ) from None
    if not isinstance(meta, dict) or meta.get("format") not in ("csr", "nm"):
        raise ValueError(f"{path}: no sparsekernels metadata; not written by save_safetensors")
    try:  # validated where the file was read, then moved (a meta device holds nothing to read)
        if meta["format"] == "csr":
            matrix = CSRMatrix(
                tensors["row_offsets"], tensors["column_indices"], tensors["values"], meta["shape"]
            )
        else:
            matrix = NMMatrix(
                tensors["values"],
                tensors["indices"],
                tuple(meta["shape"]),
                meta["n"],
                meta["m"],
                meta["vector"],
                meta["block"],
            )
    except (KeyError, ValueError, TypeError) as error:
        raise ValueError(f"{path}: corrupted sparse matrix: {error!s}") from None
    return matrix.to(device=device)
