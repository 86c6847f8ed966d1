"""Fused block-sparse attention with several components (strided patterns): the (batch, head)
chunks of the fp32 scratch and the last pass storing in the output's dtype, in the interpreter
against one chunk and float64; GPU checks of memory and bits at L = 16384."""

import pytest
import torch

import sparsekernels as sk
from _attention_cases import (
    assert_attention_close,
    local_strided_gpu,
    mask_of,
    own_attention,
    pattern_of,
)
from _helpers import dense_attention, randn
from sparsekernels.kernels import attention_block as kernel
from sparsekernels.kernels.attention_tuning import (
    BLOCK_ATTENTION_SPLIT_FILL,
    block_attention_config,
)
from sparsekernels.ops import _attention_library


def test_pair_chunks_cover_each_pair_once():
    for batch, heads, pairs in [(1, 1, 1), (2, 3, 1), (2, 3, 2), (3, 3, 6), (3, 2, 5), (2, 3, 9)]:
        rows = []
        for b0, b1, h0, h1 in _attention_library._pair_chunks(batch, heads, pairs):
            assert (b1 - b0) * (h1 - h0) <= pairs
            assert b1 - b0 == 1 or (h0, h1) == (0, heads)  # lse rows stay contiguous
            rows += [b * heads + h for b in range(b0, b1) for h in range(h0, h1)]
        assert rows == list(range(batch * heads))


MERGED_CHUNKS = [  # (batch, heads, pairs a chunk, q a (B, L, H, D) view, chunks)
    (1, 3, 1, False, 3),  # one head a chunk
    (2, 3, 2, False, 4),  # two heads, then the entry's last one
    (3, 2, 5, False, 2),  # whole entries: two, then one
    (2, 3, 2, True, 4),  # the output laid out (B, L, H, D) as q
]


@pytest.mark.parametrize("batch,heads,pairs,transposed,chunks", MERGED_CHUNKS)
def test_merged_forward_in_chunks_gives_the_same_bits(
    batch, heads, pairs, transposed, chunks, gen, monkeypatch
):
    """A two-component pattern with its fp32 scratch bounded to a few (batch, head) pairs:
    the bits of one chunk, output and lse; outputs and scratch poisoned (NaN) first."""
    from sparsekernels.kernels import attention_tuning

    L, d, scale = 80, 16, 0.3
    keep = mask_of("summary", L, L)
    config = block_attention_config(d, on_cpu=True)
    layout = pattern_of(keep).pattern.block_layout(config.block_m, config.block_n, 1 / 8)
    assert len(layout.components) == 2
    shape = (batch, L, heads, d) if transposed else (batch, heads, L, d)
    q, k, v = (randn(*shape, gen=gen, dtype=torch.float16) for _ in "qkv")
    if transposed:
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    output_like = _attention_library._output_like

    def poisoned(*args):
        return output_like(*args).fill_(float("nan"))

    monkeypatch.setattr(_attention_library, "_output_like", poisoned)
    args = (q, k, v, layout.tensors(), scale, config.as_list())
    whole_out, whole_lse = _attention_library.block_attention_forward(*args)
    merge = _attention_library._merge_components
    calls = []
    monkeypatch.setattr(
        _attention_library, "_merge_components", lambda *a: calls.append(a) or merge(*a)
    )
    monkeypatch.setattr(attention_tuning, "BLOCK_ATTENTION_SCRATCH_MIN_BYTES", pairs * L * d * 4)
    monkeypatch.setattr(attention_tuning, "BLOCK_ATTENTION_SCRATCH_FRACTION", 0)
    out, lse = _attention_library.block_attention_forward(*args)
    assert len(calls) == chunks
    assert torch.equal(out, whole_out) and torch.equal(lse, whole_lse)
    assert out.stride() == whole_out.stride() and out.transpose(1, 2).is_contiguous() == transposed
    assert_attention_close(
        out, dense_attention(q, k, v, keep, scale), own_attention(q, k, v, keep, scale)
    )
    scores = (q.double() @ k.double().transpose(-1, -2)) * scale
    want = scores.masked_fill(~keep, float("-inf")).logsumexp(-1).reshape(batch * heads, L)
    torch.testing.assert_close(kernel.log2_lse_to_natural(lse.double()), want, rtol=1e-5, atol=0)


