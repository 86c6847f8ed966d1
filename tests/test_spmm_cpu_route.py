"""On the CPU, fp32 spmm/linear with many tokens and more than ~10% stored takes the dense backend
(kernels/spmm_cpu_tuning.py); everything else stays on torch's sparse matmul."""

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, randn, random_csr, random_nm, spmm_bound
from sparsekernels.kernels.spmm_cpu_tuning import MAX_CELLS, spmm_prefers_dense_on_cpu
from sparsekernels.ops import _dense, _dispatch
from sparsekernels.ops.spmm import csr_problem, nm_problem

MINILM_UP = 1536 * 384  # all-MiniLM's MLP up-projection, the demo's largest layer


@pytest.mark.parametrize(
    "density, tokens, dense",
    [
        (0.3, 96, False),  # 70%: the sparse matmul still wins at 96 tokens (1.40 ms against 2.05)
        (0.3, 192, True),  # ... and loses at 192 (2.91 against 2.59)
        (0.5, 384, True),
        (0.1, 4096, False),  # 90%: MKL's ~10x a multiply-add never pays back the dense product's
    ],
)
def test_rule_at_measured_minilm_points(density, tokens, dense):
    nnz = int(MINILM_UP * density)
    assert spmm_prefers_dense_on_cpu(tokens, nnz, MINILM_UP, torch.float32) is dense


