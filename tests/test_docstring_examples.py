"""Every `>>>` example in the package's docstrings runs and prints what it shows (doctest,
with `torch`, `nn` and `sk` imported as the examples assume)."""

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest
import torch
from torch import nn

import sparsekernels as sk


def _modules_with_examples() -> list[str]:
    found = []
    for info in pkgutil.walk_packages(sk.__path__, prefix="sparsekernels."):
        if info.name.endswith("__main__"):
            continue
        source = importlib.util.find_spec(info.name).origin
        if source and source.endswith(".py") and ">>>" in Path(source).read_text():
            found.append(info.name)
    return found


MODULES = _modules_with_examples()


def test_the_examples_are_found():
    assert len(MODULES) >= 15  # (the ops, formats, layers, pruning and models)


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name):
    module = importlib.import_module(name)
    torch.manual_seed(0)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    globs = {**vars(module), "torch": torch, "nn": nn, "sk": sk}
    tests = finder.find(module, globs=globs)
    assert tests, f"{name} has '>>>' but no example doctest finds"
    for test in tests:
        torch.manual_seed(0)
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed"
