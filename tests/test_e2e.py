"""End-to-end models: sparse models match their masked-dense twins, the e2e suite runs on CPU,
and sparse training follows the masked-dense loss curve."""

import dataclasses
import json

import pytest
import torch

from sparsekernels.bench import cli, harness, output, suites
from sparsekernels.bench.e2e import e2e_providers, transformer_case
from sparsekernels.models.llama import LlamaConfig, LlamaStack
from sparsekernels.models.masked import masked_dense
from sparsekernels.models.mobilenet import mobilenet_pair
from sparsekernels.models.sparse_transformer import TransformerConfig, transformer_pair
from sparsekernels.models.training import loss_curve, max_relative_difference, periodic_tokens
from sparsekernels.nn import SparseAttention, SparseConv2d, SparseLinear
from sparsekernels.prune import sparsify_

CPU = torch.device("cpu")
F64 = torch.float64
TINY = TransformerConfig(vocab=16, dim=32, heads=2, layers=2, seq_len=64, window=8, stride=8)


def test_sparse_transformer_matches_masked_dense_forward_and_backward():
    sparse, dense = transformer_pair(TINY, "90%", dtype=F64)
    assert isinstance(sparse.blocks[0].attn.core, SparseAttention)
    assert isinstance(sparse.blocks[1].mlp[0], SparseLinear)
    assert type(sparse.head) is torch.nn.Linear  # the head stays dense
    twin = masked_dense(sparse)
    tokens = torch.randint(0, TINY.vocab, (2, TINY.seq_len + 1))
    a, b = sparse.loss(tokens), twin.loss(tokens)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    a.backward()
    b.backward()
    for name in ("embed.weight", "blocks.0.ln1.weight", "blocks.1.mlp.0.bias"):
        ga = sparse.get_parameter(name).grad
        torch.testing.assert_close(ga, twin.get_parameter(name).grad, rtol=1e-10, atol=1e-12)
    assert dense(tokens[:, 1:]).shape == (2, TINY.seq_len, TINY.vocab)


def test_mobilenet_sparse_pointwise_matches_masked_dense():
    sparse, dense = mobilenet_pair(0.25, 0.9, resolution=32, calibration_batch=4, dtype=F64)
    pointwise = [m for m in sparse.modules() if isinstance(m, SparseConv2d)]
    assert len(pointwise) == 13 and all(m.activation == "relu" for m in pointwise)
    assert all(abs(m.density - 0.1) < 0.01 for m in pointwise)
    x = torch.randn(3, 3, 32, 32, dtype=F64)
    with torch.no_grad():
        torch.testing.assert_close(sparse(x), masked_dense(sparse)(x), rtol=1e-10, atol=1e-12)
        assert sparse(x).std() > 0.1 and dense(x).std() > 0.1  # folded BN keeps a live signal


@pytest.mark.parametrize("weights", ["2:8", "1:8", "70%"])
def test_llama_decode_matches_masked_dense(weights):
    cfg = LlamaConfig(hidden=64, intermediate=224, heads=4, kv_heads=2, layers=2)
    torch.manual_seed(0)
    model = LlamaStack(cfg).to(F64)
    summary = sparsify_(model, weights)
    assert len(summary.swapped) == 8  # per layer: qkv, o, gate_up, down
    twin = masked_dense(model)
    prompt = torch.randn(2, 5, 64, dtype=F64)
    outs = []
    for m in (model, twin):
        m.allocate_cache(2, 9)
        outs.append(m.generate(prompt, 4))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-10, atol=1e-12)
    assert outs[0].shape == (2, 4, 64)


def _attention_reference(attn, x: torch.Tensor, theta: float) -> torch.Tensor:
    """Causal GQA attention with the rotary embedding written out pair by pair: position t
    turns (x_i, x_{i+d/2}) by t * theta^(-2i/d)."""
    cfg, d = attn.cfg, attn.cfg.head_dim
    B, T, _ = x.shape
    qkv = x @ attn.qkv_proj.weight.t()
    q, k, v = qkv.split([cfg.heads * d, cfg.kv_heads * d, cfg.kv_heads * d], -1)
    half = d // 2
    angle = torch.arange(T, dtype=F64)[:, None] * theta ** (-2 * torch.arange(half) / d)

    def turn(t, heads):
        t = t.view(B, T, heads, d)
        a, b = t[..., :half], t[..., half:]
        c, s = angle.cos()[:, None], angle.sin()[:, None]
        return torch.cat((a * c - b * s, b * c + a * s), -1)

    q, k = turn(q, cfg.heads), turn(k, cfg.kv_heads)
    v = v.view(B, T, cfg.kv_heads, d)
    group = cfg.heads // cfg.kv_heads
    k, v = k.repeat_interleave(group, 2), v.repeat_interleave(group, 2)
    scores = torch.einsum("bthd,bshd->bhts", q, k) / d**0.5
    scores = scores.masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))
    o = torch.einsum("bhts,bshd->bthd", scores.softmax(-1), v).reshape(B, T, -1)
    return o @ attn.o_proj.weight.t()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"kv_heads": 0}, "kv_heads must be a positive int"),
        ({"kv_heads": 3}, "kv_heads 3 must divide heads 4"),
        ({"hidden": 34}, "must be heads 4 times an even head size"),
        ({"hidden": 36}, "must be heads 4 times an even head size"),
        ({"rope_theta": float("inf")}, "rope_theta must be finite"),
        ({"eps": -1e-6}, "eps must be positive"),
    ],
)
def test_llama_config_is_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LlamaConfig(**{"hidden": 32, "intermediate": 64, "heads": 4, "kv_heads": 2, **kwargs})
    with pytest.raises(TypeError, match="rope_theta must be a number, got str"):
        LlamaConfig(hidden=32, intermediate=64, heads=4, kv_heads=2, rope_theta="1e4")


