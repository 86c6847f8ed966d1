"""The sparse layers' index buffers named for DDP to leave out (nn/distributed.py): NCCL has no
int16 type, and a CSR layer's column indices are int16 where every column fits."""

import os

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import sparsekernels as sk
from sparsekernels.nn import SparseAttention, SparseLinear


class _Model(nn.Module):
    def __init__(self):
        super().__init__()
        dense = nn.Linear(64, 48)
        self.blocks = nn.ModuleList([
            SparseLinear.from_dense(dense, sparsity=0.7),
            SparseLinear.from_dense(nn.Linear(64, 32), pattern="2:8"),
        ])  # fmt: skip
        self.attention = SparseAttention.local_strided(16, window=4, stride=5)
        self.norm = nn.BatchNorm1d(8)  # (a buffer of its own: still broadcast)

    def forward(self, x):
        return self.blocks[0](x).sum() + self.blocks[1](x).sum()


def test_index_buffer_names():
    model = _Model()
    names = sk.nn.index_buffer_names(model)
    assert names == [
        "blocks.0.row_offsets", "blocks.0.column_indices", "blocks.1.indices",
        "attention.row_offsets", "attention.column_indices",
    ]  # fmt: skip
    buffers = dict(model.named_buffers())
    assert set(names) <= set(buffers) and buffers["blocks.0.column_indices"].dtype == torch.int16
    assert "norm.running_mean" not in names
    assert sk.nn.index_buffer_names(model.blocks[0]) == ["row_offsets", "column_indices"]
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        sk.nn.index_buffer_names(model.blocks[0].weight)


def test_ddp_leaves_the_named_buffers_out(monkeypatch):
    """Wrapped on a one-process gloo group: DDP takes the names as its buffers to ignore and
    broadcasts none of them (NCCL's refusal of int16 cannot be shown without GPUs)."""
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        model = _Model()
        names = sk.nn.index_buffer_names(model)
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, names)
        broadcast, original = [], dist._broadcast_coalesced

        def noted(group, tensors, *rest):
            broadcast.extend(tensors)
            return original(group, tensors, *rest)

        monkeypatch.setattr(dist, "_broadcast_coalesced", noted)
        wrapped = DistributedDataParallel(model)
        assert set(names) <= wrapped.parameters_to_ignore
        assert broadcast and not any(t.dtype == torch.int16 for t in broadcast)
        wrapped(torch.randn(3, 64)).backward()
        assert model.blocks[0].values.grad is not None
    finally:
        dist.destroy_process_group()
