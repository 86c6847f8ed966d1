"""Scale (markers gpu + slow, run on the H200): every kind of index product past 2^31.

`PYTHONPATH=src python3 -m pytest -q -m "gpu and slow" tests/test_scale.py` (a few minutes).
Each test builds bf16 operands whose far elements lie past element 2^31 of their tensor (so an
int32 row * stride, column * stride or entry offset would wrap), reads the results back at those
far elements against a float64 answer computed only where the problem is touched, and checks
every output (in chunks) where a skipped write could hide. Each test stays under ~26 GB of GPU
memory and ~20 s; memory is freed between tests. The CPU twins of these checks, on lazily
mapped memory in Triton's interpreter, are in test_limits.py.
"""

import gc

import pytest
import torch

import sparsekernels as sk
from sparsekernels.kernels import tuning

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

DEVICE = "cuda"
BF16 = torch.bfloat16
TOL = 1e-2  # bf16 results: a few units of bf16 rounding (2^-8) of sum |terms|
NAN = float("nan")


@pytest.fixture(autouse=True)
def _seed_and_free():
    torch.manual_seed(0)
    yield
    gc.collect()
    torch.cuda.empty_cache()


def normal(*shape) -> torch.Tensor:
    """bf16 N(0, 1) drawn in place: no float32 copy of a 4 GB tensor."""
    return torch.empty(shape, dtype=BF16, device=DEVICE).normal_()


def assert_close(got, want, bound, what: str, tol: float = TOL) -> None:
    """|got - want| <= tol * bound everywhere; a NaN (a poisoned output never written) fails."""
    err = (got.double() - want.double()).abs()
    bad = ~(err <= tol * bound.double() + 1e-30)
    if bad.any():
        first = bad.nonzero()[0].tolist()
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} off; first at {first}: "
            f"got {got[tuple(first)].item()}, want {want[tuple(first)].item()}"
        )


def far_columns(total: int, first: int = 4, last: int = 28) -> torch.Tensor:
    """Sorted distinct columns: a few of the first and several of the last 1024 of `total`."""
    picks = torch.cat([torch.randint(0, 8, (first,)), total - 1 - torch.randint(0, 1024, (last,))])
    return picks.unique().to(DEVICE)


def csr(shape, rows_cols: dict) -> sk.CSRMatrix:
    """A validated CSRMatrix storing the columns rows_cols[r] in row r, N(0, 1) values."""
    counts = torch.zeros(shape[0], dtype=torch.int64)
    for row, cols in rows_cols.items():
        counts[row] = cols.numel()
    offsets = torch.zeros(shape[0] + 1, dtype=torch.int64)
    offsets[1:] = counts.cumsum(0)
    columns = torch.cat([rows_cols[r] for r in sorted(rows_cols)])
    return sk.CSRMatrix(offsets.to(DEVICE), columns, normal(columns.numel()), shape)


def spmm_reference(A: sk.CSRMatrix, B: torch.Tensor):
    """A @ B and sum |a| |b| in float64 from the stored entries alone (A holds few)."""
    rows, cols = A.pattern.row_indices(), A.column_indices.long()
    terms = A.values.double()[:, None] * B[cols].double()
    want = torch.zeros(A.shape[0], B.shape[1], dtype=torch.float64, device=DEVICE)
    bound = torch.zeros_like(want)
    return want.index_add_(0, rows, terms), bound.index_add_(0, rows, terms.abs())


