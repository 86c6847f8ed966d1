"""2:16 weights run through a copy stored as 2:8 (ops/_nm_stored_as.py): the copy holds the
very same weight, is built once per weight at its versions, and linear's route takes it at
17-48 tokens in bf16 (kernels/nm_alias_tuning.nm_stored_as)."""

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, randn, random_nm, spmm_bound
from sparsekernels.ops._nm_stored_as import stored_as, stored_pattern

BF16 = torch.bfloat16


@pytest.mark.parametrize("vector", [1, 8, 3])
def test_stored_copy_holds_the_same_weight(vector, gen):
    """Every entry of the 2:16 weight (a partial vector: 70 rows), zeros in the slots of the
    8-groups that keep fewer than 2, twice the slots, offsets the format accepts (checked)."""
    W = random_nm(70, 16 * 9, 2, 16, gen, vector, 1, BF16)
    W.values[0, 0] = float("inf")  # (a free slot beside it stays 0, not inf * 0)
    values, indices = stored_as(W.values, W.indices, 2, 16, vector, (2, 8))
    copy = sk.NMMatrix(values, indices, W.shape, 2, 8, vector)
    assert torch.equal(copy.to_dense(), W.to_dense())
    assert values.shape == (70, 2 * W.values.shape[1])


def test_stored_copy_is_kept_until_an_edit(gen):
    W = random_nm(16, 64, 2, 16, gen, 1, 1, BF16)
    first = stored_as(W.values, W.indices, 2, 16, 1, (2, 8))
    assert stored_as(W.values, W.indices, 2, 16, 1, (2, 8)) is first
    W.values.mul_(2)  # an in-place edit (an optimizer step)
    again = stored_as(W.values, W.indices, 2, 16, 1, (2, 8))
    assert again is not first
    assert torch.equal(sk.NMMatrix(*again, W.shape, 2, 8).to_dense(), W.to_dense())
    with torch.inference_mode():  # (inference tensors carry no version: built each call)
        values, indices = W.values.clone(), W.indices.clone()
        assert stored_as(values, indices, 2, 16, 1, (2, 8)) is not stored_as(
            values, indices, 2, 16, 1, (2, 8)
        )


def test_stored_pattern_rule():
    """2:16 (v = 1 or 8, no blocks) in bf16 at 17-48 tokens; nothing else."""
    assert [stored_pattern(2, 16, 1, 1, t, BF16) for t in (16, 17, 48, 49)] == [
        None,
        (2, 8),
        (2, 8),
        None,
    ]
    assert stored_pattern(2, 16, 8, 1, 24, BF16) is None  # the pairs kernel takes it
    assert stored_pattern(2, 16, 4, 1, 24, BF16) is None  # untimed
    assert stored_pattern(2, 16, 1, 2, 24, BF16) is None  # blocks
    assert stored_pattern(2, 16, 1, 1, 24, torch.float16) is None
    assert stored_pattern(2, 16, 1, 1, 24, torch.float32) is None
    assert stored_pattern(4, 32, 8, 1, 24, BF16) is None  # (4:16 lost too)
    assert stored_pattern(2, 8, 1, 1, 24, BF16) is None


def test_dense_preference_reads_2_16_as_2_8():
    from sparsekernels.ops._dense import nm_prefers_dense
    from sparsekernels.ops.spmm import nm_problem

    values = torch.empty(4096, 1024, dtype=BF16)

    def prefers(tokens, n, m):
        b = torch.empty(4096, tokens, dtype=BF16)
        return nm_prefers_dense(nm_problem(values[:, : 4096 // m * n], b, n, m, 1, 1, False))

    assert prefers(24, 2, 16) == prefers(24, 2, 8)


@pytest.mark.parametrize(("vector", "tokens"), [(1, 17), (1, 45)])
def test_triton_route_takes_the_stored_copy(vector, tokens, gen, monkeypatch):
    """The Triton backend runs 2:16 at 17-48 tokens on the 2:8 copy, against float64 (a
    partial vector and row tile); at 16 tokens on 2:16 itself."""
    from sparsekernels.ops import _triton_nm

    seen, store = [], _triton_nm.stored_as
    monkeypatch.setattr(_triton_nm, "stored_as", lambda *a: seen.append(a[-1]) or store(*a))
    W = random_nm(70, 16 * 5, 2, 16, gen, vector, 1, BF16)
    for n_tokens in (tokens, 16):
        x = randn(n_tokens, W.shape[1], gen=gen, dtype=BF16)
        got = sk.linear(x, W, backend="triton")
        want = x.double() @ W.to_dense().double().t()
        assert_close(got, want, spmm_bound(x, W.to_dense().t()), BF16)
    assert seen == [(2, 8)]


@pytest.mark.gpu
@pytest.mark.parametrize(("vector", "tokens"), [(1, 17), (1, 24), (1, 48), (1, 41)])
def test_linear_runs_2_16_as_2_8_on_gpu(vector, tokens, gen, monkeypatch):
    """2:16 through linear's whole route at 17-48 tokens on the GPU: the 2:8 copy, compiled,
    against float64; the gradients of x and the kept values as the masked dense product's."""
    from sparsekernels.ops import _triton_nm

    seen, store = [], _triton_nm.stored_as
    monkeypatch.setattr(_triton_nm, "stored_as", lambda *a: seen.append(a[-1]) or store(*a))
    W = random_nm(4096 + vector, 2048 + 16, 2, 16, gen, vector, 1, BF16, "cuda")
    x = randn(tokens, W.shape[1], gen=gen, dtype=BF16, device="cuda")
    dense = W.to_dense()
    got = sk.linear(x, W)
    assert_close(got, x.double() @ dense.double().t(), spmm_bound(x, dense.t()), BF16)
    assert seen == [(2, 8)]
    values = W.values.clone().requires_grad_()
    x.requires_grad_()
    grad = randn(tokens, W.shape[0], gen=gen, dtype=BF16, device="cuda")
    sk.linear(x, W.with_values(values)).backward(grad)
    x64, values64 = x.detach().double().requires_grad_(), values.detach().double()
    values64.requires_grad_()
    weight64 = W.with_values(values64).to_dense()  # (differentiable in the values)
    (x64 @ weight64.t()).backward(grad.double())
    assert_close(x.grad, x64.grad, spmm_bound(grad, dense), BF16)
    bound = spmm_bound(grad.t(), x).gather(1, W.column_indices())  # (each kept position's)
    assert_close(values.grad, values64.grad, bound, BF16)
