"""The Triton N:M SpMM kernels (gather path and vector-wise tensor-core path): in the
interpreter on CPU (small shapes) and compiled on CUDA (gpu), against float64 references with
poisoned outputs."""

import pytest
import torch

import sparsekernels as sk
from _helpers import (
    ALL_DTYPES,
    KERNEL_DEVICES,
    assert_close,
    randn,
    random_nm,
    skip_interpreter_on_gpu_machine,
    spmm_bound,
)
from sparsekernels.kernels.tuning import SpmmNmConfig, spmm_nm_config

# (n, m, vector, block): element-wise, vector-wise below and above the tensor-core threshold,
# block-wise (BW4x4 = vector 4, block 4), odd n.
PATTERNS = [
    (2, 8, 1, 1),
    (4, 8, 4, 4),
    (2, 4, 16, 1),
    (4, 16, 32, 4),
    (3, 32, 16, 1),
    (1, 2, 64, 1),
]


def _launch_poisoned(W, B, bias=None, activation="none", config=None):
    from sparsekernels.kernels import spmm_nm as kernel

    out = torch.full((W.shape[0], B.shape[1]), float("nan"), dtype=B.dtype, device=B.device)
    config = config or spmm_nm_config(B.shape[1], W.vector, W.dtype == torch.float64)
    kernel.spmm_nm(
        values=W.values,
        indices=W.indices,
        b=B,
        bias=bias,
        out=out,
        n=W.n,
        m=W.m,
        vector=W.vector,
        block=W.block,
        activation=activation,
        use_dot=config.use_dot,
        block_m=config.block_m,
        block_s=config.block_s,
        block_n=config.block_n,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return out, config.use_dot


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("N", [1, 7, 40])
def test_every_element_written(device, pattern, N, gen):
    skip_interpreter_on_gpu_machine(device)
    n, m, vector, block = pattern
    dtype = torch.float32
    rows = 2 * max(vector, 16) + vector // 2 + 1 if vector > 1 else 37  # a partial last group
    W = random_nm(rows, 3 * m, n, m, gen, vector, block, dtype, device)
    B = randn(3 * m, N, gen=gen, dtype=dtype, device=device)
    got, _ = _launch_poisoned(W, B)
    assert_close(got, W.to_dense().double() @ B.double(), spmm_bound(W.to_dense(), B), dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("use_dot", [False, True])
def test_dtypes_and_both_paths(device, dtype, use_dot, gen):
    skip_interpreter_on_gpu_machine(device)
    if use_dot and dtype == torch.float64:
        pytest.skip("fp64 always takes the gather path")
    vector, N = (32, 48) if use_dot else (1, 5)
    W = random_nm(70, 64, 2, 8, gen, vector, 1, dtype, device)
    B = randn(64, N, gen=gen, dtype=dtype, device=device)
    bias = randn(70, gen=gen, dtype=dtype, device=device)
    got, took_dot = _launch_poisoned(W, B, bias, "gelu")
    assert took_dot == use_dot
    want = torch.nn.functional.gelu(W.to_dense().double() @ B.double() + bias.double()[:, None])
    bound = spmm_bound(W.to_dense(), B) + bias.double().abs()[:, None]
    assert_close(got, want, bound, dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize(("n", "m"), [(2, 8), (1, 8)])
@pytest.mark.parametrize("N", [20, 300])
@pytest.mark.parametrize("layout", ["rows", "x^T"])
@pytest.mark.parametrize("vector", [64, 128])
def test_small_tensor_core_tiles(device, n, m, N, layout, vector, gen):
    """The small tiles a small weight takes (16 x 32 below 256 tokens, 32 x 64 past): rows
    off both tile heights, slots off the 64-slot step, a partial column tile, bias and GELU;
    B row-major and as linear passes it (x^T, read in place); vectors of 64 and 128 rows (a
    choice shared by several tiles)."""
    skip_interpreter_on_gpu_machine(device)
    rows, K = vector + 16 + 5, 8 * m + m  # a whole vector, then a partial one; 9 groups a row
    config = spmm_nm_config(N, vector, False, rows, K)
    assert (config.block_m, config.block_n) == ((16, 32) if N < 256 else (32, 64))
    assert config.b_in_place  # (K <= 768)
    assert spmm_nm_config(N, vector, False, rows, 1536).b_in_place == (N >= 256)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    W = random_nm(rows, K, n, m, gen, vector, 1, dtype, device)
    B = randn(K, N, gen=gen, dtype=dtype, device=device)
    if layout == "x^T":
        B = randn(N, K, gen=gen, dtype=dtype, device=device).t()
    bias = randn(rows, gen=gen, dtype=dtype, device=device)
    got, took_dot = _launch_poisoned(W, B, bias, "gelu", config)
    assert took_dot
    want = torch.nn.functional.gelu(W.to_dense().double() @ B.double() + bias.double()[:, None])
    bound = spmm_bound(W.to_dense(), B) + bias.double().abs()[:, None]
    assert_close(got, want, bound, dtype)


def test_few_token_tiles_on_large_weights():
    """16-32 tokens on a weight past the small tiles' sizes, v = 64, densities 1/4-1/2:
    16-row tiles of 128 slots (32-row ones at 16 tokens on 8192+ rows), 16 x 32 at 17-32
    tokens; the usual 64-row tiles past 32 tokens, for vectors not timed (32, 128) and for
    sparser patterns (1:8)."""

    def tile(n_cols, vector, rows, k=4096, density=0.5, block=1, kept=4):
        c = spmm_nm_config(n_cols, vector, False, rows, k, density, block, kept)
        return c.use_dot, c.block_m, c.block_s, c.block_n, c.num_warps, c.num_stages

    assert tile(16, 64, 4096) == (True, 16, 128, 16, 4, 4)
    assert tile(16, 64, 4096, 14336, 0.25) == (True, 16, 128, 16, 4, 4)
    assert tile(16, 64, 14336) == (True, 32, 128, 16, 4, 3)
    assert tile(17, 64, 14336) == tile(32, 64, 4096) == (True, 16, 128, 32, 4, 3)
    # 33-64 tokens: 16 x 128 x 64 where the usual tiles give at most 64 programs, any density
    assert tile(33, 64, 4096) == tile(64, 64, 4096, 14336, 1 / 8) == (True, 16, 128, 64, 4, 3)
    assert tile(33, 64, 4096 + 64) == (True, 64, 32, 64, 8, 3)
    assert tile(65, 64, 4096) == (True, 64, 32, 128, 8, 3)
    assert tile(48, 64, 14336, density=1 / 4) == (True, 64, 32, 64, 8, 3)
    assert tile(16, 32, 4096) == (True, 32, 32, 16, 8, 3)
    assert tile(16, 128, 4096) == (True, 64, 32, 16, 8, 3)
    assert tile(32, 64, 14336, density=1 / 8) == (True, 64, 32, 32, 8, 3)
    assert tile(16, 64, 384, 1536)[1:3] == (16, 64)  # (a small weight: its small tiles)
    # below 16 tokens: 32 x 128 x 16 from 8192 rows, and for blocks of 64 columns on fewer
    # rows from 9 tokens (1-8: the decode kernel's 4-row tile), for patterns keeping 4+ of a
    # group (2:4, 2:8, 1:2, 1:4 keep their route); 16 x 128 x 16 from 5 tokens on fewer rows
    # (1-4: the decode kernel's wide steps)
    assert tile(1, 64, 8192) == tile(15, 64, 14336, density=0.25) == (True, 32, 128, 16, 4, 3)
    assert tile(9, 64, 4096, block=64, kept=64) == tile(15, 64, 100, block=64, kept=64)
    assert tile(9, 64, 100, block=64, kept=64) == tile(1, 64, 8192, block=64, kept=64)
    assert tile(1, 64, 8192, block=64, kept=64) == tile(1, 64, 8192)
    assert not tile(8, 64, 4096, block=64, kept=64)[0] and not tile(1, 64, 100, block=64)[0]
    assert not tile(4, 64, 4096)[0] and not tile(8, 64, 8191, block=16)[0]
    # 5-15 tokens on fewer rows: the 16-token tile (the same work as at 16, B 16 wide)
    assert tile(5, 64, 4096) == tile(15, 64, 4096, 14336, 0.25, kept=8) == tile(16, 64, 4096)
    assert not tile(12, 64, 4096, kept=2)[0] and not tile(12, 64, 4096, density=1 / 8)[0]
    assert not tile(8, 64, 14336, density=1 / 8)[0] and not tile(8, 32, 14336)[0]
    assert not tile(1, 64, 14336, density=0.25, kept=2)[0]  # 2:8 (and 1:4 as 2:8)
    assert not tile(4, 64, 14336, kept=2)[0] and not tile(4, 64, 14336, kept=1)[0]  # 2:4, 1:2
    assert not spmm_nm_config(8, 64, False, density=0.5, block=64, kept=64).use_dot  # (no size)
    assert not spmm_nm_config(1, 64, True, 8192, 4096, 0.5, 64, 64).use_dot  # (fp64: gather)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize(("pattern", "N"), [((4, 8, 64, 1), 16), ((8, 32, 64, 1), 29),
                                           ((64, 128, 64, 64), 16), ((64, 128, 64, 64), 3),
                                           ((4, 8, 64, 1), 1), ((2, 8, 64, 1), 40)])  # fmt: skip
@pytest.mark.parametrize("rows", [100, 8192 + 64])
def test_few_token_tiles(device, pattern, N, rows, gen):
    """The few-token tiles on rows off their height, slots off the 128-slot step and a
    partial column tile, bias and GELU, against float64."""
    from sparsekernels.kernels.nm_small_tiles import few_token_tiles

    skip_interpreter_on_gpu_machine(device)
    n, m, vector, block = pattern
    if N > 32:  # (33-64 tokens: only where the usual tiles give few programs)
        rows = 4096 - 64 if device == "cuda" else 100
    elif N < 16 and rows < 8192 and (block < 64 or N <= 8):  # (below 16 tokens: 8192+ rows)
        assert few_token_tiles(N, vector, rows, n / m, block, n) is None
        rows = 8192 + 64
    if device != "cuda" and rows > 1000:
        rows = 64 + 36  # (the interpreter: the 32-row tiles on a small weight)
        config = SpmmNmConfig(True, 32, 128, 16, 4, 3)
    else:
        config = SpmmNmConfig(True, *few_token_tiles(N, vector, rows, n / m, block, n))
    k = 11 * m  # 11 groups a row: the last 128-slot step partial (or the only one)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    W = random_nm(rows, k, n, m, gen, vector, block, dtype, device)
    B = randn(k, N, gen=gen, dtype=dtype, device=device)
    bias = randn(W.shape[0], gen=gen, dtype=dtype, device=device)
    got, took_dot = _launch_poisoned(W, B, bias, "gelu", config)
    assert took_dot
    want = torch.nn.functional.gelu(W.to_dense().double() @ B.double() + bias.double()[:, None])
    bound = spmm_bound(W.to_dense(), B) + bias.double().abs()[:, None]
    assert_close(got, want, bound, dtype)


def test_tensor_core_tile_within_one_vector(gen):
    """The tensor-core kernel reads one choice of columns a tile: a tile taller than the
    vector (4 rows of 16) would mix choices and give a wrong product, so it is refused."""
    W = random_nm(32, 64, 4, 8, gen, 4, 4, torch.float32)
    B = randn(64, 16, gen=gen)
    with pytest.raises(ValueError, match="block_m must divide vector"):
        _launch_poisoned(W, B, config=SpmmNmConfig(True, 16, 32, 16, 4, 2))


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_tensor_core_tile_reads_padded_b_columns_never_stores_them(device, gen):
    """B may be wider than the product (ops/_layout.rows_padded_to_16's copies): the tensor-core
    tile reads its columns past N, which keeps the loads wide, and never stores them, whatever
    they hold (random here; zeros in the copies). 24 tokens in a 32-wide B; a short B fails."""
    skip_interpreter_on_gpu_machine(device)
    W = random_nm(40, 24 * 8, 2, 8, gen, 16, 1, torch.float32, device)
    B = randn(W.shape[1], 24, gen=gen, dtype=torch.float32, device=device)
    wide = torch.cat([B, randn(W.shape[1], 8, gen=gen, dtype=torch.float32, device=device)], 1)
    from sparsekernels.kernels import spmm_nm as kernel

    def launch(b):
        out = torch.full((40, 24), float("nan"), dtype=torch.float32, device=device)
        kernel.spmm_nm(values=W.values, indices=W.indices, b=b, bias=None, out=out, n=2, m=8,
                       vector=16, block=1, activation="none", use_dot=True, block_m=16,
                       block_s=32, block_n=16, num_warps=4, num_stages=2)  # fmt: skip
        return out

    want = W.to_dense().double() @ B.double()
    assert_close(launch(wide), want, spmm_bound(W.to_dense(), B), torch.float32)
    with pytest.raises(ValueError, match="b needs at least out's 24 columns, got 20"):
        launch(B[:, :20])


@pytest.mark.gpu
@pytest.mark.parametrize(("pattern", "tokens"), [((2, 8), 33), ((4, 8), 40), ((8, 32), 23)])
def test_linear_pads_b_for_the_tensor_core_tile_on_gpu(pattern, tokens, gen, monkeypatch):
    """linear on 14336 rows, v = 64, at token counts that are not multiples of 16: the
    condensed-K tile reads x^T copied 16-column aligned (masked on N its B loads were 2 bytes a
    thread, unpipelined), compiled, against float64."""
    from sparsekernels.ops import _triton_nm

    launch, seen = _triton_nm.kernel.spmm_nm, []
    monkeypatch.setattr(
        _triton_nm.kernel,
        "spmm_nm",
        lambda **kw: (
            seen.append((kw["use_dot"], kw["b"].shape[1], kw["b"].stride(0))) or launch(**kw)
        ),
    )
    n, m = pattern
    W = random_nm(14336, 2048 + m, n, m, gen, 64, 1, torch.bfloat16, "cuda")
    x = randn(tokens, W.shape[1], gen=gen, dtype=torch.bfloat16, device="cuda")
    got = sk.linear(x, W, backend="triton")
    width = -(-tokens // 16) * 16
    assert seen == [(True, width, width)]
    want = x.double() @ W.to_dense().double().t()
    assert_close(got, want, spmm_bound(x, W.to_dense().t()), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("pattern", "rows", "tokens"),
    [((64, 128, 64, 64), 4096, 9), ((64, 128, 64, 64), 1088, 15), ((4, 8, 64, 1), 8192, 4),
     ((8, 32, 64, 1), 14336, 12), ((16, 32, 64, 1), 8192 + 64, 1), ((16, 32, 64, 1), 4096, 12),
     ((4, 8, 64, 1), 4096 - 64, 9)],
)  # fmt: skip
def test_linear_below_16_tokens_takes_the_few_token_tiles(pattern, rows, tokens, gen, monkeypatch):
    """linear on the GPU, bf16, 1-15 tokens: v = 64 patterns of density 1/4-1/2 keeping 4+ of a
    group on 8192+ rows, and blocks of 64 columns on any weight from 9, take the tensor-core's
    32 x 128 tiles (the decode kernel took 64:128 b=64 to 1.1 ms at 8 tokens); at 9-15 tokens
    on fewer rows the 16-token tile (16 x 128); with bias, against float64."""
    from sparsekernels.ops import _triton_nm

    launch, tiles = _triton_nm.kernel.spmm_nm, []
    monkeypatch.setattr(
        _triton_nm.kernel,
        "spmm_nm",
        lambda **kw: tiles.append((kw["use_dot"], kw["block_m"], kw["block_s"])) or launch(**kw),
    )
    n, m, vector, block = pattern
    K = 41 * m  # (a partial 128-slot step)
    W = random_nm(rows, K, n, m, gen, vector, block, torch.bfloat16, "cuda")
    x = randn(tokens, K, gen=gen, dtype=torch.bfloat16, device="cuda")
    bias = randn(rows, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = sk.linear(x, W, bias, backend="triton")
    sixteen = rows < 8192 and block == 1 and tokens >= 9
    assert tiles == [(True, 16 if sixteen else 32, 128)]
    want = x.double() @ W.to_dense().double().t() + bias.double()
    assert_close(got, want, spmm_bound(x, W.to_dense().t()) + bias.double().abs(), torch.bfloat16)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("tokens", [20, 300])
def test_linear_on_a_small_weight_reads_x_in_place(device, tokens, gen, monkeypatch):
    """linear in bf16 on a weight the small tiles take: the kernel reads x^T strided (no row-
    major copy made) and gives linear's output, bias included, against float64."""
    from sparsekernels.ops import _triton_nm

    skip_interpreter_on_gpu_machine(device)

    def no_copy(b):
        raise AssertionError("x^T was copied row-major")

    monkeypatch.setattr(_triton_nm, "rows_contiguous", no_copy)
    launch, strides = _triton_nm.kernel.spmm_nm, []
    monkeypatch.setattr(
        _triton_nm.kernel, "spmm_nm", lambda **kw: strides.append(kw["b"].stride()) or launch(**kw)
    )
    rows, K = 64 + 16 + 5, 8 * 8 + 8
    assert spmm_nm_config(tokens, 64, False, rows, K).b_in_place
    W = random_nm(rows, K, 2, 8, gen, 64, 1, torch.bfloat16, device)
    x = randn(2, tokens // 2, K, gen=gen, dtype=torch.bfloat16, device=device)
    bias = randn(rows, gen=gen, dtype=torch.bfloat16, device=device)
    got = sk.linear(x, W, bias, backend="triton")
    assert strides == [(1, K)]  # (x^T as it lies in x)
    want = x.double() @ W.to_dense().double().t() + bias.double()
    bound = spmm_bound(W.to_dense(), x.reshape(tokens, K).t()).t().reshape(want.shape)
    assert_close(got, want, bound + bias.double().abs(), torch.bfloat16)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_linear_and_backward_through_kernel(device, gen):
    skip_interpreter_on_gpu_machine(device)
    W = random_nm(32, 32, 2, 8, gen, 16, 2, torch.float64, device)
    values = W.values.clone().requires_grad_()
    x = randn(3, 32, gen=gen, device=device).requires_grad_()
    grad = randn(3, 32, gen=gen, device=device)
    sk.linear(x, W.with_values(values), backend="triton").backward(grad)
    dense = W.to_dense().detach().requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    (x2 @ dense.t()).backward(grad)
    torch.testing.assert_close(values.grad, dense.grad.gather(1, W.column_indices()))
    torch.testing.assert_close(x.grad, x2.grad)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_structural_zeros_do_not_spread_nan(device, gen):
    skip_interpreter_on_gpu_machine(device)
    W = random_nm(16, 16, 1, 8, gen, 16, 1, torch.float32, device)  # one kept column per group
    B = randn(16, 16, gen=gen, dtype=torch.float32, device=device)
    kept = W.column_indices()[0]
    unused = torch.ones(16, dtype=torch.bool, device=device)
    unused[kept] = False
    B[unused] = float("nan")
    assert not torch.isnan(sk.spmm(W, B, backend="triton")).any()


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("N", [1, 5, 20])
def test_transposed_product_without_densifying(device, pattern, N, gen):
    """W^T @ B, the backward of x: the CSR kernel (and on the CPU torch's CSR matmul) on W^T's
    pattern, built once per weight."""
    from sparsekernels.ops import _nm_transpose
    from sparsekernels.ops.spmm import spmm_nm_raw

    skip_interpreter_on_gpu_machine(device)
    n, m, vector, block = pattern
    W = random_nm(2 * vector + 3, 3 * m, n, m, gen, vector, block, torch.float32, device)
    B = randn(W.shape[0], N, gen=gen, dtype=torch.float32, device=device)
    dense_t = W.to_dense().t()
    for b in (B, B.t().contiguous().t()):  # a gradient comes row- or column-major
        args = (W.values, W.indices, b, None, "none", n, m, vector, block, True)
        backends = ("triton", "torch_sparse") if device == "cpu" else ("triton",)
        for backend in backends:
            got = spmm_nm_raw(*args, backend=backend)
            assert got.shape == (W.shape[1], N)
            want, bound = dense_t.double() @ b.double(), spmm_bound(dense_t, b)
            assert_close(got, want, bound, torch.float32)

    def pattern():
        return _nm_transpose.transposed_pattern(W.indices, W.shape[0], n, m, vector, block)[0]

    first = pattern()
    assert pattern() is first  # built once per weight
    W.indices.add_(0)  # an in-place edit bumps the version: rebuilt
    assert pattern() is not first


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("tokens", [1, 4, 9, 16, 32])
def test_no_rows(device, tokens):
    """A weight of no rows: the unpack tile rule divided by its programs (ZeroDivisionError
    in bf16 at 4-32 tokens); the output is empty and x's gradient zero."""
    skip_interpreter_on_gpu_machine(device)
    W = sk.NMMatrix.from_dense(torch.zeros(0, 8, dtype=torch.bfloat16, device=device), 2, 4)
    x = torch.randn(tokens, 8, dtype=torch.bfloat16, device=device, requires_grad=True)
    out = sk.linear(x, W, backend="triton")
    assert out.shape == (tokens, 0)
    (d_x,) = torch.autograd.grad(out, x, torch.ones_like(out))
    assert torch.equal(d_x, torch.zeros_like(x))
    assert sk.spmm(W, x.detach().t().contiguous(), backend="triton").shape == (0, tokens)