def _merged_through_fp32(q, k, v, layout, scale, config):
    """The former merged forward: every pass through the launcher without `final` into one fp32
    output, left for the caller to convert; also its lse and the fp32 output before the last
    pass."""
    batch, heads, lq, _ = q.shape
    full = torch.full((batch, heads, lq, v.shape[3]), float("nan"), device=q.device)
    lse = torch.full((batch * heads, lq), float("nan"), device=q.device)
    block_m, block_n, num_warps, num_stages = config[:4]
    before_last = None
    for i, component in enumerate(_attention_library._components(layout)):
        before_last = full.clone()
        kernel.block_attention_forward(
            q=q, k=k, v=v, out=full, lse=lse, component=component, merge=i > 0, scale=scale,
            block_m=block_m, block_n=block_n, num_warps=num_warps, num_stages=num_stages,
        )  # fmt: skip
    return full, lse, before_last


def _stored_as(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x.to(dtype) as the kernel's store converts it: rounded to nearest even, except that
    Triton's CPU interpreter (3.9) truncates fp32 to bf16 (the GPU's cvt.rn rounds)."""
    if x.device.type == "cpu" and dtype == torch.bfloat16:
        return (x.view(torch.int32) & ~0xFFFF).view(torch.float32).to(dtype)  # exact
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_merged_forward_stores_its_last_pass_in_the_output_dtype(dtype, gen, monkeypatch):
    """The last component's pass reads the fp32 scratch and stores the output in q's dtype (a
    (B, L, H, D) view): the bits of every pass into fp32 then converted, the same lse, and the
    scratch as the earlier pass left it (only read by the last); outputs poisoned (NaN) first."""
    L, d, scale = 80, 16, 0.3
    keep = mask_of("summary", L, L)
    config = block_attention_config(d, on_cpu=True)
    layout = pattern_of(keep).pattern.block_layout(config.block_m, config.block_n, 1 / 8)
    assert len(layout.components) == 2
    q, k, v = (randn(1, L, 2, d, gen=gen, dtype=dtype).transpose(1, 2) for _ in "qkv")
    args = (q, k, v, layout.tensors(), scale, config.as_list())
    full, want_lse, before_last = _merged_through_fp32(*args)
    output_like = _attention_library._output_like
    made = []

    def poisoned(*args):
        made.append(output_like(*args).fill_(float("nan")))
        return made[-1]

    monkeypatch.setattr(_attention_library, "_output_like", poisoned)
    out, lse = _attention_library.block_attention_forward(*args)
    assert out.dtype == dtype and out.transpose(1, 2).is_contiguous()
    assert torch.equal(out, _stored_as(full, dtype)) and torch.equal(lse, want_lse)
    scratch = made[1]  # made after the output
    assert scratch.dtype == torch.float32 and torch.equal(scratch, before_last)


# ============================================================================ dispatch


@pytest.mark.gpu
def test_gpu_merged_forward_scratch_is_bounded(gen):
    """strided:128:128 at L = 16384, 16 heads, fp16 merges two components in fp32: in chunks,
    the call adds under twice its output's bytes (in one, 97 MiB for a 32 MiB output)."""
    attn, q, k, v, _ = local_strided_gpu(16384, 16, torch.float16, gen)
    config = block_attention_config(64, on_cpu=False)
    tiles = (config.block_m, config.block_n, BLOCK_ATTENTION_SPLIT_FILL)
    assert len(attn.pattern.pattern.block_layout(*tiles).components) > 1
    with torch.no_grad():
        sk.sparse_attention(q, k, v, attn.pattern, backend="triton_flash")  # plans, compiles
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out = sk.sparse_attention(q, k, v, attn.pattern, backend="triton_flash")
        torch.cuda.synchronize()
    added = torch.cuda.max_memory_allocated() - before
    assert added < 2 * out.numel() * out.element_size(), f"{added / 2**20:.1f} MiB added"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_merged_forward_stores_the_bits_of_the_fp32_path(dtype, gen):
    """strided:128:128 at L = 16384, 16 heads: the last pass's own fp16/bf16 store gives the bits
    of the fp32 output converted by torch (both round to nearest even), and the same lse."""
    attn, q, k, v, _ = local_strided_gpu(16384, 16, dtype, gen)
    config = block_attention_config(64, on_cpu=False)
    tiles = (config.block_m, config.block_n, BLOCK_ATTENTION_SPLIT_FILL)
    layout = attn.pattern.pattern.block_layout(*tiles)
    assert len(layout.components) > 1
    args = (q, k, v, layout.tensors(), 1 / 8, config.as_list())
    full, want_lse, _ = _merged_through_fp32(*args)
    out, lse = _attention_library.block_attention_forward(*args)
    assert torch.equal(out, full.to(dtype)) and torch.equal(lse, want_lse)
