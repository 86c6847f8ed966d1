"""torch's CPU CSR matmul takes int32 columns: a CSRMatrix's int16 ones are converted into one
buffer a thread (ops/_cpu_columns.py), reused, grown, private to the thread, never one that
autograd would keep, and counted by bench/held.py."""

import threading

import torch

import sparsekernels as sk
from _helpers import randn, random_csr
from sparsekernels.bench.held import held_bytes
from sparsekernels.ops import _cpu_columns, _torch_sparse


def test_columns_converted_into_one_buffer_that_grows(gen):
    first = torch.randint(0, 30000, (50,), generator=gen, dtype=torch.int16)
    got = _cpu_columns.as_int32(first)
    assert got.dtype == torch.int32 and got.is_contiguous() and torch.equal(got, first.int())
    buffer = _cpu_columns.buffers()[0]
    strided = torch.randint(0, 30000, (40, 2), generator=gen, dtype=torch.int16)[:, 1]
    again = _cpu_columns.as_int32(strided)
    assert torch.equal(again, strided.int())
    assert again.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()
    larger = torch.randint(0, 30000, (buffer.numel() + 7,), generator=gen, dtype=torch.int16)
    assert torch.equal(_cpu_columns.as_int32(larger), larger.int())
    assert _cpu_columns.buffers()[0].numel() == larger.numel()


def test_each_thread_has_its_own_buffer():
    mine = _cpu_columns.as_int32(torch.arange(10, dtype=torch.int16))
    seen = []
    thread = threading.Thread(target=lambda: seen.append(_cpu_columns.as_int32(mine.short())))
    thread.start()
    thread.join()
    assert torch.equal(seen[0], mine)
    assert seen[0].untyped_storage().data_ptr() != mine.untyped_storage().data_ptr()


def test_products_through_the_buffer_match_and_autograd_keeps_its_own(gen, monkeypatch):
    A = random_csr(30, 50, 0.4, gen)
    assert A.column_indices.dtype == torch.int16
    B = randn(50, 6, gen=gen)
    used = []
    monkeypatch.setattr(
        _torch_sparse, "as_int32", lambda c: used.append(1) or _cpu_columns.as_int32(c)
    )
    for tokens in (B, B[:, :1]):  # (one token: torch's matrix-vector kernel)
        got = sk.spmm(A, tokens, backend="torch_sparse")
        torch.testing.assert_close(got, A.to_dense() @ tokens, rtol=1e-12, atol=1e-12)
    assert len(used) == 2
    values = A.values.clone().requires_grad_()  # autograd keeps the CSR tensor's columns:
    with torch.enable_grad():  # they must be the call's own, not the buffer
        out = _torch_sparse.spmm_csr(A.row_offsets, A.column_indices, values, B, None, None, None)
    assert len(used) == 2
    out.sum().backward()
    want = (torch.ones(30, 6, dtype=B.dtype) @ B.t()).flatten()[
        A.pattern.row_indices() * 50 + A.column_indices.long()
    ]
    torch.testing.assert_close(values.grad, want, rtol=1e-12, atol=1e-12)


def test_held_bytes_count_the_part_of_the_buffer_the_model_needs():
    """A CPU CSR model is charged its largest layer's int32 columns, however large the thread's
    buffer has grown on other weights."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.Linear(48, 40))
    sk.sparsify_(model, "50%")
    with torch.no_grad():
        model(torch.randn(2, 64))  # (a few tokens: torch's sparse matmul)
    largest = max(model[0].column_indices.numel(), model[1].column_indices.numel())
    buffer = _cpu_columns.buffers()[0]
    with_buffer = held_bytes(model)
    kept = _cpu_columns._LOCAL.__dict__.pop("buffer")
    try:
        assert with_buffer - held_bytes(model) == 4 * largest
    finally:
        _cpu_columns._LOCAL.buffer = kept
    _cpu_columns.as_int32(torch.zeros(10 * buffer.numel(), dtype=torch.int16))  # grown elsewhere
    assert held_bytes(model) == with_buffer
