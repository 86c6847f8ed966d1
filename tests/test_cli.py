"""The command line: `sparsekernels info` and the short tour (`demo --tour`) on the CPU."""

import json

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
