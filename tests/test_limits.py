"""The 2^31 boundary and the launch limits, on the CPU.

Kernels: each runs in Triton's interpreter, which keeps int32 arithmetic int32 as the GPU does,
on strided views whose far elements lie past 2^31 elements from the view's start. The views
live in lazily mapped memory (only the pages a test touches are backed), with a guard of 2^31
elements in front, so an offset that wrapped to a negative int32 reads the guard's zeros and
fails an assertion instead of faulting. Outputs are poisoned with NaN first.

Python side: the size checks that keep a problem past a kernel's limits away from the kernel
(grid axes 1 and 2 hold 65535 programs, axis 0 2^31 - 1) and the index dtype choices, at the
boundary, with meta tensors, expanded views or `_dispatch.explain` where allocation is
impossible.
"""

import importlib

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, randn, random_csr, random_nm, spmm_bound
from sparsekernels.kernels import sddmm_tuning, tuning
from sparsekernels.ops import _dispatch

INT32_MAX = 2**31 - 1
GUARD = 2**31
FAR = 2**24  # a stride that puts element 128 of its dimension at 2^31
NAN = float("nan")

interpreter = pytest.mark.skipif(
    torch.cuda.is_available(), reason="the interpreter runs only on machines without CUDA"
)


def lazy_empty(numel: int, dtype=torch.bfloat16) -> torch.Tensor:
    """An uninitialized CPU tensor: address space, backed only where it is touched."""
    try:
        return torch.empty(numel, dtype=dtype)
    except RuntimeError as error:  # strict overcommit, or too small a machine
        pytest.skip(f"cannot map {numel} elements of address space: {error}")


def far_view(shape, strides, gen, dtype=torch.bfloat16, fill=True) -> torch.Tensor:
    """A view of `shape` and `strides` after a 2^31-element guard, in lazily mapped memory."""
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides, strict=True))
    view = lazy_empty(GUARD + span, dtype).as_strided(shape, strides, GUARD)
    if fill:
        view.copy_(randn(*shape, gen=gen).to(dtype))
    else:
        view.fill_(NAN)
    return view


def past_2_31(t: torch.Tensor) -> bool:
    """Whether t's last element lies 2^31 or more elements from its first."""
    return sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True)) >= 2**31


# ============================================================================ kernels
# (b shape, b strides, out strides): rows of B and of out past 2^31 (row * stride), and a
# transposed B and out (x^T in `linear`: column * stride).
SPMM_LAYOUTS = {
    "rows": ((72, 16), (2**25, 1), (2**30 + 1, 1)),
    "columns": ((64, 144), (1, FAR), (1, FAR)),
}


@interpreter
@pytest.mark.parametrize("layout", SPMM_LAYOUTS)
def test_spmm_csr_kernel_offsets_past_2_31(layout, gen):
    from sparsekernels.kernels import spmm_csr as kernel

    b_shape, b_strides, out_strides = SPMM_LAYOUTS[layout]
    K, N = b_shape
    A = random_csr(3, K, 0.5, gen, torch.bfloat16, empty_rows=False)
    b = far_view(b_shape, b_strides, gen)
    out = far_view((3, N), out_strides, gen, fill=False)
    assert past_2_31(b) and past_2_31(out)
    config = tuning.spmm_csr_config(N)
    kernel.spmm_csr(
        row_offsets=A.row_offsets,
        column_indices=A.column_indices,
        values=A.values,
        b=b,
        bias=None,
        row_order=A.row_order,
        out=out.unsqueeze(0),
        activation="none",
        block_rows=config.block_rows,
        block_nnz=config.block_nnz,
        block_n=config.block_n,
        num_warps=config.num_warps,
    )
    dense = A.to_dense()
    assert_close(out, dense.double() @ b.double(), spmm_bound(dense, b), torch.bfloat16)


# (x shape, x strides, y shape, y strides): rows of x and y past 2^31, and both transposed
# (a stride along K: y is x^T in the backward of `linear`).
SDDMM_LAYOUTS = {
    "rows": ((3, 16), (2**30 + 1, 1), (72, 16), (2**25, 1)),
    "k": ((3, 144), (1, FAR), (5, 144), (1, FAR)),
}


