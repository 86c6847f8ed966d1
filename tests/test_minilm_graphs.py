"""The demo's graphed timing (models/minilm_graphs.py): the additive 4-D mask embeds as the 2-D
one in both of transformers' attention paths, and on a GPU the replayed graphs of a dense and
a sparse model give the eager embeddings; the demo's table shows the column only with graphs."""

import pytest
import torch

import sparsekernels as sk
from sparsekernels import demo
from sparsekernels.models import minilm, minilm_graphs
from test_demo import tiny  # noqa: F401 (the fixture)

TEXTS = ["the cat sat on the mat .", "why is the sky blue ?", "a dog ran", "who ran far away ?"]


def test_additive_mask_blocks_only_padded_keys():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    got = minilm_graphs.additive_mask(mask, torch.bfloat16)
    assert got.shape == (2, 1, 4, 4) and got.dtype == torch.bfloat16
    low = torch.finfo(torch.bfloat16).min
    for b in range(2):
        for key in range(4):
            want = 0.0 if mask[b, key] else low
            assert (got[b, 0, :, key] == want).all(), (b, key)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_four_d_mask_embeds_as_the_two_d_one(tiny, attention):  # noqa: F811
    model, tokenizer = tiny
    model.config._attn_implementation = attention
    batch = minilm.tokenize(tokenizer, TEXTS)  # padded: the sentences differ in length
    assert not batch["attention_mask"].all()
    want = minilm.embed(model, batch)
    mask = minilm_graphs.additive_mask(batch["attention_mask"], torch.float32)
    got = minilm_graphs._embed(model, batch, mask)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _row(seconds, graph_seconds, pattern="2:4"):
    return demo.Row(pattern, "magnitude", 2, 0.9, 0.8, 1.0, 1.0, 10, seconds, graph_seconds, 12)


def test_table_has_the_graph_column_only_with_graphs():
    from rich.console import Console

    def text(rows, failures=()):
        console = Console(width=160, record=True)
        console.print(demo._table(rows))
        demo._graph_note(console, rows, list(failures))
        return console.export_text()

    cpu = text([_row(2.0, None, "dense"), _row(3.0, None)])
    assert "graphed" not in cpu and "n/a" not in cpu
    gpu = text([_row(2.0, 0.004, "dense"), _row(3.0, 0.002), _row(3.0, None)], ["Boom: no"])
    assert "graphed" in gpu and "2.0 (0.50x)" in gpu and "n/a" in gpu
    assert "no graph: Boom: no" in gpu


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", [None, "2:4", "70%"])
def test_graphs_replay_the_eager_embeddings(tiny, pattern):  # noqa: F811
    model, tokenizer = tiny
    model = model.to("cuda", torch.bfloat16)
    if pattern is not None:
        sk.sparsify_(model, pattern)
    parts, order = minilm.batches(tokenizer, TEXTS * 3, batch_size=5, device="cuda")
    want = minilm.embed_batches(model, parts, order)
    replay = minilm_graphs.graphed_embedder(model, parts, order)
    for _ in range(2):  # (a replay leaves nothing behind that changes the next)
        got = replay()
        assert got.shape == want.shape and torch.isfinite(got).all()
        assert (got * want).sum(-1).min() > 0.999
