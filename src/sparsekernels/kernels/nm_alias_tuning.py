"""Where linear reads a 1:m weight as 2:2m (ops/_nm_alias.py) for its whole route, past the
sparse tensor cores' tokens (which alias it already: nm_mma_sp_tuning.MMA_SP_ALIASES); and
where it runs an n:m weight through a copy stored as n:(m/2) (ops/_nm_stored_as.py)."""

from __future__ import annotations

import torch

# 1:4 and 1:2 (v <= 8) at 17-64 tokens densified a call (no kernel of ours takes 1:m there);
# read as 2:8 and 2:4 (ops/_nm_alias.py: the same values and bytes) they take those patterns'
# routes (the wgmma, unpack or expand kernels). Through linear, H200, cold L2, us, the route ->
# the alias (benchmarks/sweeps/nm_route_cliffs.py FORMS=route,alias, results/nvidia-h200/
# 2026-12-06/at-6286a4d/nm_route_nmalias.txt; v = 4 and 8 as v = 1 within 5%):
#                    4096^2                 14336 x 4096             4096 x 14336
#   tokens        17-32        64          17-32        64          17-32        64
#   bf16 1:4   24.1->12.3  22.4->16.0   79.4->29.6  81.0->46.3   81.1->29.1  84.0->39.9
#   bf16 1:2   28.1->15.4  26.3->18.3   88.4->35.2  90.1->40.3   90.2->33.7  93.4->49.0
#   fp16 1:4   24.3->12.5  22.5->26.4   79.4->29.5  80.0->64.9   81.3->28.9  84.5->64.0
#   dense         13-14       12            31         32-33         33          36
# (48 tokens as 64.) fp16 at 48-64 on 4096^2 the one loss (2:8 has no unpack window in fp16);
# 1:2 in fp16, v >= 16, fp32 and other token counts untimed: they keep their route.
NM_ALIAS_ROUTE_TOKENS = (17, 64)
NM_ALIAS_ROUTE_DTYPES = {(1, 4): (torch.bfloat16, torch.float16), (1, 2): (torch.bfloat16,)}
NM_ALIAS_ROUTE_MAX_VECTOR = 8


def nm_routes_as_alias(n_cols: int, n: int, m: int, vector: int, dtype: torch.dtype) -> bool:
    """Whether linear routes a 1:m weight (no blocks, K a multiple of 2m) as 2:2m at `n_cols`
    tokens (the table above)."""
    fewest, most = NM_ALIAS_ROUTE_TOKENS
    timed = dtype in NM_ALIAS_ROUTE_DTYPES.get((n, m), ())
    return timed and vector <= NM_ALIAS_ROUTE_MAX_VECTOR and fewest <= n_cols <= most


# 2:16 keeps at most 2 of any 8, so it is a 2:8 weight whose slots with no entry hold zeros
# (ops/_nm_stored_as.py: twice 2:16's value bytes, 1/4 of dense). At 17-32 tokens 2:16 took
# the expand kernel (m dots a step) at 0.57-0.82x dense; stored as 2:8 it takes 2:8's route.
# Through linear, H100, cold L2, bf16, us, the route -> as 2:8 (benchmarks/sweeps/
# nm_route_cliffs.py FORMS=route,as2:8, results/nvidia-h100/2026-12-06/at-f7803e6/
# nm_route_storedas.txt):
#                     4096^2                 14336 x 4096
#   tokens          24          33          24          33
#   2:16 v=8   20.5 -> 12.0  24.8 -> 16.8  53.6 -> 26.4  74.1 -> 44.2
#   2:16 v=1   19.5 -> 12.5  25.0 -> 16.7  54.7 -> 28.1  74.4 -> 44.1
#   dense         14.4        14.6         43.7        44.2
# At 33-48 tokens (H100, at-e857cf5/nm_route_nmstoredas.txt, the route -> as 2:8): v = 8
# 24.7 -> 17.0 and 26.3 -> 15.4 on 4096^2, 74.0 -> 44.7 / 73.9 -> 46.0 on 14336 x 4096, 60.9 ->
# 38.7 / 62.5 -> 37.8 on 4096 x 14336; v = 1 alike: to 48 (0.6-1.0x dense). v = 8 takes the
# pairs kernel's blocked step first, faster on every shape (nm_pairs_tuning: 4096^2 at 24
# tokens 12.2 -> 8.7, at 40 17.4 -> 11.2), so only v = 1 comes here. 4:32 as 4:16 (27.7 /
# 104.6 at 24) stayed below dense: not taken (the pairs kernel takes it). 1:16 as 1:8 won too
# (v = 8), but the pairs kernel more. fp16 and other vectors untimed: they keep their route.
NM_STORED_AS = {(2, 16): (2, 8)}
NM_STORED_AS_TOKENS = (17, 48)
NM_STORED_AS_DTYPES = (torch.bfloat16,)
NM_STORED_AS_VECTORS = (1,)


def nm_stored_as(
    n_cols: int, n: int, m: int, vector: int, block: int, dtype: torch.dtype
) -> tuple[int, int] | None:
    """The pattern linear runs an n:m weight (no blocks) through a copy of at `n_cols` tokens
    (the table above), else None."""
    fewest, most = NM_STORED_AS_TOKENS
    if block != 1 or vector not in NM_STORED_AS_VECTORS or dtype not in NM_STORED_AS_DTYPES:
        return None
    return NM_STORED_AS.get((n, m)) if fewest <= n_cols <= most else None
