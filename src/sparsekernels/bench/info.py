"""`sparsekernels info`: the device, the versions, and which backends run where (and why not)."""

from __future__ import annotations

import torch

from ..ops import _dispatch
from .metadata import run_metadata

# A small problem per dispatch op: the facts its backends look at (the common ones on every op).
_COMMON = {"n": 16, "k": 64, "batch": 1, "transpose": False}
_FACTS = {
    "spmm_csr": {},
    "spmm_nm": {"pattern": (2, 4, 1, 1)},
    "sddmm_csr": {},
    "sddmm_nm": {"pattern": (2, 4, 1, 1)},
    "sparse_softmax": {},
    "sparse_softmax_backward": {},
}


def _ops() -> list[str]:
    registered = list(getattr(_dispatch, "_REGISTRY", {}))
    return registered or list(_FACTS)


def backends_on(device: torch.device, dtype: torch.dtype) -> dict[str, dict[str, str]]:
    """op -> backend -> 'available' or why not, for a small problem on `device`."""
    table = {}
    for op in _ops():
        problem = _dispatch.Problem(device, dtype, {**_COMMON, **_FACTS.get(op, {})})
        try:
            reasons = _dispatch.explain(op, problem)
        except Exception as error:  # an op whose backends need facts we do not know
            table[op] = {"?": f"could not ask: {type(error).__name__}: {error}"}
            continue
        table[op] = {name: "; ".join(why) if why else "available" for name, why in reasons.items()}
    return table


def _peers(cuda: bool) -> dict[str, str]:
    peers = {"dense": "available", "torch_csr (torch sparse CSR @ dense)": "available"}
    if not cuda:
        peers["cuSPARSE, cuSPARSELt, torch Triton BSR"] = "need CUDA"
        return peers
    lt = torch.backends.cusparselt
    peers["cuSPARSELt (2:4 semi-structured)"] = (
        f"available (version {lt.version()})"
        if lt.is_available()
        else "unavailable: torch uses CUTLASS"
    )
    try:
        from torch.sparse._triton_ops import bsr_dense_mm

        peers["torch Triton BSR"] = "available" if bsr_dense_mm is not None else "no Triton"
    except ImportError as error:
        peers["torch Triton BSR"] = f"unavailable: {error}"
    return peers


def info() -> dict:
    """Device, versions, and per device which backends of every op are available (or why not)."""
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    meta = run_metadata(device, [])
    for key in ("argv", "command", "date"):
        meta.pop(key, None)
    meta["triton_interpreter"] = _dispatch.triton_interpreter_enabled()
    meta["backends"] = {"cpu": backends_on(torch.device("cpu"), torch.float32)}
    if cuda:
        meta["backends"]["cuda"] = backends_on(torch.device("cuda"), torch.bfloat16)
    meta["peers"] = _peers(cuda)
    return meta
