"""The condensed-K N:M kernel for 8-row vectors (two vectors a 16-row tensor-core tile, the
values as stored against B's rows gathered once a vector): in the interpreter on CPU (small
shapes; bf16 upcast there) and compiled on CUDA (gpu), against float64 with poisoned outputs."""

import pytest
import torch

from _helpers import (
    KERNEL_DEVICES,
    assert_close,
    randn,
    random_nm,
    skip_interpreter_on_gpu_machine,
    spmm_bound,
)
from sparsekernels.kernels.spmm_nm_pairs import spmm_nm_pairs, supports

# (n, m, vector): the m = 16 / 32 patterns it is for, a 16-row vector, a group that is not a
# power of two wide, and an n that is not (groups straddle steps)
PATTERNS = [(2, 16, 8), (4, 32, 8), (1, 32, 16), (2, 8, 64), (3, 8, 8), (2, 6, 8)]


def _launch_poisoned(
    W, B, bias=None, activation="none", pairs=1, block_s=16, split=1, blocked=False
):
    out = torch.full((W.shape[0], B.shape[1]), float("nan"), dtype=B.dtype, device=B.device)
    spmm_nm_pairs(
        values=W.values, indices=W.indices, b=B, bias=bias, out=out, n=W.n, m=W.m,
        vector=W.vector, activation=activation, pairs=pairs, block_s=block_s, block_n=16,
        num_warps=4, num_stages=5 if blocked else 2, split=split, blocked=blocked,
    )  # fmt: skip
    return out


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("N", [1, 20])
@pytest.mark.parametrize(("groups", "blocked"), [(5, False), (5, True), (8, True)])
def test_every_element_written(device, pattern, N, groups, blocked, gen):
    """A partial vector and pair of rows, slots off the step, tokens off the column tile; the
    blocked step with its offsets read by the byte (5 groups: slots no multiple of 4, but
    4:32's) and 4 to a word (8 groups)."""
    skip_interpreter_on_gpu_machine(device)
    n, m, vector = pattern
    rows = 2 * vector + 11
    W = random_nm(rows, groups * m, n, m, gen, vector, 1, torch.float32, device)
    B = randn(groups * m, N, gen=gen, dtype=torch.float32, device=device)
    got = _launch_poisoned(W, B, blocked=blocked)
    assert_close(got, W.to_dense().double() @ B.double(), spmm_bound(W.to_dense(), B), B.dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    ("pairs", "split", "blocked"), [(1, 1, False), (2, 3, False), (2, 3, True)]
)
def test_half_precision_bias_activation_split(device, dtype, pairs, split, blocked, gen):
    """16-bit values and B, bias and GELU in the epilogue, two pairs a program, the slots in
    three ranges summed by the second kernel; B padded past N (read, never stored); the
    blocked step (offsets 4 to a word)."""
    skip_interpreter_on_gpu_machine(device)
    W = random_nm(8 * 9, 16 * 12, 2, 16, gen, 8, 1, dtype, device)
    x = randn(24, W.shape[1], gen=gen, dtype=dtype, device=device)
    B = torch.cat([x.t(), randn(W.shape[1], 8, gen=gen, dtype=dtype, device=device)], dim=1)
    bias = randn(W.shape[0], gen=gen, dtype=dtype, device=device)
    got = _launch_poisoned(W, B, bias, "gelu", pairs, 8, split, blocked)[:, :24]
    dense = W.to_dense().double()
    want = torch.nn.functional.gelu(dense @ x.t().double() + bias.double()[:, None])
    bound = spmm_bound(W.to_dense(), x.t()) + bias.double().abs()[:, None]
    assert_close(got, want, bound, dtype)


def test_offsets_read_as_words_only_where_aligned(gen):
    """The blocked step reads a row's offsets 4 to an int32 word only where each row starts on
    4 bytes and holds whole words."""
    from sparsekernels.kernels.spmm_nm_pairs import _words_aligned

    W = random_nm(16, 8 * 16, 2, 16, gen, 8, 1, torch.float32)  # 16 slots a row
    assert _words_aligned(W.indices, 16)
    assert not _words_aligned(W.indices, 10)
    assert not _words_aligned(W.indices[:, 1:], 15)
    wide = torch.zeros(2, 20, dtype=torch.uint8)
    assert not _words_aligned(wide[:, 2:18], 16)  # (rows start 2 bytes off)


def test_bad_arguments_are_refused(gen):
    W = random_nm(16, 32, 2, 16, gen, 8, 1, torch.float32)
    B = randn(32, 4, gen=gen, dtype=torch.float32)
    out = torch.empty(16, 4)
    args = dict(values=W.values, indices=W.indices, bias=None, out=out, n=2, m=16,
                activation="none", pairs=1, block_n=16, num_warps=4, num_stages=2)  # fmt: skip
    with pytest.raises(ValueError, match="b needs at least out's 4 columns, got 3"):
        spmm_nm_pairs(b=B[:, :3], vector=8, block_s=16, **args)
    with pytest.raises(ValueError, match="b needs unit stride along its rows"):
        spmm_nm_pairs(b=B.t().contiguous().t(), vector=8, block_s=16, **args)
    with pytest.raises(ValueError, match="block_s must be a power of two of at least 8"):
        spmm_nm_pairs(b=B, vector=8, block_s=12, **args)
    with pytest.raises(ValueError, match="vector must be a multiple of 8, got 4"):
        spmm_nm_pairs(b=B, vector=4, block_s=16, **args)
    assert supports(8, 1, 4096, torch.bfloat16) and supports(64, 1, 4096, torch.float32)
    assert not supports(4, 1, 4096, torch.bfloat16) and not supports(8, 2, 4096, torch.bfloat16)
