"""Triton kernels: @triton.jit functions and one thin launcher per file, imported by ops."""
