"""The cuSPARSELt algorithm search's cache (ops/_cusparselt_algs.py): on CPU with a fake
cuSPARSELt that records what it is asked; on the GPU, every searched setting's product checked
against float64 and CUDA-graph capture taking the defaults."""

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, randn, random_nm
from sparsekernels.kernels import tuning
from sparsekernels.ops import _cusparselt_algs as algs


class FakeSearch:
    """torch's search and matmul on CPU: the search returns `picks` in turn; the matmul rejects
    alg_ids in `rejected`, as cuSPARSELt does an algorithm its plan does not have."""

    def __init__(self, picks, rejected=()):
        self.picks, self.rejected = list(picks), set(rejected)
        self.searches, self.calls, self.transposes = 0, [], []

    def search(self, packed, b, bias=None, transpose_result=False):
        self.searches += 1
        return self.picks.pop(0)

    def sparse_mm(
        self, packed, b, bias=None, transpose_result=False, alg_id=0, split_k=1, split_k_mode=-1
    ):
        self.calls.append((alg_id, split_k, split_k_mode))
        self.transposes.append(transpose_result)
        if alg_id in self.rejected:
            raise RuntimeError(f"CUDA error: alg_id {alg_id} is out of range")
        out = packed @ b if bias is None else packed @ b + bias[:, None]
        return out.t().contiguous() if transpose_result else out


@pytest.fixture
def fake(monkeypatch):
    algs.clear()
    lt = FakeSearch(picks=[3, 5, 7, 9, 11])
    monkeypatch.setattr(torch, "_cslt_sparse_mm_search", lt.search)
    monkeypatch.setattr(torch, "_cslt_sparse_mm", lt.sparse_mm)
    monkeypatch.setattr(torch._C, "_cusparselt", None, raising=False)
    yield lt
    algs.clear()


def test_search_once_per_bucket(fake, gen):
    packed = randn(32, 64, gen=gen)
    b = randn(64, 2048 + 8, gen=gen)
    want = packed.double() @ b.double()
    torch.testing.assert_close(algs.sparse_mm(packed, b, None).double(), want)
    assert fake.searches == 1 and fake.calls[-1] == (3, 1, -1)
    algs.sparse_mm(packed, randn(64, 2048 + 64, gen=gen), None)  # same 256-token bucket
    assert fake.searches == 1 and fake.calls[-1] == (3, 1, -1)
    algs.sparse_mm(packed, randn(64, 2048 + 512, gen=gen), None)  # the next bucket
    assert fake.searches == 2 and fake.calls[-1] == (5, 1, -1)
    algs.sparse_mm(packed, b.t().contiguous().t(), None)  # column-major B: its own search
    algs.sparse_mm(packed, b, randn(32, gen=gen))  # with a bias: its own search
    assert fake.searches == 4 and [c[0] for c in fake.calls[-2:]] == [7, 9]
    out = algs.sparse_mm(packed, b, None, transposed=True)  # written transposed: its own search
    assert fake.searches == 5 and out.shape == (b.shape[1], 32)
    torch.testing.assert_close(out.t().double(), want)


def test_fp16_written_transposed_is_never_searched(fake, gen):
    """(cuSPARSELt's search faults there): made row-major, searched so, and copied."""
    packed = randn(32, 64, gen=gen, dtype=torch.float16)
    b = randn(64, 256, gen=gen, dtype=torch.float16)
    out = algs.sparse_mm(packed, b, None, transposed=True)
    assert fake.searches == 1 and fake.calls == [(3, 1, -1)] and fake.transposes == [False]
    assert out.shape == (256, 32) and out.is_contiguous()
    torch.testing.assert_close(out, (packed @ b).t())


@pytest.mark.parametrize("tiled", [False, True])
def test_transposed_without_a_setting_is_made_row_major(tiled, fake, monkeypatch, gen):
    """While capturing (no search) algorithm 0 written transposed is slower than row-major
    plus a copy: so the product is made row-major, then copied into the transposed order
    (by torch, or with CUSPARSELT_TILED_TRANSPOSE by kernels/transpose.py)."""
    monkeypatch.setattr(tuning, "CUSPARSELT_TILED_TRANSPOSE", tiled)
    can_search = algs._can_search
    monkeypatch.setattr(algs, "_can_search", lambda device: False)
    packed, b = randn(32, 64, gen=gen), randn(64, 256, gen=gen)
    out = algs.sparse_mm(packed, b, None, transposed=True)
    assert fake.searches == 0 and fake.calls == [(0, 1, -1)] and fake.transposes == [False]
    assert out.shape == (256, 32) and out.is_contiguous()
    torch.testing.assert_close(out.double(), (packed.double() @ b.double()).t())
    monkeypatch.setattr(algs, "_can_search", can_search)
    fake_search_now = algs.sparse_mm(packed, b, None, transposed=True)  # eager: searched
    assert fake.searches == 1 and fake.transposes[-1] is True
    torch.testing.assert_close(fake_search_now, out)


