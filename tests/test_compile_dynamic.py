"""torch.compile with dynamic shapes and torch.export with a dynamic token or batch dimension.

Traced, the ops choose their backend when they run (ops/_dispatch.AUTO), from the concrete
sizes: one graph holds for every token count, it runs the backend an eager call would, and
export accepts a Dim. Choosing while tracing guarded the graph on each rule's threshold: a
recompile there, and export refusing the Dim."""

import pytest
import torch

import sparsekernels as sk
from _helpers import randn, random_csr, random_nm
from sparsekernels.ops import _cusparselt, _dispatch
from sparsekernels.ops.depthwise import _depthwise_op

# the CPU rule for the dense backend turns at ~100 tokens on these sizes (spmm_cpu_tuning)
TOKENS = [2, 7, 150, 600]
CONFIGS = ["70%", "2:8", "2:8,v=4", "4:8,v=4,b=4", "2:4"]


def _mlp(config: str, gen: torch.Generator, dtype=torch.float64) -> torch.nn.Module:
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.Linear(96, 48)
    ).to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(randn(*p.shape, gen=gen, dtype=dtype))
    sk.sparsify_(model, config)
    return model


@pytest.fixture
def ran(monkeypatch):
    """Every backend that runs, as (op, name), in order (cuSPARSELt's: its own op eagerly,
    spmm_nm's body compiled, both through _cusparselt._run)."""
    names = []

    def cusparselt(*args, _run=_cusparselt._run):
        names.append(("spmm_nm", "cusparselt"))
        return _run(*args)

    monkeypatch.setattr(_cusparselt, "_run", cusparselt)
    for op in ("spmm_csr", "spmm_nm", "sddmm_csr", "sddmm_nm"):
        for name, backend in list(_dispatch._REGISTRY[op].items()):
            if name == "cusparselt":
                continue

            def run(*args, _run=backend.run, _key=(op, name)):
                names.append(_key)
                return _run(*args)

            replaced = _dispatch.Backend(name, run, backend.reasons)
            monkeypatch.setitem(_dispatch._REGISTRY[op], name, replaced)
    return names


@pytest.mark.parametrize("config", CONFIGS)
def test_one_graph_for_every_token_count_running_eagers_backends(config, gen, ran):
    """float32: the CPU's dense rule is for it (float64 stays sparse)."""
    model = _mlp(config, gen, torch.float32)
    compiled = torch.compile(model, dynamic=True, fullgraph=True)
    with torch.no_grad():
        compiled(randn(3, 64, gen=gen, dtype=torch.float32))
        xs = [randn(tokens, 64, gen=gen, dtype=torch.float32) for tokens in TOKENS]
        _as_eager_without_recompiling(compiled, model, xs, ran, tolerance=1e-5)


def _as_eager_without_recompiling(compiled, model, xs, ran, tolerance: float) -> None:
    """Each x through the compiled model, with no recompile, on the backends an eager call
    takes first (recorded by `ran`), giving its product."""
    with torch.compiler.set_stance("fail_on_recompile"):
        for x in xs:
            ran.clear()
            want = model(x)
            eager_ran = list(ran)
            ran.clear()
            got = compiled(x)
            assert ran == eager_ran, (x.shape[0], ran, eager_ran)
            torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance)


def test_the_backends_differ_across_the_token_counts(gen, ran):
    """The case above is not vacuous: its token counts take different backends eagerly."""
    model = _mlp("70%", gen, torch.float32)
    seen = set()
    with torch.no_grad():
        for tokens in TOKENS:
            ran.clear()
            model(randn(tokens, 64, gen=gen, dtype=torch.float32))
            seen.add(tuple(ran))
    assert len(seen) > 1, seen


@pytest.mark.parametrize("config", CONFIGS)
def test_a_first_token_count_equal_to_a_pattern_size_is_not_tied_to_it(config, gen):
    """Dynamo gave the format's tensors symbolic sizes: a first call with as many tokens as
    one of them has (a CSR weight's rows + 1 or stored entries, an N:M weight's index
    columns) tied the token count to it, fixing the graph to that count or recompiling at
    the next (_cache_mode.fixed_sizes marks them static)."""
    model = _mlp(config, gen)
    sizes = set()
    for layer in model:
        for name in ("row_offsets", "column_indices", "indices"):
            tensor = getattr(layer, name, None)
            if tensor is not None:
                sizes.update(size for size in tensor.shape if size > 1)
    assert sizes
    with torch.no_grad():
        for first in sorted(sizes):
            torch._dynamo.reset()
            compiled = torch.compile(model, dynamic=True, fullgraph=True, backend="eager")
            compiled(randn(first, 64, gen=gen))
            with torch.compiler.set_stance("fail_on_recompile"):
                x = randn(first + 1, 64, gen=gen)
                torch.testing.assert_close(compiled(x), model(x), rtol=1e-12, atol=1e-12)


