"""Hugging Face's Conv1D (GPT-2 and OpenAI GPT's projections): a linear layer whose weight is
stored transposed, (in_features, out_features), computing x @ weight + bias. sparsify_ swaps
it as it swaps an nn.Linear, through a linear twin: an nn.Linear whose weight is a transposed
view of the Conv1D's (no copy) and whose bias is the same Parameter."""

from __future__ import annotations

from torch import nn


def is_hf_conv1d(module: nn.Module) -> bool:
    """transformers' Conv1D itself (a subclass may compute otherwise; transformers is not
    imported for the check)."""
    cls = type(module)
    return cls.__name__ == "Conv1D" and cls.__module__.startswith("transformers.")


def linear_shape(module: nn.Module) -> tuple[int, int]:
    """(out_features, in_features), as an nn.Linear's weight."""
    return tuple(module.weight.shape[::-1])


def linear_twin(conv: nn.Module) -> nn.Linear:
    """An nn.Linear computing what `conv` computes, on views of its parameters."""
    weight, bias = conv.weight, conv.bias
    twin = nn.Linear(weight.shape[0], weight.shape[1], bias=bias is not None, device="meta")
    twin.weight = nn.Parameter(weight.detach().t(), requires_grad=weight.requires_grad)
    twin.bias = bias
    twin.train(conv.training)
    return twin
