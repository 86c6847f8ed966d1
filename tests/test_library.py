"""Registration: opcheck on every registered op, torch.compile(fullgraph=True) on every public
op, and the dispatch rules (forced backends, reasons for rejection)."""

import pytest
import torch

import sparsekernels as sk
from _helpers import randn, random_csr, random_nm
from sparsekernels.ops import _dispatch


def _csr_args(gen, with_grad=True):
    A = random_csr(9, 7, 0.5, gen)
    t, perm = A.pattern.transpose()
    return A, (t.row_offsets, t.column_indices, perm)


def test_opcheck_spmm_csr(gen):
    A, (t_ro, t_ci, t_perm) = _csr_args(gen)
    for activation in ("none", "relu", "gelu"):
        args = (
            A.row_offsets,
            A.column_indices,
            A.values.clone().requires_grad_(),
            randn(7, 5, gen=gen).requires_grad_(),
            randn(9, gen=gen).requires_grad_(),
            A.row_order,
            t_ro,
            t_ci,
            t_perm,
            activation,
            "reference",
        )
        torch.library.opcheck(torch.ops.sparsekernels.spmm_csr.default, args)


def test_opcheck_sddmm_and_softmax(gen):
    A, (t_ro, t_ci, t_perm) = _csr_args(gen)
    x, y = randn(9, 4, gen=gen).requires_grad_(), randn(7, 4, gen=gen).requires_grad_()
    torch.library.opcheck(
        torch.ops.sparsekernels.sddmm_csr.default,
        (A.row_offsets, A.column_indices, x, y, t_ro, t_ci, t_perm, "reference"),
    )
    values = A.values.clone().requires_grad_()
    torch.library.opcheck(
        torch.ops.sparsekernels.sparse_softmax.default, (A.row_offsets, values, 0.7, "reference")
    )
    probs = sk.sparse_softmax(A).values
    torch.library.opcheck(
        torch.ops.sparsekernels.sparse_softmax_backward.default,
        (A.row_offsets, probs, randn(A.nnz, gen=gen), 0.7, "reference"),
    )


@pytest.mark.parametrize("transpose", [False, True])
def test_opcheck_nm(transpose, gen):
    W = random_nm(6, 16, 2, 8, gen, vector=2)
    b = randn(6 if transpose else 16, 3, gen=gen).requires_grad_()
    args = (
        W.values.clone().requires_grad_(),
        W.indices,
        b,
        None if transpose else randn(6, gen=gen),
        "none" if transpose else "gelu",
        2,
        8,
        2,
        1,
        transpose,
        "reference",
    )
    torch.library.opcheck(torch.ops.sparsekernels.spmm_nm.default, args)
    torch.library.opcheck(
        torch.ops.sparsekernels.sddmm_nm.default,
        (W.indices, randn(6, 3, gen=gen), randn(16, 3, gen=gen), 2, 8, 2, 1, "reference"),
    )


@pytest.mark.parametrize("columns", [1, 5])
@pytest.mark.parametrize("backend", ["triton", "dense", "reference"])
def test_opcheck_column_major_b(columns, backend, gen):
    """The triton and dense backends write W @ x^T in x^T's column-major order (CSR on triton:
    at 2-16 columns, the few-token walk), so linear's result is contiguous; each fake must
    promise the strides its backend returns."""
    W, A = random_nm(6, 16, 2, 8, gen), random_csr(6, 16, 0.4, gen)
    b = randn(columns, 16, gen=gen).t()
    bias = randn(6, gen=gen)
    nm_args = (W.values, W.indices, b, bias, "gelu", 2, 8, 1, 1, False, backend)
    csr_args = (A.row_offsets, A.column_indices, A.values, b, bias, A.row_order,
                None, None, None, "relu", backend)  # fmt: skip
    ops = [(torch.ops.sparsekernels.spmm_nm.default, nm_args)]
    if backend != "reference":  # W^T @ b, the backward of x (triton: the CSR kernel on W^T)
        b_t = randn(columns, 6, gen=gen).t()
        t_args = (W.values, W.indices, b_t, None, "none", 2, 8, 1, 1, True, backend)
        ops.append((torch.ops.sparsekernels.spmm_nm.default, t_args))
    ops.append((torch.ops.sparsekernels.spmm_csr.default, csr_args))
    for op, args in ops:
        out = op(*args)
        if backend != "reference":
            assert out.t().is_contiguous(), (op, backend)
        torch.library.opcheck(op, args, test_utils=("test_faketensor",))


def test_compile_fullgraph_every_op(gen):
    A = random_csr(9, 7, 0.5, gen)
    W = random_nm(5, 8, 2, 4, gen)
    causal = sk.CSRMatrix.from_dense(torch.ones(6, 6, dtype=torch.float64).tril())
    diagonal = sk.CSRMatrix.from_dense(torch.eye(5, 5, dtype=torch.float64))

    def program(values, B, x, q):
        A2 = A.with_values(values)
        out = sk.spmm(A2, B, activation="relu").sum() + sk.linear(x, W).sum()
        out = out + sk.linear(B.t(), A2).sum() + sk.spmm(A2.t(), sk.spmm(A2, B)).sum()
        S = sk.sddmm(B.t(), B.t(), diagonal)
        out = out + (sk.sparse_softmax(S, 0.5).values * S.values).sum()
        return out + sk.sparse_attention(q, q, q, causal).sum()

    values = A.values.clone().requires_grad_()
    B = randn(7, 5, gen=gen).requires_grad_()
    x = randn(3, 8, gen=gen).requires_grad_()
    q = randn(1, 2, 6, 4, gen=gen).requires_grad_()
    eager = program(values, B, x, q)
    compiled = torch.compile(program, fullgraph=True, backend="inductor")(values, B, x, q)
    torch.testing.assert_close(compiled, eager)
    compiled.backward()
    assert all(t.grad is not None for t in (values, B, x, q))


