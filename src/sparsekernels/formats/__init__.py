"""Sparse formats: data, validation and conversions; no kernels."""

from .csr import CSRMatrix
from .io import load_safetensors, load_smtx, save_safetensors, save_smtx
from .nm import NMMatrix

__all__ = [
    "CSRMatrix",
    "NMMatrix",
    "load_smtx",
    "save_smtx",
    "load_safetensors",
    "save_safetensors",
]
