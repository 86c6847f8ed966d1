"""Switches from the environment (_env.flag): every usual spelling of on and off, the default
where unset or empty, and a ValueError naming the variable for anything else; the package's
switches read through it."""

import subprocess
import sys

import pytest

from sparsekernels._env import flag

NAME = "SPARSEKERNELS_TEST_SWITCH"


@pytest.mark.parametrize("raw", ["1", "true", "TRUE", " on ", "Yes"])
def test_on(raw, monkeypatch):
    monkeypatch.setenv(NAME, raw)
    assert flag(NAME, False) is True


@pytest.mark.parametrize("raw", ["0", "false", "False", "OFF", " no"])
def test_off(raw, monkeypatch):
    monkeypatch.setenv(NAME, raw)
    assert flag(NAME, True) is False


@pytest.mark.parametrize("default", [False, True])
def test_unset_or_empty_takes_the_default(default, monkeypatch):
    monkeypatch.delenv(NAME, raising=False)
    assert flag(NAME, default) is default
    monkeypatch.setenv(NAME, " ")
    assert flag(NAME, default) is default


@pytest.mark.parametrize("raw", ["2", "enabled", "0.0", "tru"])
def test_anything_else_names_the_variable(raw, monkeypatch):
    monkeypatch.setenv(NAME, raw)
    with pytest.raises(ValueError, match=f"{NAME} must be .* got '{raw}'"):
        flag(NAME, True)


def test_the_package_reads_its_switches_so():
    """SPARSEKERNELS_TRAINING_LAUNCH_PLANS=false turns the training plans off (it read as on
    when only "0" meant off); a misspelt value stops the import with the variable's name."""
    code = "from sparsekernels.ops import _launch_plans as p; print(p.TRAINING, p.ENABLED)"
    env = {"SPARSEKERNELS_TRAINING_LAUNCH_PLANS": "false", "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**_base_env(), **env}, check=True)  # fmt: skip
    assert run.stdout.split() == ["False", "True"]
    env["SPARSEKERNELS_TRAINING_LAUNCH_PLANS"] = "nope"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**_base_env(), **env})  # fmt: skip
    assert run.returncode != 0 and "SPARSEKERNELS_TRAINING_LAUNCH_PLANS must be" in run.stderr


def _base_env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("SPARSEKERNELS_")}
