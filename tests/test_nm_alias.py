"""1:m weights read as 2:2m (ops/_nm_alias.py): the offsets the sparse-tensor-core route
reads describe the very same weight, built once per offsets tensor."""

import pytest
import torch

import sparsekernels as sk
from _helpers import random_nm
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