def test_llama_generate_says_what_is_wrong():
    stack = LlamaStack(LlamaConfig(hidden=32, intermediate=64, heads=4, kv_heads=2, layers=1))
    x = torch.randn(2, 4, 32)
    with pytest.raises(ValueError, match="allocate_cache"):
        stack.generate(x, 2)
    stack.allocate_cache(2, 5)
    with pytest.raises(ValueError, match="pass the caches' max_len 5"):
        stack.generate(x, 3)
    with pytest.raises(ValueError, match="steps must be an int >= 1"):
        stack.generate(x, 0)
    stack.allocate_cache(1, 8)
    with pytest.raises(ValueError, match="batch 2 is larger than the caches' 1"):
        stack.generate(x, 2)
    stack.allocate_cache(2, 6)
    assert stack.generate(x, 2).shape == (2, 2, 32)  # exactly room: 4 + 2 positions
    kept = [t.clone() for t in stack.layers[0].attn.cache]
    with pytest.raises(ValueError, match="positions up to 7 pass"):  # (before the prefill)
        stack.generate(x, 3)
    assert all(torch.equal(a, b) for a, b in zip(kept, stack.layers[0].attn.cache, strict=True))
    one = x[:, :1]
    for start, words in [(-3, "start must be an int >= 0"), (2.0, "start must be an int"),
                         (True, "start must be an int")]:  # fmt: skip
        with pytest.raises(ValueError, match=words):  # (-3 read the cache from its end)
            stack.decode(one, start, 1)
    with pytest.raises(ValueError, match="one token a sequence"):
        stack.decode(x[:, :2], 2, 1)
    with pytest.raises(ValueError, match="at least one token"):
        stack.generate(x[:, :0], 1)
    for batch, max_len, error in [(2, -1, ValueError), (2.5, 4, TypeError), (0, 4, ValueError)]:
        with pytest.raises(error, match="batch|max_len"):
            stack.allocate_cache(batch, max_len)
    stack.to(torch.float64)  # (the caches and rotary tables stay float32 until reallocated)
    with pytest.raises(ValueError, match="call allocate_cache again after .to"):
        stack.generate(x.double(), 1)
    stack.allocate_cache(2, 6)
    assert stack.generate(x.double(), 2).dtype == torch.float64


def test_transformer_config_and_length_are_checked():
    with pytest.raises(ValueError, match="heads 4 must divide dim 18"):
        TransformerConfig(vocab=11, dim=18, heads=4)
    cfg = TransformerConfig(vocab=11, dim=16, heads=2, layers=1, seq_len=20, window=3, stride=5)
    sparse, dense = transformer_pair(cfg)
    for model in (sparse, dense):
        with pytest.raises(ValueError, match="up to seq_len = 20|exactly seq_len = 20"):
            model(torch.randint(0, 11, (2, 21)))
        with pytest.raises(ValueError, match="tokens must be"):
            model(torch.randint(0, 11, (21,)))
    assert dense(torch.randint(0, 11, (2, 7))).shape == (2, 7, 11)  # (causal SDPA: any length)
    with pytest.raises(ValueError, match="exactly seq_len = 20"):  # (the pattern is 20 x 20)
        sparse(torch.randint(0, 11, (2, 7)))


