"""The demo's batches embedded by replaying CUDA graphs: what the GPU's kernels cost, without
the host's Python between them.

Eager calls of a model this small (384-wide layers, batches of ~112 tokens) are bound by the
host: on the H200's host a sparse linear call spends ~110 us in Python against F.linear's ~25
(benchmarks/results/nvidia-h200/2026-12-02/at-7d5633f), so the eager time says more about
Python than about the kernels. One graph a batch, captured once, replays the same kernels
with nothing between them. transformers reads a 2-D padding mask on the host to decide
whether it can drop it (`padding_mask.all()`), which a capture forbids, so the graphs are
given the same mask as an additive 4-D one (transformers 5 passes 4-D masks through as
they are; where a version does not, the capture fails and the demo says so).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from .minilm import mean_pool


def additive_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(batch, tokens) of 1 (keep) / 0 (padding) -> (batch, 1, tokens, tokens): 0 where a query
    may attend to a key, the dtype's lowest value where the key is padding."""
    keep = attention_mask.bool()[:, None, None, :]
    tokens = attention_mask.shape[1]
    mask = torch.zeros(keep.shape[0], 1, tokens, tokens, dtype=dtype, device=keep.device)
    return mask.masked_fill_(~keep, torch.finfo(dtype).min)


@torch.no_grad()
def _embed(model: torch.nn.Module, batch: dict, mask: torch.Tensor) -> torch.Tensor:
    """minilm.embed with the attention mask given in its 4-D form."""
    inputs = {k: v for k, v in batch.items() if k != "attention_mask"}
    states = model(**inputs, attention_mask=mask).last_hidden_state
    pooled = mean_pool(states.float(), batch["attention_mask"])
    return torch.nn.functional.normalize(pooled, p=2, dim=1)


def graphed_embedder(
    model: torch.nn.Module, parts: list[dict], order: torch.Tensor
) -> Callable[[], torch.Tensor]:
    """A function that embeds `parts` (minilm.batches' fixed batches on a CUDA device) by
    replaying one CUDA graph a batch, the embeddings back in the sentences' order. Raises
    what the capture raises where the model cannot be captured."""
    dtype = next(model.parameters()).dtype
    masks = [additive_mask(batch["attention_mask"], dtype) for batch in parts]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as capture wants
        for _ in range(2):
            for batch, mask in zip(parts, masks, strict=True):
                _embed(model, batch, mask)
    torch.cuda.current_stream().wait_stream(side)
    pool = torch.cuda.graph_pool_handle()
    graphs, outputs = [], []
    for batch, mask in zip(parts, masks, strict=True):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            outputs.append(_embed(model, batch, mask))
        graphs.append(graph)
    where = order.to(outputs[0].device)
    # the graphs read the masks and the batches where they were: the partial keeps them alive
    return functools.partial(_replay, graphs, outputs, where, (masks, parts))


def _replay(graphs, outputs, where, _inputs) -> torch.Tensor:
    for graph in graphs:
        graph.replay()
    emb = torch.cat(outputs)
    out = torch.empty_like(emb)
    out[where] = emb
    return out