def test_eager_inference_skips_the_ops_with_the_same_bits(gen, monkeypatch):
    """Without gradients the ops run their backend directly (no custom-op dispatch); with them,
    or under torch.compile, through the op. Both give the same bits."""
    from sparsekernels.ops import _library

    A, W = random_csr(9, 7, 0.5, gen), random_nm(5, 8, 2, 4, gen)
    B, x, X = randn(7, 5, gen=gen), randn(3, 8, gen=gen), randn(6, 4, gen=gen)
    P = random_csr(6, 6, 0.5, gen)
    calls, twins = [], []
    for name in ("spmm_csr", "spmm_nm", "sddmm_csr", "sparse_softmax"):
        op = getattr(_library, name)
        monkeypatch.setattr(_library, name, lambda *a, op=op: calls.append(1) or op(*a))
    for name in ("spmm_csr_eager", "spmm_nm_eager"):
        twin = getattr(_library, name)
        monkeypatch.setattr(_library, name, lambda *a, twin=twin: twins.append(1) or twin(*a))

    def program(values, X):
        probs = sk.sparse_softmax(sk.sddmm(X, X, P), 0.5).values
        return sk.spmm(A.with_values(values), B), sk.linear(x, W), probs

    with torch.no_grad():
        eager = program(A.values, X)
    assert not calls
    graded = program(A.values.clone().requires_grad_(), X.clone().requires_grad_())
    # sddmm and softmax through their ops; spmm through its autograd.Function twin; W's values
    # need no gradient, so its product still runs the backend directly
    assert len(calls) == 2 and len(twins) == 1
    assert all(torch.equal(a, b.detach()) for a, b in zip(eager, graded, strict=True))
    with torch.no_grad():
        compiled = torch.compile(program, fullgraph=True, backend="eager")(A.values, X)
    assert all(torch.equal(a, b) for a, b in zip(eager, compiled, strict=True))


@pytest.mark.parametrize("backend", ["reference", "dense"])
def test_eager_twin_gives_the_ops_gradients(backend, gen, monkeypatch):
    """With a gradient, eager spmm and linear run the custom op's autograd.Function twin (the
    same forward, setup and backward functions): the same bits as the op itself."""
    from sparsekernels.ops import _library

    A, W = random_csr(9, 7, 0.5, gen), random_nm(5, 8, 2, 4, gen)
    B, x = randn(7, 5, gen=gen), randn(3, 8, gen=gen)
    bias_a, bias_w = randn(9, gen=gen), randn(5, gen=gen)
    g_a, g_w = randn(9, 5, gen=gen), randn(3, 5, gen=gen)

    def run():
        leaves = [t.clone().requires_grad_() for t in (A.values, B, bias_a, W.values, x, bias_w)]
        va, b, ba, vw, xx, bw = leaves
        out_a = sk.spmm(A.with_values(va), b, ba, activation="gelu", backend=backend)
        out_w = sk.linear(xx, W.with_values(vw), bw, backend=backend)
        torch.autograd.backward([out_a, out_w], [g_a, g_w])
        return [out_a.detach(), out_w.detach(), *(t.grad for t in leaves)]

    twin = run()
    monkeypatch.setattr(_library, "eager", lambda *tensors: False)  # through the custom ops
    op = run()
    assert all(torch.equal(a, b) for a, b in zip(twin, op, strict=True))


def test_forced_backend_and_reasons(gen, monkeypatch):
    A = random_csr(5, 4, 0.5, gen)
    B = randn(4, 3, gen=gen)
    with pytest.raises(ValueError, match="backend must be one of"):
        sk.spmm(A, B, backend="cusparse-typo")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # CPU tensors without the interpreter
    with pytest.raises(ValueError, match="'triton' cannot run sddmm_csr: tensors are on cpu"):
        sk.sddmm(randn(5, 2, gen=gen), randn(4, 2, gen=gen), A, backend="triton")
    problem = _dispatch.Problem(torch.device("cpu"), torch.float32, {"n": 3, "batch": 1})
    reasons = _dispatch.explain("spmm_csr", problem)
    assert reasons["reference"] == [] and reasons["triton"]  # triton only when forced on CPU
    assert reasons["torch_sparse"] == []  # torch's sparse CSR matmul comes first on CPU
    assert _dispatch.choose("spmm_csr", problem) == "torch_sparse"


def test_no_backend_lists_every_reason():
    problem = _dispatch.Problem(torch.device("cpu"), torch.float32, {"n": 3, "batch": 10**6})
    with pytest.raises(ValueError, match="grid limit"):
        _dispatch.choose("spmm_csr", problem, "triton")
