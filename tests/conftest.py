import os

import pytest
import torch

# Without a GPU, Triton kernels run in its interpreter (set before any kernel module imports).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run with -m gpu on the H200)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def gen():
    """A fresh, seeded generator per test: random data, reproducible failures."""
    return torch.Generator().manual_seed(1234)


@pytest.fixture
def whole_path_calls(monkeypatch):
    """How many calls took linear's whole path (its spmm) since the fixture was made: a
    repeat call an eager plan takes does not (ops/_eager_plans.py)."""
    import importlib

    from _helpers import count_calls

    linear_module = importlib.import_module("sparsekernels.ops.linear")  # (not the function)
    return count_calls(monkeypatch, linear_module, "spmm")


@pytest.fixture
def replays_on(monkeypatch):
    """The layers' own replays on (nn/_repeat_calls.py: on by default;
    SPARSEKERNELS_LAYER_REPLAYS=0 would turn them off)."""
    from sparsekernels.nn import _repeat_calls

    monkeypatch.setattr(_repeat_calls, "ENABLED", True)
