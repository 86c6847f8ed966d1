"""Triton kernels: @triton.jit functions and one thin launcher per file. Imported lazily by ops."""
