"""torch's once-a-process warnings that our calls would raise, silenced without racing threads.

warnings.catch_warnings swaps the process's filter list on entry and puts back what it saw on
exit, so two threads inside it at once can leave "ignore everything" installed for good (Python
before 3.14): serving a CSR layer from three threads did so in 20 trials of 20. Our blocks take
one lock, and the CSR path spends torch's warnings once instead of silencing every call.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import torch

_LOCK = threading.Lock()
_csr_warnings_spent = False


@contextmanager
def ignoring(message: str = "") -> Iterator[None]:
    """Warnings whose text starts with `message` (every one if empty) ignored in the block;
    one thread at a time, so that each block puts back the filters it found."""
    with _LOCK, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=message)
        yield


def spend_csr_warnings() -> None:
    """torch warns once a process that sparse CSR is beta and that its invariant checks are
    off: raise both here, ignored, before our first torch CSR tensor (they say nothing about
    the user's code). Later calls cost one global read."""
    global _csr_warnings_spent
    if _csr_warnings_spent:
        return
    with ignoring():
        if not _csr_warnings_spent:
            one = torch.ones(1)
            torch.sparse_csr_tensor(torch.tensor([0, 1]), torch.tensor([0]), one, (1, 1))
            _csr_warnings_spent = True