def test_attention_layer_compiles_whole_with_its_scale(gen):
    """SparseAttention's scale (1 / sqrt(d) or its own) is a symbolic float under
    dynamic=True: the finiteness check reads it without a graph break."""
    for layer in (
        sk.nn.SparseAttention.local_strided(24, window=4, stride=6),
        sk.nn.SparseAttention.local_strided(24, window=4, stride=6, scale=0.35),
    ):
        torch._dynamo.reset()
        compiled = torch.compile(layer, dynamic=True, fullgraph=True, backend="aot_eager")
        for batch in (2, 3):
            q, k, v = (randn(batch, 3, 24, 8, gen=gen) for _ in range(3))
            torch.testing.assert_close(compiled(q, k, v), layer(q, k, v))
        with torch.compiler.set_stance("fail_on_recompile"):  # an eager call in between
            q, k, v = (randn(4, 3, 24, 8, gen=gen) for _ in range(3))
            torch.testing.assert_close(compiled(q, k, v), layer(q, k, v))
    with pytest.raises(ValueError, match="scale must be finite"):
        sk.sparse_attention(q, k, v, layer.pattern, scale=float("inf"))


@pytest.mark.parametrize("config", ["70%", "2:8"])
def test_compiled_under_autocast_is_one_graph(config, gen):
    """cast_weight read the values' version (untraceable) before seeing it was traced."""
    model = _mlp(config, gen, torch.float32)
    x = randn(5, 64, gen=gen, dtype=torch.float32)
    compiled = torch.compile(model, dynamic=True, fullgraph=True, backend="eager")
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = compiled(x), model(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("config", ["70%", "2:8,v=4"])
def test_training_step_with_dynamic_shapes_matches_eager(config, gen):
    model = _mlp(config, gen)

    def step(x):
        loss = model(x).square().mean()
        loss.backward()
        return loss

    compiled = torch.compile(step, dynamic=True)
    for i, tokens in enumerate([3, 4, 5, *TOKENS]):
        x = randn(tokens, 64, gen=gen)
        model.zero_grad(set_to_none=True)
        # (the first steps build the CSR pattern's transpose between graphs, a graph break:
        # the graphs after it read the entry, then its arrays marked static; settled by the
        # third step)
        stance = "fail_on_recompile" if i > 2 else "default"
        with torch.compiler.set_stance(stance):
            got_loss = compiled(x)
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        want_loss = step(x)
        torch.testing.assert_close(got_loss, want_loss, rtol=1e-12, atol=1e-12)
        for g, w in zip(got, (p.grad for p in model.parameters()), strict=True):
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("config", ["70%", "2:8", "2:8,v=4"])
def test_export_with_a_dynamic_token_count(config, gen, tmp_path):
    model = _mlp(config, gen)
    tokens = torch.export.Dim("tokens", min=2)
    example = (randn(5, 64, gen=gen),)
    program = torch.export.export(model, example, dynamic_shapes=({0: tokens},))
    torch.export.save(program, tmp_path / "model.pt2")
    loaded = torch.export.load(tmp_path / "model.pt2")
    with torch.no_grad():
        for n in TOKENS:
            x = randn(n, 64, gen=gen)
            want = model(x)
            torch.testing.assert_close(program.module()(x), want, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(loaded.module()(x), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("config", ["70%", "2:8"])
def test_aot_inductor_package_with_a_dynamic_token_count(config, gen, tmp_path):
    """AOTInductor compiles the exported program; its package calls the ops (Python custom
    ops, through its proxy executor) at every token count."""
    model = _mlp(config, gen)
    tokens = torch.export.Dim("tokens", min=2)
    program = torch.export.export(model, (randn(5, 64, gen=gen),), dynamic_shapes=({0: tokens},))
    path = torch._inductor.aoti_compile_and_package(program, package_path=str(tmp_path / "m.pt2"))
    loaded = torch._inductor.aoti_load_package(path)
    with torch.no_grad():
        for n in (2, 150):
            x = randn(n, 64, gen=gen)
            torch.testing.assert_close(loaded(x), model(x), rtol=1e-12, atol=1e-12)


class _Attention(torch.nn.Module):
    def __init__(self, pattern):
        super().__init__()
        self.pattern = pattern

    def forward(self, q, k, v):
        return sk.sparse_attention(q, k, v, self.pattern)


class _Depthwise(torch.nn.Module):
    def __init__(self, weight, bias):
        super().__init__()
        self.weight, self.bias = torch.nn.Parameter(weight), torch.nn.Parameter(bias)

    def forward(self, x):
        return sk.ops.depthwise_conv2d(x, self.weight, self.bias, activation="relu")


def test_export_attention_and_depthwise_with_a_dynamic_batch(gen):
    pattern = sk.CSRMatrix.from_dense(torch.ones(24, 24, dtype=torch.float64).tril())
    batch = torch.export.Dim("batch")
    example = tuple(randn(2, 3, 24, 8, gen=gen) for _ in range(3))  # (one tensor thrice: one)
    attention = _Attention(pattern)
    shapes = ({0: batch}, {0: batch}, {0: batch})
    program = torch.export.export(attention, example, dynamic_shapes=shapes)
    for b in (1, 5):
        q, k, v = (randn(b, 3, 24, 8, gen=gen) for _ in range(3))
        torch.testing.assert_close(program.module()(q, k, v), attention(q, k, v))
    depthwise = _Depthwise(randn(6, 1, 3, 3, gen=gen), randn(6, gen=gen))
    x = randn(2, 6, 9, 7, gen=gen)
    program = torch.export.export(depthwise, (x,), dynamic_shapes=({0: batch},))
    for b in (1, 4):
        x = randn(b, 6, 9, 7, gen=gen)
        torch.testing.assert_close(program.module()(x), depthwise(x))


# -------------------------------------------------------- the fakes of a choice made at run
AUTO = _dispatch.AUTO


@pytest.mark.parametrize("columns", [1, 5])
def test_opcheck_auto_spmm(columns, gen):
    """Whichever backend the op's body takes, its product has the strides the fake promised."""
    A, W = random_csr(9, 16, 0.4, gen), random_nm(6, 16, 2, 8, gen, vector=2)
    for b in (randn(columns, 16, gen=gen).t(), randn(16, columns, gen=gen)):
        b = b.requires_grad_()
        csr_args = (A.row_offsets, A.column_indices, A.values.clone().requires_grad_(), b,
                    randn(9, gen=gen), A.row_order, None, None, None, "relu", AUTO)  # fmt: skip
        torch.library.opcheck(torch.ops.sparsekernels.spmm_csr.default, csr_args)
        nm_args = (W.values.clone().requires_grad_(), W.indices, b, randn(6, gen=gen), "gelu",
                   2, 8, 2, 1, False, AUTO)  # fmt: skip
        torch.library.opcheck(torch.ops.sparsekernels.spmm_nm.default, nm_args)
    batched = randn(3, 16, columns, gen=gen)
    values = randn(3, A.nnz, gen=gen)
    csr_args = (A.row_offsets, A.column_indices, values, batched, None, A.row_order,
                None, None, None, "none", AUTO)  # fmt: skip
    torch.library.opcheck(torch.ops.sparsekernels.spmm_csr.default, csr_args)


def test_opcheck_auto_sddmm_softmax_depthwise(gen):
    A = random_csr(9, 7, 0.5, gen)
    t, perm = A.pattern.transpose()
    x, y = randn(9, 4, gen=gen).requires_grad_(), randn(7, 4, gen=gen).requires_grad_()
    torch.library.opcheck(
        torch.ops.sparsekernels.sddmm_csr.default,
        (A.row_offsets, A.column_indices, x, y, t.row_offsets, t.column_indices, perm, AUTO),
    )
    values = A.values.clone().requires_grad_()
    torch.library.opcheck(
        torch.ops.sparsekernels.sparse_softmax.default, (A.row_offsets, values, 0.7, AUTO)
    )
    probs = sk.sparse_softmax(A).values
    torch.library.opcheck(
        torch.ops.sparsekernels.sparse_softmax_backward.default,
        (A.row_offsets, probs, randn(A.nnz, gen=gen), 0.7, AUTO),
    )
    W = random_nm(6, 16, 2, 8, gen, vector=2)
    torch.library.opcheck(
        torch.ops.sparsekernels.sddmm_nm.default,
        (W.indices, randn(6, 3, gen=gen), randn(16, 3, gen=gen), 2, 8, 2, 1, AUTO),
    )
    image = randn(2, 5, 6, 7, gen=gen).requires_grad_()
    for x in (image, image.detach().to(memory_format=torch.channels_last).requires_grad_()):
        args = (x, randn(5, 1, 3, 3, gen=gen), randn(5, gen=gen), 1, "relu", AUTO)
        torch.library.opcheck(_depthwise_op, args)


def test_a_users_patterns_of_several_sizes_share_one_graph(gen):
    """Only the layers' own patterns are marked static: a CSRMatrix made per call (a graph
    per batch, an attention pattern per length) keeps symbolic sizes, one graph for all."""
    compiled = torch.compile(sk.spmm, dynamic=True, fullgraph=True, backend="eager")
    x = randn(64, 8, gen=gen)
    for i, density in enumerate((0.1, 0.2, 0.3, 0.4)):
        A = random_csr(64, 64, density, gen)
        with torch.compiler.set_stance("fail_on_recompile" if i > 1 else "default"):
            torch.testing.assert_close(compiled(A, x), sk.spmm(A, x), rtol=1e-12, atol=1e-12)


def test_forced_backends_reach_a_compiled_backward(gen, ran):
    """The backward's ops take the forward's forced backend as their hint when traced too
    ("auto:reference", judged on the sizes they run with)."""
    A = random_csr(48, 64, 0.5, gen)
    values = A.values.clone().requires_grad_()

    def step(x):
        return sk.spmm(A.with_values(values), x, backend="reference").square().sum()

    compiled = torch.compile(step, backend="aot_eager")
    compiled(randn(64, 300, gen=gen).requires_grad_()).backward()
    ran.clear()
    compiled(randn(64, 300, gen=gen).requires_grad_()).backward()
    assert ran and all(name == "reference" for _, name in ran), ran


def test_depthwise_on_the_cpu_is_traced_as_aten_ops(gen):
    """The CPU's choice ("torch") does not depend on sizes: made when traced, so the graph
    holds conv2d and the activation (fused by inductor), not the custom op."""
    depthwise = _Depthwise(randn(6, 1, 3, 3, gen=gen), randn(6, gen=gen))
    x = randn(2, 6, 9, 7, gen=gen)
    batch = torch.export.Dim("batch")
    program = torch.export.export(depthwise, (x,), dynamic_shapes=({0: batch},))
    targets = {str(node.target) for node in program.graph.nodes if node.op == "call_function"}
    assert "aten.conv2d.default" in targets and not any("sparsekernels" in t for t in targets)


def test_the_scatter_backends_fake_promises_bs_order(gen):
    """The scatter kernel (CUDA) writes linear's product in x^T's column-major order: its fake
    says so (it promised row-major strides a compiled graph would have asserted)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    A = random_csr(6, 16, 0.4, gen)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        b = mode.from_tensor(randn(5, 16, gen=gen)).t()
        out = torch.ops.sparsekernels.spmm_csr.default(
            A.row_offsets, A.column_indices, A.values, b, None, A.row_order,
            None, None, None, "none", "scatter",
        )  # fmt: skip
    assert out.shape == (6, 5) and out.stride() == (1, 6)


def test_a_forced_backend_is_kept_when_traced(gen, ran):
    """backend= names what runs, traced or not."""
    W = random_nm(6, 16, 2, 8, gen)

    def program(x):
        return sk.linear(x, W, backend="reference")

    compiled = torch.compile(program, dynamic=True, fullgraph=True)
    compiled(randn(4, 16, gen=gen))
    ran.clear()
    compiled(randn(300, 16, gen=gen))
    assert ran == [("spmm_nm", "reference")]


# ---------------------------------------------------------------------------------- the GPU
GPU_TOKENS = [2, 8, 17, 40, 100, 600, 2100]  # across the CUDA routes' windows (docs/routes.md)


@pytest.mark.gpu
@pytest.mark.parametrize("config", ["70%", "90%", "2:8", "1:8", "2:8,v=64", "2:4"])
def test_gpu_one_graph_for_every_token_count(config, gen, ran):
    """bf16 on the GPU: one graph, each token count on the backend an eager call took first
    (2:4 from 512 tokens: cuSPARSELt, its weight packed once)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)
    )
    sk.sparsify_(model.cuda().bfloat16(), config)
    compiled = torch.compile(model, dynamic=True, fullgraph=True)
    with torch.no_grad():
        compiled(torch.randn(3, 512, device="cuda", dtype=torch.bfloat16))
        xs = [torch.randn(t, 512, device="cuda", dtype=torch.bfloat16) for t in GPU_TOKENS]
        _as_eager_without_recompiling(compiled, model, xs, ran, tolerance=2e-2)
