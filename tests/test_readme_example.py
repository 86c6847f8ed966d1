"""The README's usage example runs as written (on the CPU; its one file read, an .smtx, is
written first), so the front page cannot drift from the API."""

import re
from pathlib import Path

import sparsekernels as sk

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_example_runs(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M)
    assert blocks, "the README has no python example"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "matrix.smtx").write_text("2, 3, 3\n0 2 3\n0 2 1\n")
    scope: dict = {}
    exec(compile(blocks[0], str(README), "exec"), scope)
    for name in ("y", "z", "P", "o", "A", "layer", "conv", "summary"):
        assert name in scope, name
    assert scope["y"].shape == (16, 4096) and scope["o"].shape == (1, 8, 1024, 64)
    assert scope["A"].shape == (2, 3) and (tmp_path / "m.safetensors").exists()
    assert "swapped" in capsys.readouterr().out
    pruned = [m for m in scope["mlp"].modules() if isinstance(m, sk.nn.SparseLinear)]
    assert len(pruned) == 2
    assert all(
        isinstance(m.weight, sk.NMMatrix) and (m.weight.n, m.weight.m) == (2, 4) for m in pruned
    )
