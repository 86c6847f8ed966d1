"""The tensor-identity cache behind the ops' once-per-weight derivations."""

import gc

import torch

from sparsekernels.ops._identity_cache import IdentityCache


def test_a_value_is_found_only_for_its_own_tensor():
    cache = IdentityCache()
    a, b = torch.zeros(3), torch.zeros(3)
    cache[a] = "a's"
    assert cache.get(a) == "a's"
    assert cache.get(b) is None  # equal values, another tensor
    assert cache.get(a.view(3)) is None  # a view is another tensor object
    cache[a] = "replaced"
    assert cache.get(a) == "replaced" and len(cache) == 1


def test_an_entry_goes_with_its_tensor():
    cache = IdentityCache()
    a = torch.zeros(3)
    cache[a] = torch.ones(2)
    del a
    gc.collect()
    assert len(cache) == 0


def test_a_reused_id_finds_nothing():
    """A new tensor at a dead one's address must not see the dead one's value."""
    cache = IdentityCache()
    for _ in range(200):  # CPython often hands the freed address to the next tensor
        a = torch.zeros(3)
        assert cache.get(a) is None
        cache[a] = "stale"
        del a
    assert len(cache) == 0


def test_a_replaced_entry_survives_the_old_reference_dying():
    """Storing twice for one tensor leaves one live entry; the first weak reference dying with
    no callback must not drop the second."""
    cache = IdentityCache()
    a = torch.zeros(3)
    cache[a] = 1
    cache[a] = 2
    gc.collect()
    assert cache.get(a) == 2
