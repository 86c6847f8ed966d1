"""The float64 references' attention in query blocks (models/_chunked_sdpa.py) equals torch's
in one call: causal, with a boolean mask, and with a scale, for blocks that do not divide L."""

import pytest
import torch
import torch.nn.functional as F

from _helpers import randn
from sparsekernels.models import _chunked_sdpa


@pytest.mark.parametrize("case", ["causal", "mask", "none"])
def test_blocks_match_one_call(case, gen, monkeypatch):
    q, k, v = (randn(2, 3, 37, 8, gen=gen) for _ in range(3))
    mask = torch.rand(37, 37, generator=gen) < 0.4
    mask[:, 0] = True  # every query sees a key: no all-masked row
    kwargs = {"causal": dict(is_causal=True), "mask": dict(attn_mask=mask), "none": {}}[case]
    want = F.scaled_dot_product_attention(q, k, v, scale=0.3, **kwargs)
    row_bytes = 2 * 3 * 37 * 8
    monkeypatch.setattr(_chunked_sdpa, "SCORE_BYTES", 5 * row_bytes)  # blocks of 5 queries
    got = _chunked_sdpa.sdpa(
        q, k, v, mask=mask if case == "mask" else None, causal=case == "causal", scale=0.3
    )
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert torch.equal(_chunked_sdpa.sdpa(q.float(), k.float(), v.float(), causal=True),
                       F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                      is_causal=True))  # fmt: skip
