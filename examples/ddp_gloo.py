"""A two-task `torch.distributed` job for gpupool's local executor (gloo backend, CPU).

    gpupool submit ddp --tasks 2 --gpu 1 -- python examples/ddp_gloo.py
    gpupool logs ddp --all-tasks

gpupool gives each task of the gang RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, which is
what `init_process_group("gloo")` reads (the `env://` method): no torchrun needed. Each rank
trains a DistributedDataParallel model for a few steps (the gradients are averaged across the
ranks, so both end with the same weights) and all-reduces rank + 1 (1 + 2 = 3 for two tasks).
Use the "nccl" backend and `torch.device("cuda", int(os.environ["LOCAL_RANK"]))` on GPUs.
"""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank}/{world}: joined {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}")

    torch.manual_seed(rank)  # different data per rank; DDP syncs the initial weights
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        inputs = torch.randn(8, 4)
        loss = (model(inputs) - inputs.sum(dim=1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(weights) for _ in range(world)]
    dist.all_gather(gathered, weights)
    same = all(torch.equal(gathered[0], other) for other in gathered)
    print(f"rank {rank}/{world}: weights identical across ranks: {same}")

    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    print(f"rank {rank}/{world}: all_reduce sum = {value.item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