def test_llama_attention_matches_written_out_reference():
    """The model's attention (q and k rotated together, the rotation's sign folded into its
    sine table, a KV cache) against the formula written out, in float64: the prefill of 6
    tokens, then one decode step at position 6 against the 7-token prefill's last row."""
    cfg = LlamaConfig(hidden=64, intermediate=96, heads=4, kv_heads=2, layers=1)
    torch.manual_seed(1)
    model = LlamaStack(cfg).to(F64)
    attn = model.layers[0].attn
    x = torch.randn(2, 7, 64, dtype=F64)
    want = _attention_reference(attn, x, cfg.rope_theta)
    model.allocate_cache(2, 7)
    cos, sin = model._cos, model._signed_sin
    got = attn(x[:, :6], 0, cos[:6], sin[:6])
    torch.testing.assert_close(got, want[:, :6], rtol=1e-9, atol=1e-11)
    step = attn(x[:, 6:], 6, cos[6:7], sin[6:7])
    torch.testing.assert_close(step, want[:, 6:], rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_llama_rms_norm_matches_float64(dtype):
    """x / sqrt(mean(x^2) + eps) * weight, rows of fresh data, one row scaled far up."""
    from sparsekernels.models.llama import RMSNorm

    g = torch.Generator().manual_seed(3)
    norm = RMSNorm(96, 1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(96, generator=g))
    x = torch.randn(5, 7, 96, generator=g)
    x[2, 3] *= 1000.0
    x64 = x.double()
    want = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-5) * norm.weight.double()
    got = norm.to(dtype)(x.to(dtype)).double()
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    assert (got - want).abs().max() <= tolerance * want.abs().max()


def test_sparse_training_follows_the_masked_dense_curve():
    cfg = dataclasses.replace(TINY, layers=1)
    sparse, _ = transformer_pair(cfg, "80%", dtype=F64)
    twin = masked_dense(sparse)
    data = [periodic_tokens(4, cfg.seq_len + 1, cfg.vocab, cfg.stride, seed=i) for i in range(4)]
    a, b = loss_curve(sparse, data, 50), loss_curve(twin, data, 50)
    assert max_relative_difference(a, b) < 1e-9
    assert a[-1] < 0.8 * a[0]  # it learns the task
    # The mask stayed fixed: the twin's pruned weights are still multiplied away.
    layer = twin.blocks[0].mlp[0]
    assert int(layer.mask.sum()) == sparse.blocks[0].mlp[0].values.numel()


def test_a_wrong_row_in_a_model_output_is_caught():
    case = transformer_case(TINY, 1, "90%", torch.float32, CPU)
    good = e2e_providers(case)[0]

    def bad_setup(c, inputs):
        call = good.setup(c, inputs)
        return lambda: call() * torch.where(torch.arange(TINY.seq_len) == 7, 1.001, 1.0)[:, None]

    bad = dataclasses.replace(good, name="sk_bad", setup=bad_setup)
    timer = harness.Timer(CPU, warmup_ms=1, rep_ms=2)
    from sparsekernels.bench.providers import providers_for

    rows = harness.run_case(case, providers_for(case, extra=(bad,)), timer)
    status = {r.provider: r.status for r in rows}
    assert status == {"sk_model": "ok", "dense": "ok", "sk_bad": "wrong"}
    assert rows[0].throughput and rows[0].unit == "tokens/s" and rows[0].peak_mb is None


def test_e2e_suite_runs_on_cpu(tmp_path, capsys):
    cases = suites.build(["e2e"], suites.Context(CPU))
    assert {c.op for c in cases} == {
        "e2e_transformer",
        "e2e_transformer_train",
        "e2e_mobilenet",
        "e2e_llama",
        "e2e_train_curve",
    }
    argv = ["--suite", "e2e", "--device", "cpu", "--limit", "5", "--no-plots"]
    assert cli.main([*argv, "--out", str(tmp_path)]) == 0
    _, rows = output.read_jsonl(tmp_path / "results.jsonl")
    assert rows and all(r["status"] == "ok" for r in rows)
    assert all(r["throughput"] > 0 and r["unit"] for r in rows)
    assert {r["provider"] for r in rows} == {"sk_model", "dense"}
    summary = (tmp_path / "summary.md").read_text()
    assert "End to end" in summary and "Loss curves" in summary
    curves = json.loads((tmp_path / "loss_curves.json").read_text())
    (curve,) = curves.values()
    assert len(curve["sk_model"]) == 50 and curve["max_rel_diff"] < 1e-4
    capsys.readouterr()


def test_e2e_models_are_timed_as_cuda_graphs():
    """Inference, decode and the training step are timed as graphs on both sides (the step
    captures on the H200 with AdamW capturable); the 50-step loss run is timed as it runs."""
    from sparsekernels.bench.e2e import e2e_providers

    cases = suites.build(["e2e"], suites.Context(CPU))
    for case in cases:
        graphed = {p.name: p.graph for p in e2e_providers(case)}
        assert graphed == dict.fromkeys(("sk_model", "dense"), case.op != "e2e_train_curve")
