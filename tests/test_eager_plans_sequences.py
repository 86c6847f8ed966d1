"""linear's eager plans (ops/_eager_plans.py) under random sequences of calls on one weight:
token shapes, grad mode, which operands want a gradient, a forced backend, optimizer steps (in
place), swapped storages (`.data = ...`, no version bump) and in-place edits of the bias, in any
order. Each call's product and gradients are checked against float64 dense math, so a plan
applied where the whole path would act otherwise, or a plan's kept state gone stale, shows as a
wrong result (a bad row is ~1 off; the tolerance is 1e-9 in float64 on the CPU, 1e-2 in float32
and 5e-2 in bfloat16 on the GPU, where the plans also record and replay Triton launches)."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import sparsekernels as sk
from _helpers import randn, random_csr, random_nm
from _properties import examples, seeds
from sparsekernels.ops import _eager_plans

OUT, IN = 13, 16
leads = st.sampled_from([(1,), (2, 3), (17,), (1, 1, 20)])  # (the last two: W no larger than x)
backends = st.sampled_from([None, "dense", "dense", "reference"])
calls = st.tuples(
    st.just("call"),
    leads,
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    backends,
    st.integers(1, 3),
)  # (kind, lead shape, x wants, values want, bias wants, no_grad, backend, times: a repeat
# call of a signature takes its plan)
steps = st.tuples(st.sampled_from(["step", "swap", "bias", "edit", "corrupt"]))
sequences = st.lists(st.one_of(calls, calls, steps), min_size=3, max_size=9)


SETTINGS = {  # device, dtype, tolerance
    "cpu-float64": ("cpu", torch.float64, 1e-9),
    "gpu-float32": ("cuda", torch.float32, 1e-2),
    "gpu-bfloat16": ("cuda", torch.bfloat16, 5e-2),
}


def _weight(kind: str, gen, dtype, device):
    if kind == "csr":
        return random_csr(OUT, IN, 0.35, gen, dtype, device)
    return random_nm(OUT, IN, 2, 8, gen, vector=2, dtype=dtype, device=device)


def _stored(W) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, columns) of each stored value, in the values' order."""
    if isinstance(W, sk.CSRMatrix):
        offsets = W.row_offsets.cpu()
        rows = torch.repeat_interleave(
            torch.arange(W.shape[0]), (offsets[1:] - offsets[:-1]).long()
        )
        return rows, W.column_indices.cpu().long()
    columns = W.column_indices().cpu().long()
    rows = torch.arange(W.shape[0])[:, None].expand_as(columns)
    return rows.flatten(), columns.flatten()


def _edit_pattern(W, gen) -> None:
    """Other stored positions, as many a row (a valid pattern), written into W's index arrays."""
    if isinstance(W, sk.NMMatrix):
        W.indices.copy_(random_nm(OUT, IN, 2, 8, gen, vector=2).indices)
        return
    columns = []
    for row in range(OUT):
        count = int(W.row_offsets[row + 1] - W.row_offsets[row])
        columns.append(torch.randperm(IN, generator=gen)[:count].sort().values)
    W.column_indices.copy_(torch.cat(columns).to(W.column_indices.dtype))


def _corrupt_then_restore(W, bias, gen) -> None:
    indices = W.column_indices if isinstance(W, sk.CSRMatrix) else W.indices
    x = randn(17, IN, gen=gen, dtype=bias.dtype, device=bias.device)
    with torch.no_grad():
        for _ in range(2):  # (the second call, at the latest, makes this signature's plan)
            sk.linear(x, W, bias)
        kept = indices.clone()
        indices.view(-1)[0] = IN if isinstance(W, sk.CSRMatrix) else 8  # past the row / group
        with pytest.raises(ValueError):
            sk.linear(x, W, bias)
        indices.copy_(kept)


def _f64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().double()


def _check_call(W, bias, lead, wants, no_grad, backend, gen, tol) -> None:
    x = randn(*lead, IN, gen=gen, dtype=bias.dtype, device=bias.device)
    g = randn(*lead, OUT, gen=gen, dtype=bias.dtype, device=bias.device)
    x.requires_grad_(wants[0])
    W.values.requires_grad_(wants[1])
    bias.requires_grad_(wants[2])
    with torch.set_grad_enabled(not no_grad):
        out = sk.linear(x, W, bias, backend=backend)
    dense = _f64(W.to_dense())
    want = _f64(x) @ dense.t() + _f64(bias)
    torch.testing.assert_close(_f64(out), want, rtol=tol, atol=tol)
    wanted = [t for t in (x, W.values, bias) if t.requires_grad]
    if no_grad or not wanted:
        assert not out.requires_grad
        return
    grads = dict(zip([id(t) for t in wanted], torch.autograd.grad(out, wanted, g), strict=True))
    tokens, grad_rows = _f64(x).reshape(-1, IN), _f64(g).reshape(-1, OUT)
    rows, columns = _stored(W)
    expected = {
        id(x): _f64(g) @ dense,
        id(W.values): (grad_rows.t() @ tokens)[rows, columns].reshape(W.values.shape),
        id(bias): grad_rows.sum(0),
    }
    for key, got in grads.items():
        torch.testing.assert_close(_f64(got), expected[key], rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "setting",
    [
        "cpu-float64",
        pytest.param("gpu-float32", marks=pytest.mark.gpu),
        pytest.param("gpu-bfloat16", marks=pytest.mark.gpu),
    ],
)
@pytest.mark.parametrize("kind", ["csr", "nm"])
@examples(30)
@given(sequence=sequences, seed=seeds)
def test_random_call_sequences_match_float64(setting, kind, sequence, seed):
    device, dtype, tol = SETTINGS[setting]
    gen = torch.Generator().manual_seed(seed)
    W = _weight(kind, gen, dtype, device)
    bias = randn(OUT, gen=gen, dtype=dtype, device=device)

    def fresh_values():
        return randn(*W.values.shape, gen=gen, dtype=dtype, device=device)

    for action in sequence:
        if action[0] == "call":
            _, lead, *wants, no_grad, backend, times = action
            for _ in range(times):
                _check_call(W, bias, lead, wants, no_grad, backend, gen, tol)
        elif action[0] == "step":  # an optimizer's in-place update
            with torch.no_grad():
                W.values.add_(fresh_values())
        elif action[0] == "swap":  # new storage, no version bump
            W.values.data = fresh_values()
        elif action[0] == "corrupt":  # an invalid edit in place: refused, even after a plan
            _corrupt_then_restore(W, bias, gen)
        elif action[0] == "edit":  # the pattern changed in place (the checks see it again)
            _edit_pattern(W, gen)
        else:
            with torch.no_grad():
                bias.mul_(-2.0)
    assert _eager_plans._PLANS.get(W.values) is None or len(_eager_plans._PLANS.get(W.values)) <= (
        _eager_plans.MOST_SIGNATURES
    )