def test_rule_keeps_large_weights_sparse_longer():
    cells = 4096 * 4096  # a fresh 64 MB allocation pays page faults (~2 ns a cell)
    nnz = int(cells * 0.3)
    assert not spmm_prefers_dense_on_cpu(128, nnz, cells, torch.float32)  # 77.7 against 79.6 ms
    assert spmm_prefers_dense_on_cpu(256, nnz, cells, torch.float32)  # 159.8 against 105.9
    assert not spmm_prefers_dense_on_cpu(10**6, MAX_CELLS // 2, MAX_CELLS + 1, torch.float32)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rule_takes_half_precision_as_fp32(dtype):  # (both backends widen it on the CPU)
    assert spmm_prefers_dense_on_cpu(4096, MINILM_UP // 2, MINILM_UP, dtype)
    assert not spmm_prefers_dense_on_cpu(32, MINILM_UP // 2, MINILM_UP, dtype)


def test_rule_keeps_float64_sparse():
    assert not spmm_prefers_dense_on_cpu(4096, MINILM_UP // 2, MINILM_UP, torch.float64)


def test_dispatch_on_cpu_follows_the_rule(gen):
    A = random_csr(300, 200, 0.5, gen, dtype=torch.float32)
    few, many = (
        randn(200, 8, gen=gen, dtype=torch.float32),
        randn(200, 600, gen=gen, dtype=torch.float32),
    )
    problem = lambda b: csr_problem(A.row_offsets, A.column_indices, A.values, b)  # noqa: E731
    assert _dispatch.choose("spmm_csr", problem(few)) == "torch_sparse"
    reasons = _dispatch.explain("spmm_csr", problem(few))["dense"]
    assert reasons == [_dense.CPU_REASON] and "faster" in _dense.CPU_REASON
    assert _dispatch.choose("spmm_csr", problem(many)) == "dense"
    assert _dispatch.choose("spmm_csr", problem(many.double())) == "torch_sparse"
    W = random_nm(300, 200, 2, 4, gen, dtype=torch.float32)
    nm = lambda b: nm_problem(W.values, b, 2, 4, 1, 1, False)  # noqa: E731
    assert _dispatch.choose("spmm_nm", nm(few)) == "torch_sparse"
    assert _dispatch.choose("spmm_nm", nm(many)) == "dense"


def _chosen(W, tokens) -> str:
    if isinstance(W, sk.CSRMatrix):
        problem = csr_problem(W.row_offsets, W.column_indices, W.values, tokens)
        return _dispatch.choose("spmm_csr", problem)
    problem = nm_problem(W.values, tokens, W.n, W.m, W.vector, W.block, False)
    return _dispatch.choose("spmm_nm", problem)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", ["csr", "nm"])
def test_linear_through_the_dense_route_matches_reference(kind, dtype, gen):
    """Forward with a bias, and both gradients, at enough tokens for the rule; the
    tolerances are relative to sum |w| |x| per output, so one bad row fails. Half precision is
    computed in fp32 (ops/_dense.widens_on_cpu)."""
    make = {
        "csr": lambda: random_csr(97, 130, 0.5, gen),
        "nm": lambda: random_nm(97, 128, 2, 4, gen, 4),
    }
    W = make[kind]()
    Wd = W.to(dtype=dtype)  # the references take the inputs as rounded to dtype
    dense = Wd.to_dense().double()
    x, bias = randn(3, 200, W.shape[1], gen=gen), randn(97, gen=gen)
    x, bias = x.to(dtype).double(), bias.to(dtype).double()
    assert _chosen(Wd, x.reshape(-1, W.shape[1]).to(dtype).t()) == "dense"
    values = Wd.values.clone().requires_grad_()
    x32 = x.to(dtype).requires_grad_()
    got = sk.linear(x32, Wd.with_values(values), bias.to(dtype))
    want = x @ dense.t() + bias
    flat = x.reshape(-1, W.shape[1])
    bound = (spmm_bound(dense, flat.t()).t() + bias.abs()).reshape(want.shape)
    assert got.dtype == dtype
    assert_close(got, want, bound, dtype)
    with torch.no_grad():  # repeat eager calls: the plan remembered for the signature
        again = [sk.linear(x32, Wd, bias.to(dtype)) for _ in range(3)]
    assert all(torch.equal(a, got.detach()) for a in again)
    grad = randn(*got.shape, gen=gen).to(dtype).double()
    got.backward(grad.to(dtype))
    g = grad.reshape(-1, 97)
    assert_close(x32.grad, (g @ dense).reshape(x.shape), (g.abs() @ dense.abs()).reshape(x.shape),
                 dtype)  # fmt: skip
    kept = dense != 0
    dw_bound = (g.abs().t() @ flat.abs()) * kept
    got_dw = Wd.with_values(values.grad).to_dense()
    assert_close(got_dw, (g.t() @ flat) * kept, dw_bound, dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_forced_dense_in_half_precision_is_fp32_rounded_once(dtype, gen):
    """The dense backend's half precision on the CPU: the fp32 result rounded once (bitwise),
    for spmm, N:M spmm with its transpose, and sddmm."""
    A = random_csr(33, 40, 0.4, gen, dtype=dtype)
    B, bias = randn(40, 21, gen=gen, dtype=dtype), randn(33, gen=gen, dtype=dtype)
    got = sk.spmm(A, B, bias, "gelu", backend="dense")
    wide = sk.spmm(A.to(dtype=torch.float32), B.float(), bias.float(), "gelu", backend="dense")
    assert got.dtype == dtype and torch.equal(got, wide.to(dtype))
    W = random_nm(24, 32, 2, 8, gen, dtype=dtype)
    x = randn(5, 32, gen=gen, dtype=dtype)
    got = sk.linear(x, W, backend="dense")
    assert torch.equal(
        got, sk.linear(x.float(), W.to(dtype=torch.float32), backend="dense").to(dtype)
    )
    X, Y = randn(33, 7, gen=gen, dtype=dtype), randn(40, 7, gen=gen, dtype=dtype)
    S = sk.sddmm(X, Y, A, backend="dense")
    wide = sk.sddmm(X.float(), Y.float(), A.to(dtype=torch.float32), backend="dense")
    assert S.dtype == dtype and torch.equal(S.values, wide.values.to(dtype))


def test_an_expanded_b_never_goes_to_torch_sparse_for_either_format(gen):
    """torch's CSR matmul materializes an expanded B (a 0.5 MB column read as 1.6 GB): its
    reasons refuse one, but only CSR problems said that B was expanded; N:M went there."""
    B = randn(64, 1, gen=gen).expand(64, 300)
    csr = random_csr(32, 64, 0.5, gen)
    nm = random_nm(32, 64, 2, 4, gen)
    problems = {
        "csr": csr_problem(csr.row_offsets, csr.column_indices, csr.values, B),
        "nm": nm_problem(nm.values, B, 2, 4, 1, 1, False),
    }
    for kind, problem in problems.items():
        op = "spmm_csr" if kind == "csr" else "spmm_nm"
        assert problem.facts["expanded"], kind
        assert _dispatch.choose(op, problem, None) != "torch_sparse", kind
        with pytest.raises(ValueError, match="expanded view"):
            _dispatch.choose(op, problem, "torch_sparse")
    for W in (csr, nm):
        assert_close(sk.spmm(W, B), W.to_dense() @ B, spmm_bound(W.to_dense(), B), B.dtype)
