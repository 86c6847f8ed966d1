"""Triton kernels: @triton.jit functions and one thin launcher per file, imported by ops (and by
models/llama.py: the decode step's norm, rotation and SwiGLU kernels)."""