# ============================================================================ spmm
def test_spmm_with_more_than_2_31_entries():
    """int64 row offsets: 2^16 + 64 rows keeping every other of 2^16 columns, 2^31 + 2^21
    entries. Values are constant within a row, so the float64 answer is cheap: row value x
    sum(x[even]). About 13 GB."""
    rows, cols = 2**16 + 64, 2**16
    per_row = cols // 2
    offsets = torch.arange(rows + 1, device=DEVICE, dtype=torch.int64) * per_row
    columns = torch.arange(0, cols, 2, device=DEVICE, dtype=torch.int32).repeat(rows)
    row_values = torch.randn(rows, device=DEVICE, dtype=torch.float64) + 3.0  # never zero
    values = row_values.to(BF16).repeat_interleave(per_row)
    A = sk.CSRMatrix(offsets, columns, values, (rows, cols), check=False)
    assert A.nnz == 2**31 + 2**21 and A.row_offsets.dtype == torch.int64
    x = torch.randn(cols, 1, device=DEVICE, dtype=torch.float64).to(BF16)
    got = sk.spmm(A, x, backend="triton")
    want = row_values.to(BF16).double() * x.double()[0::2].sum()
    bound = row_values.abs() * x.double()[0::2].abs().sum()
    assert_close(got[:, 0], want, bound, "A @ x")  # every row; the last 64 lie past 2^31


def test_spmm_csr_b_with_more_than_2_31_elements():
    """B (2^23 + 64, 256): 2^31 + 2^14 elements (4.3 GB); A's 16 rows read B's first and last
    rows, so column * stride_bk passes 2^31."""
    K, N = 2**23 + 64, 256
    B = normal(K, N)
    A = csr((16, K), {r: far_columns(K) for r in range(16)})
    got = sk.spmm(A, B, backend="triton")
    want, bound = spmm_reference(A, B)
    assert_close(got, want, bound, "A @ B")


def test_int64_column_indices_end_to_end():
    """A (16, 2^31 + 64) keeps int64 column indices; spmm and sddmm read the first and last rows
    of B (2^31 + 64, 2) (8.6 GB) through them."""
    K = 2**31 + 64
    B = normal(K, 2)
    A = csr((16, K), {r: far_columns(K) for r in range(16)})
    assert A.column_indices.dtype == torch.int64
    want, bound = spmm_reference(A, B)
    assert_close(sk.spmm(A, B, backend="triton"), want, bound, "A @ B")
    X = normal(16, 2)
    terms = X.double()[A.pattern.row_indices()] * B[A.column_indices].double()
    got = sk.sddmm(X, B, A, backend="triton").values
    assert_close(got, terms.sum(1), terms.abs().sum(1), "(X B^T) at A")


@pytest.mark.parametrize("fmt", ["csr", "nm"])
def test_spmm_output_with_more_than_2_31_elements(fmt):
    """out (2^15 + 64, 2^16): 2^31 + 2^22 elements (4.3 GB), so row * stride_om passes 2^31.
    CSR: the kernel is launched on a NaN-poisoned out; one entry per row makes every output a
    single product, so the whole output is checked against its bf16 rounding alone. N:M (2:8
    over K = 16) goes through the op and is checked in chunks against float32."""
    M, K, N = 2**15 + 64, 16, 2**16
    B = normal(K, N)
    if fmt == "csr":
        from sparsekernels.kernels import spmm_csr as kernel

        cols = torch.randint(0, K, (M,), device=DEVICE, dtype=torch.int32)
        offsets = torch.arange(M + 1, device=DEVICE, dtype=torch.int32)
        A = sk.CSRMatrix(offsets, cols, normal(M), (M, K), check=False)
        out = torch.full((1, M, N), NAN, dtype=BF16, device=DEVICE)
        config = tuning.spmm_csr_config(N)
        kernel.spmm_csr(
            row_offsets=A.row_offsets,
            column_indices=A.column_indices,
            values=A.values,
            b=B,
            bias=None,
            row_order=A.row_order,
            out=out,
            activation="none",
            block_rows=config.block_rows,
            block_nnz=config.block_nnz,
            block_n=config.block_n,
            num_warps=config.num_warps,
        )
        got = out[0]
        for r in range(0, M, 4096):
            rows = slice(r, r + 4096)
            want = A.values[rows].float()[:, None] * B[cols[rows].long()].float()  # exact
            assert_close(got[rows], want, want.abs(), f"rows {r}..")  # the store's rounding
    else:
        w = normal(M, K)
        W = sk.NMMatrix.from_dense(w, 2, 8, mask=sk.prune.nm_mask(w, 2, 8))
        got = sk.spmm(W, B, backend="triton")
        dense = W.to_dense().float()
        for r in range(0, M, 4096):
            rows = slice(r, r + 4096)
            want = dense[rows] @ B.float()
            bound = dense[rows].abs() @ B.float().abs()
            assert_close(got[rows], want, bound, f"W @ B rows {r}..")


