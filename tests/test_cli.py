"""The command line: `sparsekernels info` and the short tour (`demo --tour`) on the CPU."""

import json

import pytest

from sparsekernels import cli


def test_info_lists_backends_and_reasons(capsys):
    assert cli.main(["info"]) == 0
    info = json.loads(capsys.readouterr().out)
    spmm = info["backends"]["cpu"]["spmm_csr"]
    assert spmm["reference"] == "available" and spmm["triton"] != "available"  # with its reason


def test_tour_runs_and_checks_itself(capsys):
    assert cli.main(["demo", "--tour"]) == 0
    out = capsys.readouterr().out
    assert "round trip identical: True" in out
    # every relative error the tour prints is at float32 rounding level
    errors = [float(w) for w in out.replace(";", " ").split() if "e-" in w and w[0].isdigit()]
    assert errors and max(errors) < 1e-5


@pytest.mark.parametrize(
    "argv, message",
    [
        (["demo", "--device", "nonsense"], "invalid choice: 'nonsense'"),
        (["demo", "--distill", "-1"], "sparsekernels demo: error: --distill must be 0 or more"),
        (["demo", "--tour", "--distill", "2"], "--distill applies to the demo, not to --tour"),
    ],
)
def test_demo_refuses_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_demo_on_cuda_without_one(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["demo", "--device", "cuda"])
    assert exit_.value.code == 2 and "no CUDA device is visible" in capsys.readouterr().err
