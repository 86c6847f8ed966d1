"""What a results file records beside its rows, so that a figure can be trusted later: where,
when, with what code and versions, and with which precision switches it ran."""

from __future__ import annotations

import os
import platform
import shlex
import socket
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from importlib import metadata

import torch


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _package_version() -> str:
    from .. import __version__

    return __version__


def command_line() -> str:
    """The command that started this process, as a user would type it."""
    argv = list(sys.argv)
    if argv and argv[0].endswith(("sparsekernels/bench/__main__.py", "sparsekernels/__main__.py")):
        module = "sparsekernels.bench" if "bench" in argv[0] else "sparsekernels"
        argv = ["python", "-m", module, *argv[1:]]
    return shlex.join(argv)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu {platform.processor() or platform.machine()}".strip()


def _output(*command: str) -> str | None:
    """A command's standard output, run in this package's folder (a checkout's, when it is
    one); None where it cannot run or fails."""
    import subprocess
    from pathlib import Path

    here = Path(__file__).resolve().parent
    try:
        done = subprocess.run(
            command, cwd=here, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout


def _git_commit() -> str | None:
    """The checkout's commit (with '+dirty' for local changes), when run from one."""
    commit = (_output("git", "rev-parse", "--short", "HEAD") or "").strip()
    dirty = (_output("git", "status", "--porcelain", "--untracked-files=no") or "").strip()
    return commit + ("+dirty" if dirty else "") if commit else None


def _git_diff_sha256() -> str | None:
    """A hash of the checkout's local changes (what '+dirty' leaves out: the code that ran),
    None when clean or not a checkout."""
    import hashlib

    diff = _output("git", "diff", "HEAD")
    return hashlib.sha256(diff.encode()).hexdigest()[:16] if diff else None


def _driver_version() -> str | None:
    out = _output("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader") or ""
    return out.split()[0] if out.split() else None


def precision_settings() -> dict:
    """torch's switches that change what a dense peer computes (TF32, reduced-precision
    reductions): a figure against cuBLAS means little without them."""
    matmul = torch.backends.cuda.matmul
    return {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "fp16_reduced_precision_reduction": matmul.allow_fp16_reduced_precision_reduction,
        "bf16_reduced_precision_reduction": matmul.allow_bf16_reduced_precision_reduction,
    }


def run_metadata(device: torch.device, argv: Sequence[str] | None = None) -> dict:
    """What a result needs to be trusted later: where, when, with what, and how it was run."""
    meta = {
        "device": device_name(device),
        "device_type": device.type,
        "torch": torch.__version__,
        "triton": _version("triton"),
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "sparsekernels": _version("sparsekernels") or _package_version(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
        "argv": list(argv) if argv is not None else sys.argv[1:],
        "hostname": socket.gethostname(),
        "commit": _git_commit(),
        "diff_sha256": _git_diff_sha256(),
        "precision": precision_settings(),
    }
    if device.type != "cuda":
        meta["cpu_threads"] = torch.get_num_threads()
        meta["load_average"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    else:
        meta["driver"] = _driver_version()
        props = torch.cuda.get_device_properties(device)
        meta.update(
            capability=".".join(map(str, torch.cuda.get_device_capability(device))),
            sm_count=props.multi_processor_count,
            memory_gb=round(props.total_memory / 2**30, 1),
            l2_mb=round(getattr(props, "L2_cache_size", 0) / 2**20, 1),
        )
    return meta
