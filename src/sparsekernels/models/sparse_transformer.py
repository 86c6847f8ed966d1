"""A Sparse-Transformer-like decoder: pre-LN blocks (attention + MLP) with fixed sparse attention.

The attention core is pluggable: `SparseAttention.local_strided` (the Sparse Transformer's fixed
local window plus strided keys, causal) for the sparse model, causal scaled_dot_product_attention
for the dense one. `transformer_pair` builds both from one initialisation, the sparse one with
its block linears pruned by `sparsify_` (embeddings and the output head stay dense).

Example:
    >>> cfg = TransformerConfig(vocab=32, dim=32, heads=2, layers=1, seq_len=64, window=8, stride=8)
    >>> sparse, dense = transformer_pair(cfg, "90%")
    >>> sparse(torch.randint(0, 32, (2, 64))).shape
    torch.Size([2, 64, 32])
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .. import _checks
from ..nn import SparseAttention
from ..ops._attention_library import packed_views
from ..prune import sparsify_
from ._chunked_sdpa import sdpa


@dataclass(frozen=True)
class TransformerConfig:
    vocab: int = 256
    dim: int = 512
    heads: int = 8
    layers: int = 2
    seq_len: int = 8192
    window: int = 128  # local keys: i - window < j <= i
    stride: int = 128  # strided keys: (i - j) % stride == 0
    mlp_ratio: int = 4

    def __post_init__(self) -> None:
        for name in ("vocab", "dim", "heads", "layers", "seq_len", "window", "stride", "mlp_ratio"):
            value = getattr(self, name)
            if not _checks.is_int(value) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
            object.__setattr__(self, name, int(value))  # (a NumPy integer as a Python int)
        if self.dim % self.heads:
            raise ValueError(f"heads {self.heads} must divide dim {self.dim}")


class CausalSDPA(nn.Module):
    """Full causal attention with torch's scaled_dot_product_attention (flash on CUDA; query
    blocks in float64, the reference, whose scores would not fit at long lengths) on packed
    projections (B, L, 3, H, D), as SparseAttention takes them."""

    def forward(self, qkv: torch.Tensor) -> torch.Tensor:
        return sdpa(*packed_views(qkv), causal=True)


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, core: nn.Module):
        super().__init__()
        self.heads, self.core = heads, core
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, dim = x.shape
        # The qkv product viewed (B, L, 3, H, D), no copy: both cores take it packed. Its
        # gradient then needs no transposing copy (q, k, v through a permute did: one pass over
        # its bytes a layer), and the sparse core's backward writes it whole (no stack either).
        # The sparse core's output is (B, L, H, D) in memory, so the reshape is a view there.
        qkv = self.qkv(x).view(B, L, 3, self.heads, dim // self.heads)
        return self.proj(self.core(qkv).transpose(1, 2).reshape(B, L, dim))


class Block(nn.Module):
    """x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: TransformerConfig, core: nn.Module):
        super().__init__()
        hidden = cfg.mlp_ratio * cfg.dim
        self.ln1, self.ln2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.attn = SelfAttention(cfg.dim, cfg.heads, core)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, hidden), nn.GELU(), nn.Linear(hidden, cfg.dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TransformerLM(nn.Module):
    """Token and position embeddings, pre-LN blocks, final LayerNorm, vocabulary head."""

    def __init__(self, cfg: TransformerConfig, core=CausalSDPA):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Parameter(torch.randn(cfg.seq_len, cfg.dim) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg, core()) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # a fixed sparse pattern is (seq_len, seq_len): its model takes exactly seq_len tokens
        exact = any(isinstance(b.attn.core, SparseAttention) for b in self.blocks)
        length = tokens.shape[1] if tokens.dim() == 2 else -1
        fits = length == self.cfg.seq_len if exact else 0 <= length <= self.cfg.seq_len
        if not fits:
            wanted = "exactly" if exact else "up to"
            raise ValueError(
                f"tokens must be (batch, {wanted} seq_len = {self.cfg.seq_len}), "
                f"got {tuple(tokens.shape)}"
            )
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token cross entropy over the sequence."""
        logits = self(tokens[:, :-1])
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())


def transformer_pair(
    cfg: TransformerConfig,
    weights: str | float | None = "90%",
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    device=None,
) -> tuple[TransformerLM, TransformerLM]:
    """(sparse, dense) from one initialisation: the sparse model has local+strided attention and,
    unless `weights` is None, its block linears pruned to `weights`; the dense one is unpruned
    with causal SDPA. Attention runs over `cfg.seq_len` positions (inputs may be shorter only
    for the dense model)."""
    torch.manual_seed(seed)
    dense = TransformerLM(cfg).to(device=device, dtype=dtype)
    sparse = copy.deepcopy(dense)
    pattern = SparseAttention.local_strided(
        cfg.seq_len, window=cfg.window, stride=cfg.stride, causal=True, device=device
    )
    for block in sparse.blocks:
        block.attn.core = copy.deepcopy(pattern)  # each owns its buffers; built once
    if weights is not None:
        sparsify_(sparse, weights, filter_fn=lambda m, name: name.startswith("blocks."))
    return sparse, dense
