"""The CSR bitmap kernels (each step's kept values decoded into a dense tile from bitmap words,
then one MMA): their operand against a plain encoding; the Triton kernel in the interpreter on
CPU (small shapes, float16: the interpreter's bfloat16 tl.dot is broken) and compiled on CUDA
(gpu, bfloat16), its Gluon twin on CUDA only; float64 references, poisoned outputs."""

import pytest
import torch

from _helpers import (
    KERNEL_DEVICES,
    assert_close,
    randn,
    random_csr,
    skip_interpreter_on_gpu_machine,
    spmm_bound,
)
from sparsekernels.kernels.spmm_csr_bitmap import bitmap_words, spmm_csr_bitmap, supports
from sparsekernels.kernels.spmm_csr_bitmap_wgmma import spmm_csr_bitmap_wgmma

# the Triton kernel (interpreter and GPU) and its Gluon twin (GPU only: no interpreter)
KERNELS = [
    pytest.param("cpu", "triton", id="interpreter"),
    pytest.param("cuda", "triton", id="triton", marks=pytest.mark.gpu),
    pytest.param("cuda", "gluon", id="gluon", marks=pytest.mark.gpu),
]


def _launch_poisoned(
    A, B, bias=None, activation="none", split=1, block_w=2, fused=True, out=None, kernel="triton"
):
    if out is None:
        out = torch.empty(A.shape[0], B.shape[1], dtype=B.dtype, device=B.device)
    out.fill_(float("nan"))
    operands = dict(
        words=bitmap_words(A.row_offsets, A.column_indices, *A.shape),
        row_offsets=A.row_offsets,
        values=A.values,
        b=B,
        bias=bias,
        out=out,
        activation=activation,
        block_w=block_w,
        split=split,
        fused=fused,
    )
    if kernel == "gluon":
        block_n = 8 if B.shape[1] <= 8 else 16
        spmm_csr_bitmap_wgmma(**operands, block_m=64, block_n=block_n)
    else:
        spmm_csr_bitmap(**operands, block_m=16, block_n=16, num_warps=4, num_stages=2)
    return out


def test_bitmap_words_match_a_plain_encoding(gen):
    """Each 32-column word: its kept columns as bits, and the row's kept values before it;
    empty rows, a partial last word, every column kept in a row."""
    A = random_csr(9, 70, 0.4, gen)
    dense = A.to_dense()
    dense[4] = 1.0  # every column
    A = type(A).from_dense(dense)
    words = bitmap_words(A.row_offsets, A.column_indices, 9, 70)
    assert words.shape == (9, 3) and words.dtype == torch.int64
    for r in range(9):
        before = 0
        for w in range(3):
            kept = (dense[r, w * 32 : (w + 1) * 32] != 0).tolist()
            bits = sum(1 << i for i, k in enumerate(kept) if k)
            assert words[r, w].item() == (before << 32) | bits, (r, w)
            before += sum(kept)


@pytest.mark.parametrize(("device", "kernel"), KERNELS)
@pytest.mark.parametrize("tokens", [1, 5, 17])
@pytest.mark.parametrize("density", [0.3, 0.9])
def test_every_element_written(device, kernel, tokens, density, gen):
    """A partial last row tile and single-row weights, empty rows, a walk whose last step and
    last word are partial and one of whole steps, K of one column, x^T as linear passes it
    into linear's column-major out and a row-major B into a row-major out; two column tiles
    at 17 tokens."""
    skip_interpreter_on_gpu_machine(device)
    dtype = torch.bfloat16 if device == "cuda" else torch.float16
    for rows, k in ((19, 2 * 64 + 37), (1, 128), (21, 1)):
        A = random_csr(rows, k, density, gen, dtype, device)
        x = randn(tokens, k, gen=gen, dtype=dtype, device=device)
        linear_out = torch.empty(tokens, rows, dtype=dtype, device=device).t()
        for B, out in ((x.t(), linear_out), (x.t().contiguous(), None)):
            got = _launch_poisoned(A, B, out=out, kernel=kernel)
            assert_close(
                got, A.to_dense().double() @ B.double(), spmm_bound(A.to_dense(), B), dtype
            )


