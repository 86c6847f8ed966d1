"""The prototype kernels of benchmarks/sweeps (forms measured before they become part of the
library) check their products against float64 in the interpreter: a prototype that computes
the wrong thing would make its sweep's timings meaningless."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROTOTYPES = [
    "nm_decode_select.py",
    "csr_decode_chunks.py",
    "csr_decode_delta.py",
    "softmax_aligned.py",
    "softmax_rows.py",
    "bitmap_sweep.py",
]


@pytest.mark.parametrize("script", PROTOTYPES)
def test_prototype_matches_float64(script):
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "sweeps" / script), "--check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "error" in run.stdout  # each form printed its measured error
