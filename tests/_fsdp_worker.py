"""One rank of tests/test_nn_fsdp.py (run by torchrun): a sparse MLP trained three SGD steps
under FSDP2's fully_shard on gloo, each rank its half of the batch; rank 0 prints the losses
averaged over ranks and the same steps' losses on one process without FSDP, as JSON."""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

import sparsekernels as sk


def build(config: str) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 96), nn.GELU(), nn.Linear(96, 32), nn.Linear(32, 8))
    sk.sparsify_(model, config)
    return model.double()


def losses(model: nn.Module, batches) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    found = []
    for x in batches:
        optimizer.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        found.append(loss.detach())
    return found


def main(config: str) -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    torch.manual_seed(1)
    batches = [torch.randn(4 * world, 64, dtype=torch.float64) for _ in range(3)]
    want = [loss.item() for loss in losses(build(config), batches)]
    model = build(config)
    for layer in model:
        if any(True for _ in layer.parameters()):
            fully_shard(layer)
    fully_shard(model)
    got = torch.stack(losses(model, [x[rank * 4 : (rank + 1) * 4] for x in batches]))
    dist.all_reduce(got)
    if rank == 0:
        print(json.dumps({"want": want, "got": (got / world).tolist()}), flush=True)
    dist.barrier()  # (rank 0 has printed before any rank leaves)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
    # Past the interpreter's teardown: a rank once aborted there in CI ("terminate called
    # without an active exception", gloo's threads), failing a run whose steps had matched.
    os._exit(0)