def _dense_rows_reference(x: torch.Tensor, W_dense: torch.Tensor, got: torch.Tensor, what: str):
    """got == x @ W^T, checked in chunks of 2^16 tokens in float32 (exact products, fp32 sums)."""
    Wf = W_dense.float()
    for t in range(0, x.shape[0], 2**16):
        chunk = x[t : t + 2**16].float()
        assert_close(got[t : t + 2**16], chunk @ Wf.t(), chunk.abs() @ Wf.abs().t(), what)


def test_linear_csr_with_x_past_2_31_elements():
    """x (2^19 + 64, 4096): 2^31 + 2^18 elements (4.3 GB). The CSR kernel reads x^T in place, so
    token * K passes 2^31 in B's column offsets; the backward's SDDMM (dW) reads it with a stride
    along its K, and dx = W^T g writes (4096, 2^19 + 64) past 2^31. The output gradient is
    nonzero only at the last 128 tokens (64 on each side of element 2^31 of x), so a wrong far
    token shows in dW above the rounding of the rest. About 17 GB."""
    T, K, out_features = 2**19 + 64, 4096, 16
    x = normal(T, K).requires_grad_()
    keep = torch.rand(out_features, K, device=DEVICE) < 0.05
    W = sk.CSRMatrix.from_dense(normal(out_features, K) * keep, mask=keep)
    W.values.requires_grad_()
    y = sk.linear(x, W, backend="triton")
    W_dense = W.to_dense().detach()
    _dense_rows_reference(x.detach(), W_dense, y.detach(), "y = x W^T")

    g = torch.zeros(T, out_features, dtype=BF16, device=DEVICE)
    g[-128:] = normal(128, out_features)
    y.backward(g)
    del y
    # dW at the stored entries: sum over tokens of g[t, row] x[t, col], in float64.
    gt, xt = g[-128:].double(), x.detach()[-128:].double()
    rows, cols = W.pattern.row_indices(), W.column_indices.long()
    want, bound = (gt.t() @ xt)[rows, cols], (gt.abs().t() @ xt.abs())[rows, cols]
    assert_close(W.values.grad, want, bound, "dW")
    # dx = g @ W, in chunks.
    for t in range(0, T, 2**16):
        gf = g[t : t + 2**16].float()
        want, bound = gf @ W_dense.float(), gf.abs() @ W_dense.float().abs()
        assert_close(x.grad[t : t + 2**16], want, bound, f"dx tokens {t}..")


@pytest.mark.parametrize("vector", [1, 64])  # gather path, tensor-core path
def test_linear_nm_with_x_past_2_31_elements(vector):
    """x (2^19 + 64, 4096): the N:M kernels read x^T through a row-major copy (the transpose
    kernel, 4.3 GB out) whose column * stride passes 2^31. About 9 GB."""
    T, K = 2**19 + 64, 4096
    x = normal(T, K)
    w = normal(64, K)
    W = sk.NMMatrix.from_dense(w, 2, 8, vector, mask=sk.prune.nm_mask(w, 2, 8, vector=vector))
    y = sk.linear(x, W, backend="triton")
    _dense_rows_reference(x, W.to_dense(), y, f"y = x W^T, v={vector}")