def test_rejected_setting_falls_back_to_the_default(fake, gen):
    fake.rejected = {3}
    packed, b = randn(32, 64, gen=gen), randn(64, 256, gen=gen)
    out = algs.sparse_mm(packed, b, None)
    torch.testing.assert_close(out.double(), packed.double() @ b.double())
    assert fake.calls == [(3, 1, -1), (0, 1, -1)]
    algs.sparse_mm(packed, b, None)  # remembered: no second try of the rejected one
    assert fake.calls == [(3, 1, -1), (0, 1, -1), (0, 1, -1)] and fake.searches == 1


def test_newer_binding_returns_split_k(fake, monkeypatch, gen):
    class Binding:
        @staticmethod
        def mm_search(packed, b, bias, alpha, out_dtype, transpose_result):
            return (4, 2, 1, 12)  # alg_id, split_k, split_k_mode, max_alg_id

    monkeypatch.setattr(torch._C, "_cusparselt", Binding, raising=False)
    algs.sparse_mm(randn(32, 64, gen=gen), randn(64, 256, gen=gen), None)
    assert fake.calls[-1] == (4, 2, 1) and fake.searches == 0


def test_earlier_binding_keeps_only_the_algorithm(fake, monkeypatch, gen):
    class Binding:
        @staticmethod
        def mm_search(packed, b, bias, alpha, out_dtype, transpose_result):
            return (6, 2, True, 12)  # alg_id, split_k, split_k_one_kernel, max_alg_id

    monkeypatch.setattr(torch._C, "_cusparselt", Binding, raising=False)
    algs.sparse_mm(randn(32, 64, gen=gen), randn(64, 256, gen=gen), None)
    assert fake.calls[-1] == (6, 1, -1)


def test_search_off_and_while_compiling(fake, monkeypatch, gen):
    packed, b = randn(32, 64, gen=gen), randn(64, 256, gen=gen)
    monkeypatch.setattr(tuning, "CUSPARSELT_SEARCH", False)
    algs.sparse_mm(packed, b, None)
    monkeypatch.setattr(tuning, "CUSPARSELT_SEARCH", True)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    algs.sparse_mm(packed, b, None)
    assert fake.searches == 0 and fake.calls == [(0, 1, -1), (0, 1, -1)]


def test_cache_keeps_the_most_recent_keys(fake, monkeypatch, gen):
    monkeypatch.setattr(algs, "MAX_KEYS", 2)
    fake.picks = [1, 2, 3, 4]
    packed = randn(32, 64, gen=gen)
    first, second, third = (randn(64, 256 * i, gen=gen) for i in (1, 2, 3))
    for b in (first, second, first, third):  # first used again: second is the oldest
        algs.sparse_mm(packed, b, None)
    algs.sparse_mm(packed, first, None)
    assert fake.searches == 3 and fake.calls[-1][0] == 1


# ============================================================================ on the GPU
def _needs_cusparselt():
    from sparsekernels.formats import semi_structured

    if not semi_structured.cusparselt_built():
        pytest.skip("this CUDA torch build has no cuSPARSELt")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens", [128, 2048, 2100, 4096])
def test_searched_setting_matches_float64(tokens, dtype, gen):
    _needs_cusparselt()
    algs.clear()
    W = random_nm(4096, 4096, 2, 4, gen, dtype=dtype, device="cuda")
    x = randn(tokens, 4096, gen=gen, dtype=dtype, device="cuda")
    bias = randn(4096, gen=gen, dtype=dtype, device="cuda")
    want = x.double() @ W.to_dense().double().t() + bias.double()
    bound = x.double().abs() @ W.to_dense().double().abs().t() + bias.double().abs()
    out = torch.full((tokens, 4096), float("nan"), device="cuda", dtype=dtype)
    out.copy_(sk.linear(x, W, bias, backend="cusparselt"))
    assert_close(out, want, bound, dtype)
    assert len(algs._settings) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_capture_takes_the_default_then_eager_searches(dtype, gen):
    _needs_cusparselt()
    algs.clear()
    W = random_nm(1024, 1024, 2, 4, gen, dtype=dtype, device="cuda")
    x = randn(2048, 1024, gen=gen, dtype=dtype, device="cuda")
    sk.linear(x, W, backend="cusparselt")  # packs the weight outside the capture
    algs.clear()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = sk.linear(x, W, backend="cusparselt")
    assert not algs._settings  # no search while capturing
    graph.replay()
    want = x.double() @ W.to_dense().double().t()
    bound = x.double().abs() @ W.to_dense().double().abs().t()
    assert_close(y, want, bound, dtype)
    sk.linear(x, W, backend="cusparselt")
    assert len(algs._settings) == 1
