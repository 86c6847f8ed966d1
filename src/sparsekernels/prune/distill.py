"""distill_: recover a pruned model's quality by training its kept weights toward the dense model.

One-shot pruning (magnitude, Wanda, SparseGPT) leaves an error; a few epochs of training the
sparse layers' kept values with their masks fixed, to match the dense model's outputs on
calibration inputs, removes much of it. Only the sparse layers' `values` train: indices,
dense parameters and the teacher stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def _hidden_states(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    out = model(**batch)
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out


def every_layer(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    """Every layer's hidden states, stacked (layers, batch, tokens, hidden), of a Hugging Face
    model: a target at each layer, not only the last, guides the early layers directly."""
    out = model(**batch, output_hidden_states=True)
    return torch.stack(out.hidden_states[1:])


def sparse_values(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The kept values of every sparse layer (SparseLinear, SparseConv2d) in `model`."""
    from ..nn._weight import SparseWeightModule

    return [m.values for m in model.modules() if isinstance(m, SparseWeightModule)]


def distill_(
    student: torch.nn.Module,
    teacher: torch.nn.Module,
    batches: Sequence[dict],
    *,
    epochs: int = 4,
    lr: float = 1e-4,
    output: Callable[[torch.nn.Module, dict], torch.Tensor] = _hidden_states,
) -> list[float]:
    """Train `student`'s sparse values (masks fixed) so that `output(student, batch)` matches
    `output(teacher, batch)` in mean squared error over `batches` (keyword-argument dicts for
    the models; padding positions are left out where a batch has an "attention_mask"; `output=
    every_layer` matches each layer's hidden states, not only the last). Adam,
    `epochs` passes in order. Returns each epoch's mean loss. The student is left in eval mode.

    Example (all-MiniLM-L6-v2 at 50% with SparseGPT: mean cosine 0.936 -> 0.950 in 4 epochs
    over 334 calibration sentences):
        >>> distill_(sparse_model, dense_model, calibration_batches, epochs=4)
    """
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 0:
        raise ValueError(f"epochs must be a non-negative int, got {epochs!r}")
    if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not lr > 0:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if len(batches) == 0:
        raise ValueError("batches must hold at least one batch")
    train = sparse_values(student)
    if not train:
        raise ValueError("student has no sparse layers (run sparsify_ on it first)")
    if student is teacher:
        raise ValueError("student and teacher must be two models (prune a copy of the teacher)")
    with torch.no_grad():
        targets = [output(teacher.eval(), batch).detach() for batch in batches]
    frozen = [p for p in student.parameters() if p.requires_grad and all(p is not t for t in train)]
    for p in frozen:
        p.requires_grad_(False)
    for p in train:
        p.requires_grad_(True)
    optimizer = torch.optim.Adam(train, lr=lr)
    student.eval()  # no dropout: the target is the teacher's deterministic output
    losses = []
    try:
        for _ in range(epochs):
            total = 0.0
            for batch, target in zip(batches, targets, strict=True):
                with torch.enable_grad():
                    got = output(student, batch)
                    error = (got.float() - target.float()).square()
                    mask = batch.get("attention_mask") if isinstance(batch, dict) else None
                    if mask is not None and error.dim() >= 3 and error.shape[-3:-1] == mask.shape:
                        weights = mask.unsqueeze(-1).to(error.dtype).expand_as(error)
                        loss = (error * weights).sum() / weights.sum()
                    else:
                        loss = error.mean()
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                optimizer.step()
                total += float(loss.detach())
            losses.append(total / len(batches))
    finally:
        for p in frozen:
            p.requires_grad_(True)
    return losses
