"""The attention patterns the fused-attention sweeps time: the Sparse Transformer's (local 128 +
strided 128, L = 8192, 8 heads), causal (L = 4096, 16 heads) and local:256 (L = 16384, 16
heads), as (name, L, heads, CSRMatrix) on CUDA."""

import torch

import sparsekernels as sk
from sparsekernels.bench.cases import attention_mask


def patterns():
    yield (
        "local_strided 128/128",
        8192,
        8,
        sk.nn.SparseAttention.local_strided(8192, 128, 128, device="cuda").pattern,
    )
    g = torch.Generator(device="cuda").manual_seed(0)
    for kind, L, heads in (("causal", 4096, 16), ("local:256", 16384, 16)):
        mask = attention_mask(kind, L, torch.device("cuda"), g)
        yield kind, L, heads, sk.CSRMatrix.from_dense(mask.to(torch.bfloat16), mask)