@pytest.mark.parametrize(("device", "kernel"), KERNELS)
@pytest.mark.parametrize("split", [1, 3, 64])
@pytest.mark.parametrize("fused", [True, False])
def test_bias_activation_and_split(device, kernel, split, fused, gen):
    """Split-K sums each range of words into the float32 workspace, then bias and activation
    in the last range of a tile to finish (fused) or a second kernel; at 64 more ranges are
    asked for than steps. Both sum the planes in one order: the same bits."""
    skip_interpreter_on_gpu_machine(device)
    dtype = torch.bfloat16 if device == "cuda" else torch.float16
    A = random_csr(37, 13 * 64 + 5, 0.3, gen, dtype, device)
    B = randn(13 * 64 + 5, 5, gen=gen, dtype=dtype, device=device)
    bias = randn(37, gen=gen, dtype=dtype, device=device)
    want = torch.nn.functional.gelu(A.to_dense().double() @ B.double() + bias.double()[:, None])
    bound = spmm_bound(A.to_dense(), B) + bias.double().abs()[:, None]
    got = _launch_poisoned(A, B, bias, "gelu", split, fused=fused, kernel=kernel)
    assert_close(got, want, bound, dtype)
    other = _launch_poisoned(A, B, bias, "gelu", split, fused=not fused, kernel=kernel)
    assert torch.equal(got, other)


def test_a_bad_row_is_caught(gen):
    """The tolerance would see one row of the product wrong: row 7's kept values one column
    over change that row only."""
    A = random_csr(20, 96, 0.4, gen, torch.float16)
    x = randn(96, 4, gen=gen, dtype=torch.float16)
    got = _launch_poisoned(A, x)
    wrong = A.to_dense().double().clone()
    wrong[7] = wrong[7].roll(1)
    with pytest.raises(AssertionError):
        assert_close(got, wrong @ x.double(), spmm_bound(A.to_dense(), x), torch.float16)
    assert_close(
        got, A.to_dense().double() @ x.double(), spmm_bound(A.to_dense(), x), torch.float16
    )


