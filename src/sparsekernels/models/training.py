"""A short training run on a synthetic task: the check that sparse weights train like
masked-dense ones.

The task: sequences made of a random block of `period` tokens repeated, so every token after
the first block is predictable from the one `period` positions back (the strided attention
pattern sees it). `loss_curve` trains with Adam on fixed batches and returns the losses.
"""

from __future__ import annotations

import torch
from torch import nn


def periodic_tokens(
    batch: int, seq_len: int, vocab: int, period: int, *, seed: int = 0, device=None
) -> torch.Tensor:
    """(batch, seq_len) int64 tokens: a random block of `period` tokens repeated."""
    g = torch.Generator().manual_seed(seed)
    block = torch.randint(0, vocab, (batch, period), generator=g)
    reps = -(-seq_len // period)
    return block.repeat(1, reps)[:, :seq_len].to(device)


def loss_curve(
    model: nn.Module, batches: list[torch.Tensor], steps: int, lr: float = 3e-3
) -> torch.Tensor:
    """Train `model` (in place) for `steps` Adam steps, cycling through `batches` of tokens;
    the model must have `.loss(tokens)`. Returns the float64 loss before each step."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses = []
    with torch.enable_grad():
        for step in range(steps):
            loss = model.loss(batches[step % len(batches)])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
    return torch.stack(losses).double()


def max_relative_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / |b| over two loss curves."""
    return float(((a.double() - b.double()).abs() / b.double().abs().clamp_min(1e-300)).max())
