"""GPU checks (marker gpu, run on the H200): the kernel at real sizes in every dtype, automatic
dispatch choosing it, and torch.compile on CUDA."""

import pytest
import torch

import sparsekernels as sk
from _helpers import ALL_DTYPES, assert_close, randn, random_csr, random_nm, spmm_bound

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize(
    "shape,density", [((4096, 4096, 256), 0.1), ((1000, 3001, 17), 0.5), ((512, 512, 1), 0.02)]
)
def test_large_spmm(dtype, shape, density, gen):
    M, K, N = shape
    A = random_csr(M, K, density, gen, dtype, "cuda")
    B = randn(K, N, gen=gen, dtype=dtype, device="cuda")
    bias = randn(M, gen=gen, dtype=dtype, device="cuda")
    got = sk.spmm(A, B, bias, "relu", backend="triton")
    want = sk.spmm(
        A.to(dtype=torch.float64), B.double(), bias.double(), "relu", backend="reference"
    )
    bound = spmm_bound(A.to_dense(), B) + bias.double().abs()[:, None]
    assert_close(got, want, bound, dtype)


@pytest.mark.parametrize("pattern", [(2, 8, 1), (1, 8, 64), (2, 4, 64)])
def test_automatic_choice_large_n(pattern, gen):
    n, m, vector = pattern  # decode and batched sizes, whichever backend dispatch picks
    W = random_nm(512, 1024, n, m, gen, vector, 1, torch.bfloat16, "cuda")
    for tokens in (1, 16, 2048):
        x = randn(tokens, 1024, gen=gen, dtype=torch.bfloat16, device="cuda")
        want = x.double() @ W.to_dense().double().t()
        bound = x.double().abs() @ W.to_dense().double().abs().t()
        assert_close(sk.linear(x, W), want, bound, torch.bfloat16)


def test_dispatch_picks_triton_on_cuda():
    from sparsekernels.kernels.tuning import SPMM_CSR_DECODE_MAX_N
    from sparsekernels.ops import _dispatch

    def choice(n, dtype, density):
        facts = {"n": n, "batch": 1, "density": density}
        return _dispatch.choose("spmm_csr", _dispatch.Problem(torch.device("cuda"), dtype, facts))

    # decode sizes run the kernel; past them half precision densifies for cuBLAS, and strict
    # fp32 keeps the kernel while it stores at most 14%
    assert choice(SPMM_CSR_DECODE_MAX_N, torch.bfloat16, 0.3) == "triton"
    assert choice(SPMM_CSR_DECODE_MAX_N + 1, torch.bfloat16, 0.1) == "dense"
    assert choice(256, torch.float32, 0.1) == "triton"
    assert choice(256, torch.float32, 0.3) == "dense"


def test_compile_on_cuda(gen):
    A = random_csr(300, 200, 0.1, gen, torch.bfloat16, "cuda")
    x = randn(64, 200, gen=gen, dtype=torch.bfloat16, device="cuda")
    f = torch.compile(lambda x: sk.linear(x, A), fullgraph=True)
    torch.testing.assert_close(f(x), sk.linear(x, A))


def test_every_op_on_cuda(gen):
    P = random_csr(64, 64, 0.2, gen, torch.float32, "cuda")
    q = randn(2, 2, 64, 16, gen=gen, device="cuda", dtype=torch.float32).requires_grad_()
    out = sk.sparse_attention(q, q, q, P)
    out.sum().backward()
    cpu = sk.sparse_attention(q.detach().cpu(), q.detach().cpu(), q.detach().cpu(), P.cpu())
    torch.testing.assert_close(out.detach().cpu(), cpu, rtol=1e-4, atol=1e-5)