@interpreter
@pytest.mark.parametrize("layout", SDDMM_LAYOUTS)
def test_sddmm_csr_kernel_offsets_past_2_31(layout, gen):
    from sparsekernels.kernels import sddmm_csr as kernel

    x_shape, x_strides, y_shape, y_strides = SDDMM_LAYOUTS[layout]
    x, y = far_view(x_shape, x_strides, gen), far_view(y_shape, y_strides, gen)
    assert past_2_31(x) and past_2_31(y)
    P = random_csr(x_shape[0], y_shape[0], 0.5, gen, torch.bfloat16, empty_rows=False)
    out = torch.full((1, P.nnz), NAN, dtype=torch.bfloat16)
    config = sddmm_tuning.sddmm_csr_config(x_shape[1], P.nnz, P.shape[0])
    kernel.sddmm_csr(
        row_offsets=P.row_offsets,
        column_indices=P.column_indices,
        x=x,
        y=y,
        row_order=P.row_order,
        out=out,
        block_nnz=config.block_nnz,
        block_k=config.block_k,
        num_warps=config.num_warps,
    )
    rows, cols = P.pattern.row_indices(), P.column_indices.long()
    want = (x.double() @ y.double().t())[rows, cols]
    bound = (x.double().abs() @ y.double().abs().t())[rows, cols]
    assert_close(out[0], want, bound, torch.bfloat16)


@interpreter
def test_softmax_csr_kernels_offsets_past_2_31(gen):
    from sparsekernels.kernels import softmax_csr as kernel

    offsets = torch.tensor([0, 100, 100, 144])  # entries 128..143 of the last row past 2^31
    values = far_view((144,), (FAR,), gen)
    probs = far_view((144,), (FAR,), gen, fill=False)
    assert past_2_31(values) and past_2_31(probs)
    config = sddmm_tuning.softmax_csr_config(144, 3)
    kernel.sparse_softmax(
        row_offsets=offsets,
        values=values,
        out=probs.unsqueeze(0),
        scale=0.5,
        block=config.block,
        num_warps=config.num_warps,
    )
    z = values.double() * 0.5
    want = torch.cat([z[:100].softmax(0), z[100:].softmax(0)])
    assert_close(probs, want, torch.ones_like(want), torch.bfloat16)

    grad = far_view((144,), (FAR,), gen)
    d_values = far_view((144,), (FAR,), gen, fill=False)
    kernel.sparse_softmax_backward(
        row_offsets=offsets,
        probs=probs,
        grad=grad,
        out=d_values.unsqueeze(0),
        scale=0.5,
        block=config.block,
        num_warps=config.num_warps,
    )
    p, g = probs.double(), grad.double()
    dots = torch.cat([(p[:100] * g[:100]).sum().expand(100), (p[100:] * g[100:]).sum().expand(44)])
    want = 0.5 * p * (g - dots)
    bound = 0.5 * p * (g.abs() + (p * g).abs().sum())
    assert_close(d_values, want, bound, torch.bfloat16)


