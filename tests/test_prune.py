"""Pruning masks: unstructured magnitude and N:M (element-, vector- and block-wise)."""

from __future__ import annotations

import math
import zlib

import pytest
import torch

from sparsekernels.prune import magnitude_mask, nm_mask, topk_mask

RATIOS = [
    (1, 2), (2, 4), (1, 4), (2, 8), (1, 8), (4, 8), (4, 16), (8, 16),
    (16, 32), (8, 32), (4, 32), (3, 32), (1, 32),
]  # fmt: skip
CONFIGS = (
    [(n, m, v, 1) for n, m in RATIOS for v in (1, 4)]
    + [(2, 8, 1, 2), (4, 16, 1, 4), (16, 32, 1, 8), (4, 8, 4, 4), (4, 16, 4, 4), (8, 32, 4, 4)]
    + [(8, 16, 2, 8), (2, 4, 3, 2), (1, 256, 1, 1), (64, 256, 2, 32)]
)
FLOATS = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


def seed_of(*args) -> int:
    return zlib.crc32(repr(args).encode())


def weight(*shape, seed, dtype=torch.float64):
    w = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return w.to(dtype)


def magnitude(x: float) -> float:
    return math.inf if math.isnan(x) else abs(x)


def reference_nm_mask(w: torch.Tensor, n: int, m: int, vector: int, block: int) -> torch.Tensor:
    """Brute force in float64 Python: score each aligned vector x block candidate, keep the best."""
    rows, cols = w.shape
    values = w.double().tolist()
    mask = torch.zeros(rows, cols, dtype=torch.bool)
    for r0 in range(0, rows, vector):
        group_rows = range(r0, min(rows, r0 + vector))
        for c0 in range(0, cols, m):
            scores = [
                sum(magnitude(values[r][c]) for r in group_rows for c in range(b, b + block))
                for b in range(c0, c0 + m, block)
            ]
            best = sorted(range(len(scores)), key=lambda i: -scores[i])[: n // block]
            for i in best:
                for r in group_rows:
                    mask[r, c0 + i * block : c0 + (i + 1) * block] = True
    return mask


# --------------------------------------------------------------------------- magnitude_mask
@pytest.mark.parametrize("shape", [(7,), (10, 13), (4, 5, 6), (1, 1), (3, 64)])
@pytest.mark.parametrize("sparsity", [0.0, 0.1, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0])
def test_magnitude_mask_keeps_the_largest(shape, sparsity):
    w = weight(*shape, seed=seed_of(shape, sparsity))
    mask = magnitude_mask(w, sparsity)
    assert mask.dtype == torch.bool and mask.shape == w.shape
    assert int(mask.sum()) == round((1 - sparsity) * w.numel())
    kept, dropped = w[mask].abs(), w[~mask].abs()
    if kept.numel() and dropped.numel():
        assert float(kept.min()) > float(dropped.max())


@pytest.mark.parametrize("numel", [1, 2, 3, 5, 9, 10, 11, 101])
@pytest.mark.parametrize("sparsity", [0.05, 0.15, 0.25, 1 / 3, 0.35, 0.5, 2 / 3, 0.85])
def test_magnitude_mask_count_rounds_like_its_docstring(numel, sparsity):
    mask = magnitude_mask(weight(numel, seed=numel), sparsity)
    assert int(mask.sum()) == round((1 - sparsity) * numel)


@pytest.mark.parametrize("dtype", FLOATS)
def test_magnitude_mask_low_precision(dtype):
    w = weight(40, 50, seed=1, dtype=dtype)
    mask = magnitude_mask(w, 0.8)
    assert int(mask.sum()) == 400
    # Ties are possible in low precision, so compare with >=.
    assert float(w[mask].abs().min()) >= float(w[~mask].abs().max())


def test_magnitude_mask_sparsity_bounds():
    w = weight(6, 7, seed=2)
    assert bool(magnitude_mask(w, 0).all()) and bool(magnitude_mask(w, 0.0).all())
    assert not bool(magnitude_mask(w, 1).any()) and not bool(magnitude_mask(w, 1.0).any())
    assert magnitude_mask(torch.zeros(0, 3), 0.5).shape == (0, 3)


def test_magnitude_mask_nan_and_inf_are_largest():
    w = weight(10, 10, seed=3)
    w[2, 3], w[7, 1], w[5, 5] = float("nan"), float("-inf"), float("nan")
    mask = magnitude_mask(w, 0.98)  # keeps 2: both NaNs, ahead of the -inf
    assert mask.nonzero().tolist() == [[2, 3], [5, 5]]
    mask = magnitude_mask(w, 0.97)
    assert mask.nonzero().tolist() == [[2, 3], [5, 5], [7, 1]]
    mask = magnitude_mask(w, 0.9)
    kept = w[mask]
    assert int(kept.isnan().sum()) == 2 and int(kept.isinf().sum()) == 1
    finite = w.isfinite()
    assert float(w[mask & finite].abs().min()) > float(w[~mask].abs().max())


def test_magnitude_mask_float64_near_ties():
    w = torch.tensor([1.0, 1.0 + 1e-12, -(1.0 + 2e-12), 0.5], dtype=torch.float64)
    assert magnitude_mask(w, 0.75).tolist() == [False, False, True, False]
    assert magnitude_mask(w, 0.5).tolist() == [False, True, True, False]


def test_magnitude_mask_does_not_touch_the_weight():
    w = weight(5, 8, seed=4).requires_grad_(True)
    before = w.detach().clone()
    mask = magnitude_mask(w, 0.5)
    assert not mask.requires_grad and torch.equal(w.detach(), before)


@pytest.mark.parametrize("per_row", [False, True])
def test_topk_mask_takes_bool_scores(per_row):
    """As int scores (torch's topk takes no bool: it raised)."""
    scores = torch.tensor([[True, False, True, False]])
    mask = topk_mask(scores, 0.5, per_row=per_row)
    assert mask.tolist() == [[True, False, True, False]]


@pytest.mark.parametrize("sparsity", [-0.1, 1.0001, 2, float("nan"), "0.5", None, True, [0.5]])
def test_magnitude_mask_rejects_bad_sparsity(sparsity):
    with pytest.raises(ValueError, match=r"sparsity must be a number in \[0, 1\]"):
        magnitude_mask(weight(4, 4, seed=5), sparsity)


def test_magnitude_mask_rejects_bad_weight():
    with pytest.raises(TypeError, match=r"w must be float"):
        magnitude_mask(torch.arange(10), 0.5)
    with pytest.raises(TypeError, match=r"w must be a torch.Tensor"):
        magnitude_mask([1.0, 2.0], 0.5)


# --------------------------------------------------------------------------- nm_mask
@pytest.mark.parametrize("n, m, vector, block", CONFIGS)
def test_nm_mask_matches_brute_force(n, m, vector, block):
    rows, groups = 10, 2  # 10 rows: a partial last row group for vector 3 and 4
    w = weight(rows, groups * m, seed=seed_of(n, m, vector, block))
    mask = nm_mask(w, n, m, vector, block)
    assert mask.dtype == torch.bool and mask.shape == w.shape and mask.is_contiguous()
    assert torch.equal(mask, reference_nm_mask(w, n, m, vector, block))


@pytest.mark.parametrize("n, m, vector, block", CONFIGS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_nm_mask_structure(n, m, vector, block, dtype):
    rows, groups = 9, 3
    w = weight(rows, groups * m, seed=seed_of("s", n, m, vector, block), dtype=dtype)
    mask = nm_mask(w, n, m, vector, block)
    # Exactly n kept in every group of m consecutive columns of every row.
    assert bool((mask.view(rows, groups, m).sum(-1) == n).all())
    # Rows of one row group share the choice (the last group may be partial).
    for r0 in range(0, rows, vector):
        assert bool((mask[r0 : r0 + vector] == mask[r0]).all())
    # Kept columns come in aligned runs of `block`.
    runs = mask.view(rows, groups * m // block, block)
    assert bool((runs.all(-1) | ~runs.any(-1)).all())
    # Every kept candidate block scores at least as high as every dropped one of its group.
    row_groups = -(-rows // vector)
    scores = torch.zeros(row_groups * vector, groups * m, dtype=torch.float64)
    scores[:rows] = w.double().abs()
    scores = scores.view(row_groups, vector, groups, m // block, block).sum((1, 4))
    keep = mask[::vector].view(row_groups, groups, m // block, block)[..., 0]
    lowest_kept = scores.masked_fill(~keep, math.inf).amin(-1)
    highest_dropped = scores.masked_fill(keep, -math.inf).amax(-1)
    # float32 sums of low-precision magnitudes round; allow that much and no more.
    slack = 0.0 if dtype == torch.float64 else 1e-6 * float(scores.max())
    assert bool((lowest_kept >= highest_dropped - slack).all())


def test_nm_mask_nan_is_largest():
    w = weight(8, 16, seed=6)
    w[1, 3] = float("nan")
    w[6, 12] = float("-inf")
    mask = nm_mask(w, 1, 8)
    assert bool(mask[1, 3]) and bool(mask[6, 12])
    assert torch.equal(mask, reference_nm_mask(w, 1, 8, 1, 1))
    # A NaN elsewhere in a row group decides the whole group's choice.
    mask = nm_mask(w, 1, 8, vector=4)
    assert bool(mask[0:4, 3].all()) and int(mask[0:4, 0:8].sum()) == 4
    assert bool(mask[4:8, 12].all())
    # NaN beats Inf for the one slot.
    w[1, 5] = float("inf")
    assert nm_mask(w, 1, 8)[1, :8].nonzero().flatten().tolist() == [3]
    # ... and makes its whole block win.
    mask = nm_mask(w, 2, 8, block=2)
    assert mask[1, :8].tolist() == [False, False, True, True, False, False, False, False]


def test_nm_mask_float64_near_ties():
    w = torch.tensor([[1.0, 1.0 + 1e-12, 1.0 + 2e-12, 1.0 + 3e-12]], dtype=torch.float64)
    assert nm_mask(w, 1, 2).tolist() == [[False, True, False, True]]
    assert nm_mask(w, 2, 4).tolist() == [[False, False, True, True]]
    assert nm_mask(w, 2, 4, block=2).tolist() == [[False, False, True, True]]


def test_nm_mask_vector_sums_over_the_rows():
    # Per row the first column wins; summed over the two rows, the second does.
    w = torch.tensor([[3.0, 2.0], [0.5, 2.0]], dtype=torch.float64)
    assert nm_mask(w, 1, 2).tolist() == [[True, False], [False, True]]
    assert nm_mask(w, 1, 2, vector=2).tolist() == [[False, True], [False, True]]


def test_nm_mask_rejects_bad_weight():
    with pytest.raises(ValueError, match=r"w must have 2 dim"):
        nm_mask(weight(16, seed=7), 2, 4)
    with pytest.raises(ValueError, match=r"w must have 2 dim"):
        nm_mask(weight(2, 2, 16, seed=7), 2, 4)
    with pytest.raises(TypeError, match=r"w must be float"):
        nm_mask(torch.ones(4, 8, dtype=torch.int32), 2, 4)
    with pytest.raises(TypeError, match=r"w must be a torch.Tensor"):
        nm_mask([[1.0, 2.0]], 1, 2)
