"""1:m weights read as 2:2m (ops/_nm_alias.py): the offsets the sparse-tensor-core route
reads describe the very same weight, built once per offsets tensor; past its tokens (17-64)
linear's whole route reads 1:4 and 1:2 as 2:8 and 2:4."""

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, randn, random_nm, spmm_bound
from sparsekernels.ops._nm_alias import aliased_indices, sparse_core_pattern


@pytest.mark.parametrize(("m", "vector"), [(2, 1), (4, 1), (4, 3), (2, 64)])
def test_aliased_offsets_describe_the_same_weight(m, vector, gen):
    W = random_nm(70, 8 * m, 1, m, gen, vector)
    n2, m2 = sparse_core_pattern(1, m, 1, W.shape[1])
    assert (n2, m2) == (2, 2 * m)
    read = sk.NMMatrix(W.values, aliased_indices(W.indices, m), W.shape, n2, m2, vector)
    assert torch.equal(read.to_dense(), W.to_dense())


def test_only_whole_pairs_of_unblocked_groups_alias():
    assert sparse_core_pattern(1, 4, 1, 12) == (1, 4)  # an unpaired group
    assert sparse_core_pattern(1, 4, 2, 16) == (1, 4)  # blocks
    assert sparse_core_pattern(2, 8, 1, 16) == (2, 8)
    assert sparse_core_pattern(1, 8, 1, 16) == (1, 8)  # 2:16 has no sparse-core form


def test_aliased_offsets_are_kept_until_an_edit(gen):
    W = random_nm(8, 32, 1, 4, gen)
    first = aliased_indices(W.indices, 4)
    assert aliased_indices(W.indices, 4) is first
    W.indices[0, :2] = torch.tensor([3, 0], dtype=torch.uint8)  # an in-place edit
    again = aliased_indices(W.indices, 4)
    assert again is not first and again[0, :2].tolist() == [3, 4]


def test_routed_pattern_is_2_2m_where_the_alias_measured_faster():
    """1:4 (bf16, fp16) and 1:2 (bf16) with v <= 8 at 17-64 tokens route as 2:8 / 2:4; other
    token counts, dtypes, vectors, blocks and unpaired groups keep 1:m."""
    from sparsekernels.ops._nm_alias import routed_pattern

    bf16, fp16 = torch.bfloat16, torch.float16
    assert [routed_pattern(1, 4, 1, 1, 4096, t, bf16) for t in (16, 17, 64, 65)] == [
        (1, 4),
        (2, 8),
        (2, 8),
        (1, 4),
    ]
    assert routed_pattern(1, 2, 8, 1, 4096, 24, bf16) == (2, 4)
    assert routed_pattern(1, 4, 8, 1, 4096, 24, fp16) == (2, 8)
    assert routed_pattern(1, 2, 1, 1, 4096, 24, fp16) == (1, 2)  # untimed
    assert routed_pattern(1, 4, 1, 1, 4096, 24, torch.float32) == (1, 4)
    assert routed_pattern(1, 4, 16, 1, 4096, 24, bf16) == (1, 4)
    assert routed_pattern(1, 4, 1, 2, 4096, 24, bf16) == (1, 4)  # blocks
    assert routed_pattern(1, 4, 1, 1, 4100, 24, bf16) == (1, 4)  # an unpaired group
    assert routed_pattern(2, 8, 1, 1, 4096, 24, bf16) == (2, 8)


def test_dense_preference_reads_1m_as_2_2m():
    """The dense backend no longer takes 1:4 at 24 tokens on a GPU-sized weight (2:8's route
    keeps it); at 128 tokens, outside the window, the preference is 1:4's own."""
    from sparsekernels.ops._dense import nm_prefers_dense
    from sparsekernels.ops.spmm import nm_problem

    values = torch.empty(4096, 1024, dtype=torch.bfloat16)

    def prefers(tokens, n, m):
        b = torch.empty(4096, tokens, dtype=torch.bfloat16)
        return nm_prefers_dense(nm_problem(values[:, : 4096 // m * n], b, n, m, 1, 1, False))

    assert not prefers(24, 1, 4) and prefers(24, 2, 8) == prefers(24, 1, 4)
    assert prefers(128, 1, 4)


@pytest.mark.parametrize(("m", "vector", "tokens"), [(4, 1, 17), (2, 8, 24), (4, 4, 64)])
def test_triton_route_reads_1m_as_2_2m(m, vector, tokens, gen, monkeypatch):
    """The Triton backend at 17-64 tokens runs 1:m on 2:2m's offsets, against float64 (a
    partial vector and row tile)."""
    from sparsekernels.ops import _triton_nm

    seen, alias = [], _triton_nm.aliased_indices
    monkeypatch.setattr(
        _triton_nm, "aliased_indices", lambda indices, m: seen.append(m) or alias(indices, m)
    )
    W = random_nm(70, 16 * m, 1, m, gen, vector, 1, torch.bfloat16)
    x = randn(tokens, W.shape[1], gen=gen, dtype=torch.bfloat16)
    got = sk.linear(x, W, backend="triton")
    want = x.double() @ W.to_dense().double().t()
    assert_close(got, want, spmm_bound(x, W.to_dense().t()), torch.bfloat16)
    assert seen == [m]


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("m", "vector", "tokens", "dtype"),
    [(4, 1, 17, torch.bfloat16), (4, 8, 32, torch.float16), (2, 1, 48, torch.bfloat16),
     (2, 4, 64, torch.bfloat16)],
)  # fmt: skip
def test_linear_routes_1m_as_2_2m_without_densifying_on_gpu(m, vector, tokens, dtype, gen,
                                                            monkeypatch):  # fmt: skip
    """1:4 and 1:2 at 17-64 tokens through linear on the GPU: 2:2m's route, no densified
    weight (which they took before, 2-3x slower), compiled, against float64."""
    from sparsekernels.ops import _dense

    def refused(*args):
        raise AssertionError("densified")

    W = random_nm(4096 + vector, 2048 + 4 * m, 1, m, gen, vector, 1, dtype, "cuda")
    x = randn(tokens, W.shape[1], gen=gen, dtype=dtype, device="cuda")
    dense = W.to_dense()
    monkeypatch.setattr(_dense, "densify_nm", refused)
    got = sk.linear(x, W)
    want = x.double() @ dense.double().t()
    assert_close(got, want, spmm_bound(x, dense.t()), dtype)