@interpreter
@pytest.mark.parametrize("vector", [1, 16])  # gather path, tensor-core path
def test_spmm_nm_kernels_offsets_past_2_31(vector, gen):
    from sparsekernels.kernels import spmm_nm as kernel

    K, N = 16, 144
    W = random_nm(16, K, 2, 8, gen, vector=vector, dtype=torch.bfloat16)
    b = far_view((K, N), (1, FAR), gen)  # x^T with the tokens' stride past 2^31
    out = far_view((16, N), (1, FAR), gen, fill=False)
    assert past_2_31(b) and past_2_31(out)
    config = tuning.spmm_nm_config(N, vector, False)
    assert config.use_dot == (vector == 16)
    kernel.spmm_nm(
        values=W.values,
        indices=W.indices,
        b=b,
        bias=None,
        out=out,
        n=W.n,
        m=W.m,
        vector=W.vector,
        block=W.block,
        activation="none",
        use_dot=config.use_dot,
        block_m=config.block_m,
        block_s=config.block_s,
        block_n=config.block_n,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    dense = W.to_dense()
    assert_close(out, dense.double() @ b.double(), spmm_bound(dense, b), torch.bfloat16)


@interpreter
def test_row_major_copy_offsets_past_2_31(gen):
    from sparsekernels.kernels.transpose import row_major_copy

    src = far_view((64, 144), (1, FAR), gen)
    assert past_2_31(src)
    dst = row_major_copy(src=src)
    assert dst.is_contiguous() and torch.equal(dst, src)


@interpreter
def test_rope_cache_offsets_past_2_31(gen):
    """Llama's rotary + cache write: a token's qkv and q rows past 2^31 (a prefill of ~350k
    tokens) and a KV head's cache rows past 2^31 (~2.4M positions of 8 heads)."""
    from sparsekernels.kernels import rope_cache

    heads, kv_heads, d, tokens = 1, 2, 8, 3
    width = (heads + 2 * kv_heads) * d
    qkv = far_view((1, tokens, width), (tokens * 2**30, 2**30, 1), gen, torch.float32)
    q = far_view((1, tokens, heads, d), (tokens * 2**30, 2**30, d, 1), gen, torch.float32, False)
    cache = ((1, kv_heads, tokens, d), (kv_heads * 2**31, 2**31, d, 1))
    k = far_view(*cache, gen, torch.float32, fill=False)
    v = far_view(*cache, gen, torch.float32, fill=False)
    assert past_2_31(qkv) and past_2_31(q) and past_2_31(k)
    cos, sin = randn(tokens, d, gen=gen, dtype=torch.float32), randn(tokens, d, gen=gen)
    sin = sin.float()
    rope_cache.rope_cache(qkv, cos, sin, k, v, 0, heads, kv_heads, out=q)
    x = qkv.view(1, tokens, heads + 2 * kv_heads, d).double()

    def turned(part):  # (x_i, x_{i+d/2}) -> (x_i c - x_{i+d/2} s', x_{i+d/2} c + x_i s'')
        a, b = part[..., : d // 2], part[..., d // 2 :]
        c, s = cos.double()[:, None], sin.double()[:, None]
        return torch.cat((a * c[..., : d // 2] + b * s[..., : d // 2],
                          b * c[..., d // 2 :] + a * s[..., d // 2 :]), -1)  # fmt: skip

    torch.testing.assert_close(q.double(), turned(x[:, :, :heads]), rtol=1e-5, atol=1e-5)
    want_k = turned(x[:, :, heads : heads + kv_heads]).transpose(1, 2)
    torch.testing.assert_close(k.double(), want_k, rtol=1e-5, atol=1e-5)
    assert torch.equal(v.double(), x[:, :, heads + kv_heads :].transpose(1, 2))


def test_row_major_copy_grid_has_one_axis(monkeypatch):
    """More than 65535 column tiles still launch: the grid has one axis (2^31 - 1 programs)."""
    from sparsekernels.kernels import transpose

    grids = []

    class Recorder:
        def __getitem__(self, grid):
            grids.append(grid)
            return lambda **kwargs: None

    monkeypatch.setattr(transpose, "_row_major_copy_kernel", Recorder())
    src = torch.empty((65536 * 64 + 1, 64), device="meta").t()  # 65537 column tiles
    transpose.row_major_copy(src=src)
    assert grids == [(65537,)]


# ============================================================================ index dtypes
@interpreter
def test_int64_column_indices_end_to_end(gen):
    """2^31 + 64 columns: the format keeps int64 column indices, and spmm and sddmm read the far
    rows of a (2^31 + 64, 3) dense operand through them (only the rows read are touched)."""
    K = 2**31 + 64
    columns = torch.tensor([0, 5, K - 64, K - 1, 7, K - 3])
    A = sk.CSRMatrix(torch.tensor([0, 4, 6]), columns, randn(6, gen=gen).to(torch.bfloat16), (2, K))
    assert A.column_indices.dtype == torch.int64
    B = lazy_empty(K * 3).view(K, 3)
    B[columns] = randn(6, 3, gen=gen).to(torch.bfloat16)
    rows = A.pattern.row_indices()
    terms = A.values.double()[:, None] * B[columns].double()
    want = torch.zeros(2, 3, dtype=torch.float64).index_add_(0, rows, terms)
    bound = torch.zeros(2, 3, dtype=torch.float64).index_add_(0, rows, terms.abs())
    assert_close(sk.spmm(A, B, backend="triton"), want, bound, torch.bfloat16)

    X = randn(2, 3, gen=gen).to(torch.bfloat16)
    terms = X.double()[rows] * B[columns].double()
    got = sk.sddmm(X, B, A, backend="triton").values
    assert_close(got, terms.sum(1), terms.abs().sum(1), torch.bfloat16)


def test_sddmm_past_2_31_tiles_takes_the_row_kernel(gen, monkeypatch):
    """A 3M x 3M pattern has more 64 x 64 tiles than the tensor-core kernel's int32 tile ids
    hold (they wrapped negative and read x and y before their start): the row-wise kernel takes
    it, even where the tile rule would choose tiles. (The kernels are recorded, not run: the
    interpreter would walk 3M rows.)"""
    from sparsekernels.kernels import sddmm_csr

    sddmm_module = importlib.import_module("sparsekernels.ops.sddmm")
    assert sddmm_module._tile_ids_fit(46340 * 64, 46340 * 64, 64)  # (46340^2 < 2^31 tiles)
    assert not sddmm_module._tile_ids_fit(46341 * 64, 46341 * 64, 64)
    assert sddmm_module._tile_ids_fit(46341 * 64, 46341 * 64, 512)  # (128 x 128 tiles)
    monkeypatch.setattr(sddmm_tuning, "sddmm_tiles_takes", lambda *args: True)
    taken = []
    monkeypatch.setattr(sddmm_module, "_triton_tiles", lambda *args: taken.append("tiles"))
    monkeypatch.setattr(sddmm_csr, "sddmm_csr", lambda **kwargs: taken.append("rows"))
    L = 3_000_000
    offsets = torch.zeros(L + 1, dtype=torch.int64)
    offsets[1:], offsets[L - 1 :] = 2, 5  # rows 0 and L - 2 (the others empty)
    P = sk.CSRMatrix(offsets, torch.tensor([0, L - 1, 5, L - 70, L - 1]), torch.ones(5), (L, L))
    X = torch.ones(1, 8, dtype=torch.bfloat16).expand(L, 8)
    sk.sddmm(X, X, P, backend="triton")
    assert taken == ["rows"]


def test_row_offsets_turn_int64_at_2_31_entries():
    """nnz 2^31 - 1 keeps int32 offsets; 2^31 needs int64 (meta tensors: no memory)."""
    for nnz, want in [(2**31 - 1, torch.int32), (2**31, torch.int64)]:
        A = sk.CSRMatrix(
            torch.tensor([0, nnz], dtype=torch.int64, device="meta"),
            torch.empty(nnz, dtype=torch.int32, device="meta"),
            torch.empty(nnz, dtype=torch.bfloat16, device="meta"),
            (1, 2**31),
            check=False,
        )
        assert A.row_offsets.dtype == want, nnz
        assert A.column_indices.dtype == torch.int64  # 2^31 columns: the dimension needs int64


# ============================================================================ launch limits
def _cuda(dtype=torch.bfloat16, **facts) -> _dispatch.Problem:
    return _dispatch.Problem(torch.device("cuda"), dtype, facts)


def test_spmm_csr_column_tiles_at_the_grid_limit():
    """N up to 65535 column tiles of the configured width runs on Triton; one more does not."""
    largest = tuning.MAX_GRID_YZ * tuning.spmm_csr_config(2**20).block_n
    assert -(-largest // tuning.spmm_csr_config(largest).block_n) == tuning.MAX_GRID_YZ
    facts = {"batch": 1, "density": 0.01, "expanded": False, "rows": 4}
    assert _dispatch.explain("spmm_csr", _cuda(n=largest, **facts))["triton"] == []
    assert _dispatch.explain("spmm_csr", _cuda(n=largest + 1, **facts))["triton"]


@pytest.mark.parametrize("vector", [1, 4, 16, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_spmm_nm_column_tiles_at_the_grid_limit(vector, dtype):
    """The dispatch limit on N matches the column tile of every N:M config."""
    largest = tuning.MAX_GRID_YZ * 16
    config = tuning.spmm_nm_config(largest, vector, dtype == torch.float64)
    assert -(-largest // config.block_n) <= tuning.MAX_GRID_YZ
    facts = {"pattern": (2, 8, vector, 1), "transpose": False}
    assert _dispatch.explain("spmm_nm", _cuda(dtype, n=largest, **facts))["triton"] == []
    assert _dispatch.explain("spmm_nm", _cuda(dtype, n=largest + 1, **facts))["triton"]


@pytest.mark.parametrize("op", ["spmm_csr", "sddmm_csr", "sparse_softmax"])
def test_batch_and_rows_at_the_grid_limits(op):
    """batch sits on grid axis 1 or 2 (65535); rows on axis 0 (2^31 - 1 programs at most)."""
    facts = {"n": 16, "k": 64, "density": 0.01, "expanded": False}
    fits = _cuda(batch=tuning.MAX_GRID_YZ, rows=INT32_MAX, **facts)
    assert _dispatch.explain(op, fits)["triton"] == []
    for too_big in ({"batch": tuning.MAX_GRID_YZ + 1}, {"rows": INT32_MAX + 1}):
        problem = _cuda(**{"batch": 1, "rows": 4, **facts, **too_big})
        assert _dispatch.explain(op, problem)["triton"], too_big
        assert _dispatch.choose(op, problem) == "reference"  # falls back by itself


@interpreter
def test_forced_triton_past_a_limit_raises_before_any_work(gen):
    """Past a launch limit, backend='triton' raises a ValueError naming the size, before the
    kernel runs; the operands are expanded views or lazily mapped, never filled."""
    A = random_csr(4, 8, 0.5, gen, torch.bfloat16)
    wide = tuning.MAX_GRID_YZ * 128 + 1
    B = torch.zeros(8, 1, dtype=torch.bfloat16).expand(8, wide)
    with pytest.raises(ValueError, match=f"N = {wide} needs more column tiles"):
        sk.spmm(A, B, backend="triton")

    W = random_nm(4, 8, 2, 8, gen, dtype=torch.bfloat16)
    wide = tuning.MAX_GRID_YZ * 16 + 1
    with pytest.raises(ValueError, match=f"N = {wide} needs more column tiles"):
        sk.spmm(W, torch.zeros(8, 1, dtype=torch.bfloat16).expand(8, wide), backend="triton")

    x = torch.zeros(1, 1, 8, dtype=torch.bfloat16).expand(tuning.MAX_GRID_YZ + 1, 4, 8)
    with pytest.raises(ValueError, match="batch 65536 exceeds the grid limit 65535"):
        sk.sddmm(x, x, random_csr(4, 4, 0.5, gen, torch.bfloat16), backend="triton")

    rows = INT32_MAX + 1
    try:  # the offsets are never read: the rows alone rule the kernel out
        offsets = torch.empty(rows + 1, dtype=torch.int32)
    except RuntimeError as error:
        pytest.skip(f"cannot map {rows + 1} offsets of address space: {error}")
    empty = torch.empty(0, dtype=torch.int32)
    P = sk.CSRMatrix(offsets, empty, empty.to(torch.bfloat16), (rows, 4), check=False)
    with pytest.raises(ValueError, match=f"{rows} rows exceed the grid limit"):
        sk.sparse_softmax(P, backend="triton")
    X = torch.zeros(1, 8, dtype=torch.bfloat16).expand(rows, 8)
    with pytest.raises(ValueError, match=f"{rows} rows exceed the grid limit"):
        sk.sddmm(X, torch.zeros(4, 8, dtype=torch.bfloat16), P, backend="triton")


def test_launch_size_arithmetic_matches_triton():
    """kernels/_sizes.py replaces triton.cdiv / triton.next_power_of_2 in host code (they cost
    microseconds a call there); the results must be the same."""
    import triton

    from sparsekernels.kernels._sizes import cdiv, next_power_of_2

    values = [*range(0, 70), 127, 128, 129, 65535, 65536, 2**31 - 1, 2**31, 2**40 + 3]
    for n in values:
        assert next_power_of_2(n) == triton.next_power_of_2(n), n
        for d in (1, 2, 3, 16, 64, 65535):
            assert cdiv(n, d) == triton.cdiv(n, d), (n, d)