def test_spmm_nm_with_more_than_2_31_in_features():
    """W (2, 2^31 + 2^20) at 1:8, B (2^31 + 2^20, 1) (4.3 GB): a slot's column, group * m,
    passes 2^31 for the last 2^17 slots. W's kept values are zero but for its first 64 and last
    1024 slots, so the float64 answer is cheap and a wrong far column shows. The kernel still
    walks every slot (a NaN read anywhere would show too). About 6 GB."""
    K = 2**31 + 2**20
    slots = K // 8
    B = normal(K, 1)
    values = torch.zeros(2, slots, dtype=BF16, device=DEVICE)
    live = torch.cat([torch.arange(64), torch.arange(slots - 1024, slots)]).to(DEVICE)
    values[:, live] = normal(2, live.numel())
    indices = torch.randint(0, 8, (1, slots), dtype=torch.uint8, device=DEVICE)
    W = sk.NMMatrix(values, indices, (2, K), n=1, m=8, vector=2, check=False)
    got = sk.spmm(W, B, backend="triton")
    terms = values[:, live].double() * B[live * 8 + indices[0, live].long(), 0].double()
    assert_close(got[:, 0], terms.sum(1), terms.abs().sum(1), "W @ B")


# ============================================================================ sddmm
@pytest.mark.parametrize("layout", ["rows", "transposed"])
def test_sddmm_operands_with_more_than_2_31_elements(layout):
    """X (M, K) and Y (N, K) of about 2^31 + 2^26 elements each (4.6 GB), M = N = 2^21 + 64.
    rows: contiguous, so row * K passes 2^31 (x's row, y's gathered rows); transposed: views of
    (K, M) tensors, so k * M passes 2^31 along K (y is x^T in the backward of `linear`).
    Only the first and last rows and columns store entries. The backward runs too: dX = G @ Y
    and dY = G^T @ X are CSR SpMMs reading the same operands. About 20 GB."""
    M = N = 2**21 + 64
    K = 1024 if layout == "rows" else 1088
    if layout == "rows":
        X, Y = normal(M, K), normal(N, K)
    else:
        X, Y = normal(K, M).t(), normal(K, N).t()
    X.requires_grad_()
    Y.requires_grad_()
    touched = [0, 1, 2, *range(M - 29, M)]
    P = csr((M, N), {r: far_columns(N) for r in touched})
    S = sk.sddmm(X, Y, P, backend="triton")
    rows, cols = P.pattern.row_indices(), P.column_indices.long()
    Xr, Yc = X.detach()[rows].double(), Y.detach()[cols].double()
    assert_close(S.values, (Xr * Yc).sum(1), (Xr * Yc).abs().sum(1), "S = (X Y^T) at P")

    g = normal(P.nnz)
    S.values.backward(g)
    for name, grad, mine, other, source in (
        ("dX", X.grad, rows, cols, Y),
        ("dY", Y.grad, cols, rows, X),
    ):
        # grad[i] = sum of g_e source[other_e] over the entries e with mine_e = i
        hit, slot = mine.unique(return_inverse=True)
        terms = g.double()[:, None] * source.detach()[other].double()
        want = torch.zeros(hit.numel(), K, dtype=torch.float64, device=DEVICE)
        bound = torch.zeros_like(want)
        want.index_add_(0, slot, terms)
        bound.index_add_(0, slot, terms.abs())
        assert_close(grad[hit], want, bound, f"{name} at the touched rows")
        written = sum(
            int(grad[r : r + 2**18].ne(0).any(1).sum()) for r in range(0, grad.shape[0], 2**18)
        )
        assert written <= hit.numel(), f"{name} written outside the touched rows"


