"""Which cuSPARSELt algorithm to run a 2:4 product with, searched once per problem size.

torch's `_cslt_sparse_mm` runs algorithm 0 unless told otherwise; cuSPARSELt's own search
(`torch._C._cusparselt.mm_search`, `torch._cslt_sparse_mm_search` before it) times every
algorithm and split-K setting on the actual operands. On the H200 its pick ran 1.2-2.5x faster
than algorithm 0 (4096 x 4096: 2048 tokens bf16 61.4 against 76.9 us, fp16 66.5 against 90.0;
128 tokens fp16 11.4 against 28.4; written transposed, bf16, 64.0 against 135;
results/nvidia-h200/2026-12-05/at-4f5c74f/cusparselt_search_safety.txt).

On the H200 the search itself faulted for fp16 products written transposed (an internal error,
then an illegal instruction in the process's CUDA context: every later kernel fails), so those
are never searched, and the cusparselt backend writes fp16 products row-major
(`_cusparselt.writes_transposed`; results/nvidia-h200/2026-12-05/at-4f5c74f/
cusparselt_search_safety.txt: bf16 either way and fp16 row-major searched safely in every case).

The choice depends on the product's shape, dtypes and B's layout, not on the values, so it is
cached per such key, with the token count rounded up to a multiple of TOKEN_BUCKET: prefill
batches of nearby lengths share one search. A search times kernels (and synchronizes), so it
never runs while a CUDA graph is being captured (algorithm 0 runs then, row-major, and the
next eager call searches), nor under torch.compile's tracing. A cached setting that cuSPARSELt
rejects for a call of another length in its bucket falls back to the defaults for that key.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import NamedTuple

import torch

from ..kernels import tuning
from ..kernels.transpose import row_major_copy

Tensor = torch.Tensor

TOKEN_BUCKET = 256  # token counts sharing one search (the route starts at 512 tokens)
MAX_KEYS = 256  # cached settings kept, least recently used dropped past this


class Setting(NamedTuple):
    """Arguments of torch._cslt_sparse_mm beyond the operands."""

    alg_id: int = 0
    split_k: int = 1
    split_k_mode: int = -1


DEFAULT = Setting()
_settings: OrderedDict[tuple, Setting] = OrderedDict()
_lock = threading.Lock()


def _key(packed: Tensor, b: Tensor, bias: Tensor | None, transposed: bool) -> tuple:
    tokens = -(-b.shape[1] // TOKEN_BUCKET) * TOKEN_BUCKET
    column_major = not b.is_contiguous()
    return (
        packed.device.index,
        packed.dtype,
        packed.numel(),
        b.shape[0],
        tokens,
        column_major,
        bias is not None,
        transposed,
    )


def _can_search(device: torch.device) -> bool:
    if torch.compiler.is_compiling():
        return False
    return device.type != "cuda" or not torch.cuda.is_current_stream_capturing()


def _search(packed: Tensor, b: Tensor, bias: Tensor | None, transposed: bool) -> Setting:
    """cuSPARSELt's own search on these operands: (alg_id, split_k, split_k_mode)."""
    binding = getattr(getattr(torch._C, "_cusparselt", None), "mm_search", None)
    if binding is not None:
        found = binding(packed, b, bias, None, None, transposed)
        if not isinstance(found, tuple):
            return Setting(int(found))
        alg_id, split_k, mode = found[:3]
        if isinstance(mode, bool):  # torch's earlier "one kernel" flag: keep its algorithm only
            return Setting(int(alg_id))
        return Setting(int(alg_id), int(split_k), int(mode))
    return Setting(
        int(torch._cslt_sparse_mm_search(packed, b, bias=bias, transpose_result=transposed))
    )


def setting_for(packed: Tensor, b: Tensor, bias: Tensor | None, transposed: bool) -> Setting | None:
    """The cached setting for this problem, searched now when there is none and a search may
    run here; None otherwise."""
    if not tuning.CUSPARSELT_SEARCH or (transposed and b.dtype == torch.float16):
        return None  # (fp16 written transposed: the search faults, see _cusparselt.py)
    key = _key(packed, b, bias, transposed)
    with _lock:
        found = _settings.get(key)
        if found is not None:
            _settings.move_to_end(key)
            return found
    if not _can_search(b.device):
        return None
    found = _search(packed, b, bias, transposed)
    remember(key, found)
    return found


def remember(key: tuple, setting: Setting) -> None:
    with _lock:
        _settings[key] = setting
        _settings.move_to_end(key)
        while len(_settings) > MAX_KEYS:
            _settings.popitem(last=False)


def sparse_mm(packed: Tensor, b: Tensor, bias: Tensor | None, transposed: bool = False) -> Tensor:
    """torch._cslt_sparse_mm(packed, b, bias, transpose_result=transposed) with the searched
    setting. Without one a transposed product is made row-major and copied: algorithm 0
    written transposed took 135 us where row-major took 77 (4096 x 4096, 2048 tokens, bf16).
    The copy is kernels/transpose.py's tiled one (tuning.CUSPARSELT_TILED_TRANSPOSE): 6.7 us
    for that product's 16 MB on an H100, where torch's strided `.t().contiguous()` took 65."""
    setting = setting_for(packed, b, bias, transposed)
    if setting is None and transposed:
        out = sparse_mm(packed, b, bias)
        if tuning.CUSPARSELT_TILED_TRANSPOSE:  # (kernels/transpose.py's copy: tuning.py)
            return row_major_copy(src=out.t())
        return out.t().contiguous()
    if setting is None or setting == DEFAULT:
        return torch._cslt_sparse_mm(packed, b, bias=bias, transpose_result=transposed)
    try:
        return torch._cslt_sparse_mm(
            packed, b, bias=bias, transpose_result=transposed, **setting._asdict()
        )
    except RuntimeError:  # another length in the bucket: this setting does not apply to it
        remember(_key(packed, b, bias, transposed), DEFAULT)
        return torch._cslt_sparse_mm(packed, b, bias=bias, transpose_result=transposed)


def clear() -> None:
    """Forget every searched setting (tests; or after changing devices' clocks)."""
    with _lock:
        _settings.clear()