def test_supports_and_bad_input(gen):
    """16-bit values only; words of another weight's shape or type and tiles tl.dot cannot
    take are refused before any launch."""
    assert supports(torch.bfloat16, 4096) and supports(torch.float16, 1)
    assert not supports(torch.float32, 4096) and not supports(torch.bfloat16, 2**31)
    A = random_csr(20, 96, 0.4, gen, torch.float16)
    x = randn(96, 4, gen=gen, dtype=torch.float16)
    words = bitmap_words(A.row_offsets, A.column_indices, 20, 96)
    out = torch.empty(20, 4, dtype=torch.float16)
    launch = dict(row_offsets=A.row_offsets, values=A.values, b=x, bias=None, out=out,
                  activation="none", num_warps=4, num_stages=1)  # fmt: skip
    tiles = dict(block_m=16, block_w=2, block_n=16)
    with pytest.raises(ValueError, match="words must be bitmap_words"):
        spmm_csr_bitmap(words=words[:, :2], **launch, **tiles)
    with pytest.raises(ValueError, match="words must be bitmap_words"):
        spmm_csr_bitmap(words=words.int(), **launch, **tiles)
    with pytest.raises(ValueError, match="block_m and block_n must be at least 16"):
        spmm_csr_bitmap(words=words, **launch, **dict(tiles, block_n=8))
    with pytest.raises(ValueError, match="block_w a power of two"):
        spmm_csr_bitmap(words=words, **launch, **dict(tiles, block_w=3))
    del launch["num_warps"], launch["num_stages"]
    with pytest.raises(ValueError, match="words must be bitmap_words"):
        spmm_csr_bitmap_wgmma(words=words[:, :2], **launch)
    with pytest.raises(ValueError, match="block_m must be 64 or 128"):
        spmm_csr_bitmap_wgmma(words=words, **launch, block_m=32)
    with pytest.raises(ValueError, match="block_n 8-256 by 8"):
        spmm_csr_bitmap_wgmma(words=words, **launch, block_n=12)
    with pytest.raises(ValueError, match="block_w must be a power of two from 2"):
        spmm_csr_bitmap_wgmma(words=words, **launch, block_w=1)
    huge = torch.zeros(1, dtype=torch.float16).expand(2**31)  # (no memory behind it)
    with pytest.raises(ValueError, match="values must number under 2"):
        spmm_csr_bitmap_wgmma(words=words, **dict(launch, values=huge))


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["triton", "gluon"])
@pytest.mark.parametrize("tokens", [1, 8, 16])
@pytest.mark.parametrize("split", [1, 8])
@pytest.mark.parametrize("block_w", [4, 8])
def test_llm_tiles_on_gpu(kernel, tokens, split, block_w, gen):
    """LLM-like rows (4096 + 40 columns, a partial word and step) at 70% in bf16, the
    sweep's tiles, split for a few-row weight."""
    A = random_csr(1005, 4096 + 40, 0.3, gen, torch.bfloat16, "cuda")
    x = randn(tokens, 4096 + 40, gen=gen, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(tokens, 1005, dtype=torch.bfloat16, device="cuda").t()
    got = _launch_poisoned(A, x.t(), split=split, block_w=block_w, out=out, kernel=kernel)
    want = A.to_dense().double() @ x.t().double()
    assert_close(got, want, spmm_bound(A.to_dense(), x.t()), torch.bfloat16)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("tokens", [3, 16])
def test_linear_routes_through_a_bitmap_window(device, tokens, gen, monkeypatch):
    """With a window open, linear takes the bitmap kernel (the Gluon one on Hopper, the
    Triton one in the interpreter) for a CSR weight in it: bias, linear's column-major out,
    the words built once per pattern and again after an in-place edit; outside the window
    (and with none open, as now) it does not."""
    skip_interpreter_on_gpu_machine(device)
    import sparsekernels as sk
    from sparsekernels.kernels import csr_bitmap_tuning, spmm_csr_bitmap_wgmma
    from sparsekernels.ops import _csr_bitmap

    dtype = torch.bfloat16 if device == "cuda" else torch.float16
    A = random_csr(70, 200, 0.3, gen, dtype, device)
    x = randn(tokens, 200, gen=gen, dtype=dtype, device=device)
    bias = randn(70, gen=gen, dtype=dtype, device=device)
    calls = []
    for module, name in ((_csr_bitmap.spmm_csr_bitmap, "spmm_csr_bitmap"),
                         (spmm_csr_bitmap_wgmma, "spmm_csr_bitmap_wgmma")):  # fmt: skip
        launch = getattr(module, name)
        monkeypatch.setattr(
            module, name, lambda launch=launch, name=name, **kw: calls.append(name) or launch(**kw)
        )
    backend = "triton"  # (the automatic choice on a CPU is the reference path)
    assert sk.linear(x, A, bias, backend=backend) is not None and calls == []  # no window
    window = csr_bitmap_tuning._Window(2, 16, 0.2, 0.4)
    monkeypatch.setattr(csr_bitmap_tuning, "CSR_BITMAP_WINDOWS", {dtype: (window,)})
    got = sk.linear(x, A, bias, backend=backend)
    gluon = device == "cuda" and torch.cuda.get_device_capability() == (9, 0)
    assert calls == ["spmm_csr_bitmap_wgmma" if gluon else "spmm_csr_bitmap"]
    want = x.double() @ A.to_dense().double().t() + bias.double()
    bound = spmm_bound(x, A.to_dense().t()) + bias.double().abs()
    assert_close(got, want, bound, dtype)
    words = _csr_bitmap.bitmap_words(A.row_offsets, A.column_indices, 70, 200)
    assert _csr_bitmap.bitmap_words(A.row_offsets, A.column_indices, 70, 200) is words
    A.column_indices.add_(0)  # an in-place edit moves the version
    assert _csr_bitmap.bitmap_words(A.row_offsets, A.column_indices, 70, 200) is not words
    calls.clear()
    sk.linear(randn(17, 200, gen=gen, dtype=dtype, device=device), A, backend=backend)  # past
    assert calls == []


def test_config_inside_the_windows_only(monkeypatch):
    """No window, no tile; inside one, the kernel's tile with a split that fills 4 programs
    an SM (two steps a range at least); outside its tokens or densities, none."""
    from sparsekernels.kernels import csr_bitmap_tuning as tuning

    bf16 = torch.bfloat16
    assert tuning.csr_bitmap_config(8, 4096, 14336, 17_616_077, bf16, 132, True) is None
    window = tuning._Window(2, 16, 0.2, 0.4)
    monkeypatch.setattr(tuning, "CSR_BITMAP_WINDOWS", {bf16: (window,)})
    gluon = tuning.csr_bitmap_config(8, 4096, 14336, 17_616_077, bf16, 132, True)
    assert (gluon.block_m, gluon.block_w, gluon.block_n, gluon.split) == (64, 4, 8, 8)
    triton_tile = tuning.csr_bitmap_config(16, 4096, 14336, 17_616_077, bf16, 132, False)
    assert (triton_tile.block_m, triton_tile.block_n, triton_tile.split) == (32, 16, 4)
    assert tuning.csr_bitmap_config(1, 4096, 14336, 17_616_077, bf16, 132, True) is None
    assert tuning.csr_bitmap_config(8, 4096, 14336, 5_000_000, bf16, 132, True) is None
    assert tuning.csr_bitmap_config(8, 4096, 14336, 17_616_077, torch.float16, 132, True) is None