# ============================================================================ softmax
def test_softmax_with_more_than_2_31_entries():
    """2^16 + 64 rows of 2^15 entries: nnz = 2^31 + 2^21, int64 offsets, forward and backward.
    The first and last rows (past entry 2^31) are checked against float64; every row's
    probabilities must sum to 1 and its gradient to 0 (checked in chunks). About 26 GB."""
    rows, per_row = 2**16 + 64, 2**15
    offsets = torch.arange(rows + 1, device=DEVICE, dtype=torch.int64) * per_row
    columns = torch.arange(per_row, device=DEVICE, dtype=torch.int32).repeat(rows)
    values = normal(rows * per_row).requires_grad_()
    S = sk.CSRMatrix(offsets, columns, values, (rows, per_row), check=False)
    assert S.nnz == 2**31 + 2**21 and S.row_offsets.dtype == torch.int64
    del columns
    P = sk.sparse_softmax(S, scale=0.5, backend="triton")
    g = normal(S.nnz)
    P.values.backward(g)
    p, d = P.values.detach().view(rows, per_row), values.grad.view(rows, per_row)
    v, gv = values.detach().view(rows, per_row), g.view(rows, per_row)

    checked = torch.tensor([0, 1, *range(rows - 64, rows)], device=DEVICE)
    want = (0.5 * v[checked].double()).softmax(-1)
    assert_close(p[checked], want, torch.ones_like(want), "probabilities")
    gd = gv[checked].double()
    dot = (want * gd).sum(-1, keepdim=True)
    want_d = 0.5 * want * (gd - dot)
    bound_d = 0.5 * want * (gd.abs() + (want * gd).abs().sum(-1, keepdim=True))
    assert_close(d[checked], want_d, bound_d, "d values")

    for r in range(0, rows, 4096):
        pc, dc = p[r : r + 4096].float(), d[r : r + 4096].float()
        sums = pc.sum(-1)
        assert bool(((sums - 1).abs() <= TOL).all()), f"rows {r}..: probabilities sum to {sums}"
        assert bool((dc.sum(-1).abs() <= TOL * dc.abs().sum(-1) + 1e-6).all()), f"rows {r}.."


# ============================================================================ attention
def test_sparse_attention_with_more_than_2_31_scores():
    """16 heads of a causal 16384 x 16384 pattern: 16 x 134225920 = 2^31 + 131072 scores
    (4.3 GB), so batch * nnz passes 2^31 in SDDMM, softmax and SpMM: the last head's last 8
    queries lie past it. First and last queries of the first and last heads are checked
    against float64 that rounds scores and probabilities to bf16 where the ops store them;
    q is doubled so that a query attends to a few keys and a wrong score moves the output by
    O(|v|). The tolerance is 5% of sum p |v|: a score whose fp32 sum rounds to the other bf16
    neighbour than the float64 one moves its probability by up to 1.6%. About 11 GB."""
    L, H, D = 16384, 16, 64
    pattern = sk.CSRMatrix.from_dense(torch.ones(L, L, device=DEVICE, dtype=BF16).tril())
    assert H * pattern.nnz > 2**31
    q, k, v = 2 * normal(1, H, L, D), normal(1, H, L, D), normal(1, H, L, D)
    out = sk.sparse_attention(q, k, v, pattern, backend="triton")
    for head in (0, H - 1):
        for i in (0, 1, L - 2, L - 1):
            scores = k[0, head, : i + 1].double() @ q[0, head, i].double()
            scores = scores.to(BF16).double() / D**0.5  # SDDMM stores bf16 scores
            probs = scores.softmax(0).to(BF16).double()  # and softmax bf16 probabilities
            want = probs @ v[0, head, : i + 1].double()
            bound = probs @ v[0, head, : i + 1].double().abs()
            assert_close(out[0, head, i], want, bound, f"head {head}, query {i}", tol=0.05)


# ============================================================================ conversions
def test_row_major_copy_of_more_than_2_31_elements():
    """x^T for x (2^22 + 64, 512): 2^31 + 2^15 elements (4.3 GB each way) and 65537 column
    tiles of 64, more than grid axis 1 could hold. Every element is compared."""
    from sparsekernels.kernels.transpose import row_major_copy

    src = normal(2**22 + 64, 512).t()
    dst = row_major_copy(src=src)
    assert dst.is_contiguous()
    for r in range(0, 512, 64):
        assert torch.equal(dst[r : r + 64], src[r : r + 64]), f"rows {r}..{r + 64} differ"
