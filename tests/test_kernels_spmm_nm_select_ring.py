"""The one-token N:M select kernel fed by a TMA ring (Gluon, Hopper only): compiled on the H200
against float64 references with poisoned outputs. On the CPU only `supports` runs (Gluon has no
interpreter; test_compile_hopper.py compiles it for sm_90 here)."""

import pytest
import torch

from _helpers import assert_close, dense_spmm, randn, random_nm, spmm_bound
from sparsekernels.kernels.spmm_nm_select_ring import spmm_nm_select_ring, supports


def _run(W, x, bias=None, activation="none", **options):
    out = torch.full((W.shape[0] + 3, 1), float("nan"), dtype=x.dtype, device=x.device)[:-3]
    spmm_nm_select_ring(
        values=W.values, words=W.packed_indices(4), x=x, bias=bias, out=out, n=W.n,
        activation=activation, **options,
    )  # fmt: skip
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", [(1, 8), (2, 8)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows, warps, stages", [(8, 8, 4), (4, 4, 2), (16, 4, 3), (4, 8, 2)])
@pytest.mark.parametrize(
    "producer, prefetch, counted, fast_picks",
    [
        (True, False, False, False),
        (False, True, False, False),
        (False, False, False, True),
        (False, True, True, False),
        (False, True, True, True),
    ],
)
def test_matches_float64(
    pattern, dtype, rows, warps, stages, producer, prefetch, counted, fast_picks, gen
):
    """Rows not a multiple of the step's, a row's units under one step, a whole number of steps
    and steps plus a partial one; programs capped at 3 so each walks many row blocks and the
    ring's buffers wrap in both phases; with a TMA warp and without, x a step ahead and not,
    the refill's coordinates counted and divided; x's halves picked by byte permutes and by
    selects, its candidates unmasked where a row is whole steps (K 4096 on 4 warps) and masked;
    the finish's sums transposed (warps dividing the rows) and not (4 rows on 8 warps); bias
    and GELU on one case."""
    n, m = pattern
    for M, K in ((37, 768), (45, 4096), (21, 4352)):
        W = random_nm(M, K, n, m, gen, dtype=dtype, device="cuda")
        x = randn(K, 1, gen=gen, dtype=dtype, device="cuda")
        assert supports(W.values, W.packed_indices(4), n, m, 4)
        options = dict(rows=rows, warps=warps, stages=stages, producer=producer, prefetch=prefetch,
                       counted=counted, permute=fast_picks, unmasked=fast_picks)  # fmt: skip
        got = _run(W, x, max_programs=3, **options)
        assert_close(got, dense_spmm(W.to_dense(), x), spmm_bound(W.to_dense(), x), dtype)
    bias = randn(M, gen=gen, dtype=dtype, device="cuda")
    got = _run(W, x, bias, "gelu", **options)
    want = dense_spmm(W.to_dense(), x, bias, "gelu")
    assert_close(got, want, spmm_bound(W.to_dense(), x) + bias.double().abs()[:, None], dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", [(1, 8), (2, 8)])
def test_llm_shape_every_program(pattern, gen):
    """4096 x 14336 with one program a multiprocessor and with two, x a step ahead and not, the
    refill's coordinates counted, x's halves picked by byte permutes (and unmasked):
    every row stored, equal to float64 and bit for bit the same in every run (a fixed order of
    sums)."""
    n, m = pattern
    W = random_nm(4096, 14336, n, m, gen, dtype=torch.bfloat16, device="cuda")
    x = randn(14336, 1, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = _run(W, x)
    assert_close(got, dense_spmm(W.to_dense(), x), spmm_bound(W.to_dense(), x), torch.bfloat16)
    assert torch.equal(got, _run(W, x))
    assert torch.equal(got, _run(W, x, programs_per_sm=2))
    assert torch.equal(got, _run(W, x, producer=False))
    assert torch.equal(got, _run(W, x, prefetch=False))
    assert torch.equal(got, _run(W, x, counted=True))
    assert torch.equal(got, _run(W, x, counted=True, permute=True, unmasked=True))
    assert torch.equal(got, _run(W, x, permute=True, programs_per_sm=4))


@pytest.mark.gpu
def test_unaligned_x_is_copied(gen):
    """x at an odd offset (linear's column of x^T can be anywhere) gives the same result."""
    W = random_nm(33, 1024, 2, 8, gen, dtype=torch.bfloat16, device="cuda")
    storage = randn(1025, gen=gen, dtype=torch.bfloat16, device="cuda")
    x = storage[1:].reshape(-1, 1)
    assert torch.equal(_run(W, x), _run(W, x.clone()))


def test_supports(gen):
    """1:8 and 2:8 in bf16 and fp16 with 4-bit offsets and rows at 16-byte strides only."""
    W = random_nm(8, 256, 2, 8, gen, dtype=torch.bfloat16)
    words = W.packed_indices(4)
    assert supports(W.values, words, 2, 8, 4)
    assert not supports(W.values, words, 2, 4, 4)  # m of 4
    assert not supports(W.values.float(), words, 2, 8, 4)  # fp32
    assert not supports(W.values, words, 4, 8, 4)  # 4:8
    assert not supports(W.values, W.packed_indices(8), 2, 8, 8)  # byte offsets
    odd = random_nm(8, 200, 2, 8, gen, dtype=torch.bfloat16)  # rows of 50 values: 100 bytes
    assert not supports(odd.values, odd.packed_indices(4), 2, 8, 4)


def test_route_takes_it_on_large_half_1_8():
    """bf16 and fp16 1:8 weights of 4096+ rows and columns at one token take the measured
    launch; 2:8, fp32, two tokens, vector-wise and smaller weights do not."""
    from sparsekernels.kernels.nm_decode_tuning import SELECT_RING, spmm_nm_select_ring_config

    bf16 = torch.bfloat16
    for k, rows in ((14336, 4096), (4096, 28672), (4096, 14336), (4096, 4096)):
        assert spmm_nm_select_ring_config(1, 1, 8, 1, 1, bf16, k, rows) == SELECT_RING
        assert spmm_nm_select_ring_config(1, 1, 8, 1, 1, torch.float16, k, rows) == SELECT_RING
    assert spmm_nm_select_ring_config(1, 1, 8, 1, 1, bf16, 4096, 2048) is None  # few rows
    assert spmm_nm_select_ring_config(1, 1, 8, 1, 1, bf16, 2048, 8192) is None  # short rows
    assert spmm_nm_select_ring_config(1, 2, 8, 1, 1, bf16, 14336, 4096) is None  # a tie
    assert spmm_nm_select_ring_config(1, 1, 8, 1, 1, torch.float32, 14336, 4096) is None
    assert spmm_nm_select_ring_config(2, 1, 8, 1, 1, bf16, 14336, 4096) is None
    assert spmm_nm_select_ring_config(1, 1, 8, 4, 1, bf16, 14336, 4096) is None


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_linear_routes_through_it(gen, monkeypatch, dtype):
    """The N:M op's decode path on a half-precision 1:8 weight with long rows at one token
    (linear's x^T view and column-major output, bias and GELU) runs this kernel once, against
    float64; and sk.linear takes it too."""
    import sparsekernels as sk
    from sparsekernels.ops import _triton_nm

    calls = []
    launch = _triton_nm.select_ring.spmm_nm_select_ring
    monkeypatch.setattr(
        _triton_nm.select_ring, "spmm_nm_select_ring", lambda **kw: calls.append(1) or launch(**kw)
    )
    rows, cols = 4101, 4096  # rows not a multiple of the step
    W = random_nm(rows, cols, 1, 8, gen, dtype=dtype, device="cuda")
    x = randn(1, cols, gen=gen, dtype=dtype, device="cuda")
    bias = randn(rows, gen=gen, dtype=dtype, device="cuda")
    out = torch.full((1, rows), float("nan"), dtype=dtype, device="cuda").t()
    _triton_nm._decode(W.values, W.indices, x.t(), bias, out, "gelu", 1, 8, 1, 1)
    assert calls == [1]
    want = dense_spmm(W.to_dense(), x.t(), bias, "gelu")
    bound = spmm_bound(W.to_dense(), x.t()) + bias.double().abs()[:, None]
    assert_close(out, want, bound, dtype)
    got = sk.linear(x, W, bias, backend="triton")
    assert calls == [1, 1]
    want = dense_spmm(W.to_dense(), x.t(), bias).t()
    bound = spmm_bound(W.to_dense(), x.t()).t() + bias.double().abs()
    assert_close(got, want, bound, dtype)


@pytest.mark.gpu
def test_linear_takes_it_before_the_sparse_tensor_cores(gen, monkeypatch):
    """4096 x 14336 bf16 1:8 at one token: mma.sp's route covers it (2^25+ elements, K > rows)
    but the ring measured faster, so linear runs the ring once; against float64."""
    import sparsekernels as sk
    from sparsekernels.ops import _triton_nm

    calls = []
    launch = _triton_nm.select_ring.spmm_nm_select_ring
    monkeypatch.setattr(
        _triton_nm.select_ring, "spmm_nm_select_ring", lambda **kw: calls.append(1) or launch(**kw)
    )
    W = random_nm(4096, 14336, 1, 8, gen, dtype=torch.bfloat16, device="cuda")
    x = randn(1, 14336, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = sk.linear(x, W, backend="triton")
    assert calls == [1]
    want = dense_spmm(W.to_dense(), x.t()).t()
    assert_close(got, want, spmm_bound(W.to_dense(), x.t()).t(), torch.bfloat16)
