"""Several threads on one model (a server's pool): releasing caches at once, the warnings
filters the process is left with, and derived arrays whose sources change during a build.
Thread switches are forced where a race needs them, so each test fails every time without its
fix rather than now and then."""

import subprocess
import sys
import threading
import time
import warnings

import torch
from torch import nn

import sparsekernels as sk
from _helpers import randn
from sparsekernels import _cache_mode
from sparsekernels.ops import _eager_plans


class _SlowGet(dict):
    """A dict whose lookups yield to other threads (between a cache's check and its delete)."""

    def get(self, *args):
        found = super().get(*args)
        time.sleep(0.02)
        return found


def _run_threads(target, count: int) -> list[BaseException]:
    errors: list[BaseException] = []

    def run():
        try:
            target()
        except BaseException as error:  # noqa: BLE001 (reported by the test)
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_two_threads_release_caches_at_once(monkeypatch, gen):
    layer = sk.nn.SparseLinear.from_dense(nn.Linear(64, 48), sparsity=0.5)
    with torch.no_grad():
        layer(randn(5, 64, gen=gen, dtype=torch.float32))  # (an eager plan kept for its values)
    plans = _eager_plans._PLANS
    assert len(plans)
    monkeypatch.setattr(plans, "_entries", _SlowGet(plans._entries))
    assert _run_threads(lambda: sk.nn.release_caches(layer), 2) == []


def test_serving_from_threads_leaves_the_warnings_filters_alone(gen):
    """catch_warnings per call swapped the process's filter list: threads interleaving its
    exits left "ignore everything" installed (20 trials of 20)."""
    torch.manual_seed(0)
    layer = sk.nn.SparseLinear.from_dense(nn.Linear(64, 48), sparsity=0.9)
    x = randn(4, 64, gen=gen, dtype=torch.float32)  # (few tokens, 90%: torch's CSR route)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            before = list(warnings.filters)

            def serve():
                for _ in range(150):
                    with torch.no_grad():
                        layer(x)

            for _ in range(4):
                assert _run_threads(serve, 3) == []
                assert warnings.filters == before
    finally:
        sys.setswitchinterval(interval)


def test_torch_csr_notices_are_not_shown_to_the_user():
    """torch warns once a process that sparse CSR is beta: our first call spends it."""
    code = (
        "import warnings, torch, sparsekernels as sk\n"
        "warnings.simplefilter('error')\n"
        "W = sk.CSRMatrix.from_dense(torch.eye(8))\n"
        "out = sk.spmm(W, torch.ones(8, 2), backend='torch_sparse')\n"
        "assert torch.equal(out, torch.ones(8, 2))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


class _EmptiedAfterStore(dict):
    """A cache another thread empties right after an entry is stored (it saw an edit)."""

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if key == "lengths":
            self.clear()


def test_a_derived_array_survives_the_cache_emptied_after_its_build():
    rows = torch.tensor([0, 2, 3, 3])
    cache = _EmptiedAfterStore()
    got = _cache_mode.derived(cache, "lengths", rows.diff, rows)  # (read back: KeyError)
    assert torch.equal(got, rows.diff())


def test_an_edit_during_a_build_is_not_kept_as_current():
    rows = torch.tensor([0, 2, 3, 3])
    cache: dict = {}
    built = []

    def build():
        built.append(rows.clone())
        if len(built) == 1:  # another thread edits the source in place meanwhile and
            rows[1] = 1  # derives something else from it (the cache marked as current)
            _cache_mode.derived(cache, "other", lambda: None, rows)
        return built[-1].diff()

    _cache_mode.derived(cache, "lengths", build, rows)
    again = _cache_mode.derived(cache, "lengths", build, rows)
    assert len(built) == 2 and torch.equal(again, torch.tensor([1, 2, 0]))
    assert _cache_mode.derived(cache, "lengths", build, rows) is again  # (now current)
