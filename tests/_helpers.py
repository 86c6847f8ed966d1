"""Shared test helpers: random sparse operands and error bounds that catch one bad row."""

from __future__ import annotations

import pytest
import torch

import sparsekernels as sk

# a Triton kernel test's two places: the interpreter on a CPU machine, the compiled kernel on CUDA
KERNEL_DEVICES = [
    pytest.param("cpu", id="interpreter"),
    pytest.param("cuda", id="cuda", marks=pytest.mark.gpu),
]


def skip_interpreter_on_gpu_machine(device) -> None:
    if device == "cpu" and torch.cuda.is_available():
        pytest.skip("the interpreter runs only on machines without CUDA")


ALL_DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]

# Relative error allowed against a float64 reference, measured against the bound
# sum_k |a_ik| |b_kj| of each element: a few units of the output dtype's rounding.
_REL = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def rel_tol(dtype: torch.dtype) -> float:
    return _REL[dtype]


def randn(*shape, gen, dtype=torch.float64, device="cpu") -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)


def random_mask(rows, cols, density, gen, empty_rows=True) -> torch.Tensor:
    """A random pattern with the given density; with empty_rows, some rows are left empty."""
    mask = torch.rand(rows, cols, generator=gen) < density
    if empty_rows and rows > 2:
        mask[:: max(2, rows // 3)] = False
    return mask


def with_column_dtype(A, dtype):
    """A's arrays as a kernel's launcher takes them, its column indices in `dtype`: a CSRMatrix
    holds int16 where every column fits, so a kernel test sees wider ones only through this."""
    from types import SimpleNamespace

    return SimpleNamespace(
        row_offsets=A.row_offsets, column_indices=A.column_indices.to(dtype), values=A.values,
        row_order=A.row_order, shape=A.shape, nnz=A.nnz,
    )  # fmt: skip


def random_csr(rows, cols, density, gen, dtype=torch.float64, device="cpu", empty_rows=True):
    mask = random_mask(rows, cols, density, gen, empty_rows)
    dense = randn(rows, cols, gen=gen) * mask
    dense[mask & (dense == 0)] = 1.0  # stored values are never zero
    return sk.CSRMatrix.from_dense(dense.to(dtype), mask=mask).to(device=device)


def x_with_nan_where_unused(A, gen, dtype, device):
    """x (K,) for a one-token product with A, with a stride of 2 and NaN at the columns no
    stored entry reads (a kernel must not let them spread)."""
    x = randn(A.shape[1], 2, gen=gen, dtype=dtype, device=device)[:, 0]
    used = torch.zeros(A.shape[1], dtype=torch.bool, device=device)
    used[A.column_indices.long()] = True
    x[~used] = float("nan")
    return x


def b_layouts(x: torch.Tensor) -> dict:
    """x (N, K) as B = x^T in the layouts the routes pass: strided (linear's), row-major, and
    padded to a power-of-two width (ops/_layout.padded_rows)."""
    from sparsekernels.ops._layout import padded_rows

    return {"strided": x.t(), "row-major": x.t().contiguous(), "padded": padded_rows(x.t())}


def xs_with_nan_where_unused(A, n, gen, dtype, device):
    """x (n, K) for a few-token product with A, NaN at the columns no stored entry reads."""
    x = randn(n, A.shape[1], gen=gen, dtype=dtype, device=device)
    used = torch.zeros(A.shape[1], dtype=torch.bool, device=device)
    used[A.column_indices.long()] = True
    x[:, ~used] = float("nan")
    return x


def random_nm(rows, cols, n, m, gen, vector=1, block=1, dtype=torch.float64, device="cpu"):
    w = randn(rows, cols, gen=gen)
    mask = sk.prune.nm_mask(w, n, m, vector=vector, block=block)
    return sk.NMMatrix.from_dense(w.to(dtype), n, m, vector, block, mask=mask).to(device=device)


def assert_close(got: torch.Tensor, want: torch.Tensor, bound: torch.Tensor, dtype: torch.dtype):
    """|got - want| <= tol * bound elementwise (plus a hair for exact zeros); NaN must match."""
    assert got.shape == want.shape, (got.shape, want.shape)
    got, want, bound = got.double().cpu(), want.double().cpu(), bound.double().cpu()
    assert torch.equal(torch.isnan(got), torch.isnan(want)), "NaN positions differ"
    finite = ~torch.isnan(want)
    err = (got - want).abs()[finite]
    allowed = (rel_tol(dtype) * bound + 1e-300)[finite]
    bad = err > allowed
    if bad.any():
        idx = bad.nonzero()[0].item()
        raise AssertionError(
            f"{int(bad.sum())} of {bad.numel()} elements off; first: got {got[finite][idx]}, "
            f"want {want[finite][idx]}, allowed {allowed[idx]:.3g}"
        )


def spmm_bound(A_dense: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """sum_k |a_ik| |b_kj| (with a floor of the largest |output| scale for tiny sums)."""
    bound = A_dense.double().abs() @ B.double().abs()
    if bound.numel() == 0:
        return bound
    return bound + 1e-6 * bound.max().clamp_min(1e-30)


# ----------------------------------------------------------------------- float64 dense oracles
def dense_spmm(A_dense, B, bias=None, activation=None) -> torch.Tensor:
    """act(A @ B + bias[:, None]) in float64 dense math."""
    out = A_dense.double() @ B.double()
    if bias is not None:
        out = out + bias.double()[:, None]
    return sk.reference.apply_activation(out, activation or "none")


def stored_mask(P: sk.CSRMatrix) -> torch.Tensor:
    """(rows, cols) bool: True at P's stored positions (zeros included)."""
    keep = torch.zeros(P.shape, dtype=torch.bool, device=P.device)
    keep[P.pattern.row_indices(), P.column_indices.long()] = True
    return keep


def dense_sddmm(X, Y, P):
    """(X @ Y^T) in float64 at P's stored positions, and the bound sum_k |x_ik| |y_jk| there."""
    rows, cols = P.pattern.row_indices(), P.column_indices.long()
    want = (X.double() @ Y.double().transpose(-1, -2))[..., rows, cols]
    bound = (X.double().abs() @ Y.double().abs().transpose(-1, -2))[..., rows, cols]
    return want, bound


def sddmm_want_and_bound(P: sk.CSRMatrix, x: torch.Tensor, y: torch.Tensor):
    """(x @ y^T) and |x| @ |y|^T in float64 at P's stored positions (x, y batched or not)."""
    rows, cols = P.pattern.row_indices().to(x.device), P.column_indices.long()
    xd, yd = x.double(), y.double()
    want = (xd @ yd.transpose(-1, -2))[..., rows, cols]
    bound = (xd.abs() @ yd.abs().transpose(-1, -2))[..., rows, cols]
    largest = bound.max() if bound.numel() else bound.new_tensor(0.0)
    return want, bound + 1e-6 * largest.clamp_min(1e-30)


def dense_softmax(S: sk.CSRMatrix, scale: float = 1.0) -> torch.Tensor:
    """Dense float64 softmax with non-stored entries at -inf, read back at the stored ones."""
    rows, cols = S.pattern.row_indices(), S.column_indices.long()
    dense = S.to_dense().double() * scale
    probs = dense.masked_fill(~stored_mask(S), float("-inf")).softmax(-1)
    return probs[..., rows, cols]


def dense_attention(q, k, v, keep, scale) -> torch.Tensor:
    """softmax(scale q k^T, -inf off `keep`) v in float64; a query with no keys gets zeros."""
    scores = (q.double() @ k.double().transpose(-1, -2)) * scale
    probs = scores.masked_fill(~keep, float("-inf")).softmax(-1)
    probs = torch.where(keep.any(-1, keepdim=True), probs, torch.zeros_like(probs))
    return probs @ v.double()


def assert_bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> None:
    """Same shape, dtype and bits (so -0.0 != 0.0 and NaN payloads count)."""
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    a_bits, b_bits = a.detach().contiguous().view(ints), b.detach().contiguous().view(ints)
    if not torch.equal(a_bits, b_bits):
        differ = (a_bits != b_bits).nonzero()
        raise AssertionError(f"{len(differ)} of {a.numel()} elements differ; first at {differ[0]}")


def tiny_bert(seed: int = 0, cls_name: str = "BertModel"):
    """A 2-layer, 32-wide BERT from `transformers` (skips the test where it is not installed)."""
    import pytest

    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    torch.manual_seed(seed)
    return getattr(transformers, cls_name)(config).eval()


def csr_with_neighbours(device):
    """A (5, 200) bf16 CSR whose rows 0-2 are short (row 1 starts at entry 3, so an in-place
    line layout's window for it starts among row 0's entries) and rows 3-4 long (rows 0-2's
    windows end before the last entry): rows 0-2 sum to 3, 20 and 12 against ones."""
    import sparsekernels as sk

    dense = torch.zeros(5, 200)
    dense[0, 10:13] = 1.0
    dense[1, 20:30] = 2.0
    dense[2, 40:44] = 3.0
    dense[3:, :150] = 0.5
    return sk.CSRMatrix.from_dense(dense.to(device=device, dtype=torch.bfloat16))


def tiny_hf_llama(vocab: int, hidden: int, layers: int, intermediate: int, positions: int):
    """A randomly initialised Hugging Face LlamaForCausalLM (4 heads, 2 key-value heads), in
    eval mode, with transformers' logging quieted."""
    import transformers

    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=intermediate, max_position_embeddings=positions,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


def count_calls(monkeypatch, module, name: str) -> list:
    """A list that grows by one at each call of module.name (wrapped for the test's length)."""
    calls, original = [], getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def twin_weight(W):
    """The same CSRMatrix or NMMatrix in new tensors (values detached): no plan or cache of W's
    applies to it, so its calls take the whole path."""
    import sparsekernels as sk

    if isinstance(W, sk.CSRMatrix):
        return sk.CSRMatrix(W.row_offsets.clone(), W.column_indices.clone(),
                            W.values.detach().clone(), W.shape, check=False)  # fmt: skip
    return sk.NMMatrix(W.values.detach().clone(), W.indices.clone(), W.shape, W.n, W.m,
                       W.vector, W.block)  # fmt: skip
