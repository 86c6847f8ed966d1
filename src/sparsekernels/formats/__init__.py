"""Sparse formats: data, validation and conversions; no kernels."""

from . import csr, nm
from .csr import CSRMatrix
from .io import load_safetensors, load_smtx, save_safetensors, save_smtx
from .nm import NMMatrix


def check_current(matrix: CSRMatrix | NMMatrix, name: str, values: bool = True) -> None:
    """The ops' check that a matrix still holds what was validated when it was built (its
    index arrays edited in place since are checked again): csr.check_current,
    nm.check_current."""
    if isinstance(matrix, CSRMatrix):
        csr.check_current(matrix, name, values)
    elif isinstance(matrix, NMMatrix):
        nm.check_current(matrix, name)


__all__ = [
    "CSRMatrix",
    "NMMatrix",
    "load_smtx",
    "save_smtx",
    "load_safetensors",
    "save_safetensors",
]
