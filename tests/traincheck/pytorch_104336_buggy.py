"""TrainCheck's pytorch-104336, buggy: the model is moved after DistributedDataParallel wrapped it.

The original (https://github.com/pytorch/pytorch/issues/104336) wraps a model in DDP, then moves the wrapper to
the CPU and back to the GPU. Moving gives every parameter a new tensor, while DDP's gradient hooks stay on the
old ones: backward no longer all-reduces, each rank steps with its own gradient and the ranks' models drift
apart, with no error. On a CPU-only box the same happens when the wrapped model is cast (``.double()``) after
wrapping, as here: two ranks under gloo (this process is rank 0), each on its own shard of synthetic data.
"""

import os

import torch
from ddp_common import ToyModel, run, shard
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank: int, world: int, fixed: bool = False) -> None:
    torch.manual_seed(0)
    model = ToyModel()
    if fixed:
        model = model.double()  # moved (cast) before DDP wraps it: the hooks are on the parameters that train
    ddp_model = DDP(model)
    if not fixed:
        ddp_model.double()  # moved (cast) after wrapping: the defect
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()
    for epoch in range(2):
        for x, y in shard(rank, world):
            optimizer.zero_grad()
            loss = loss_fn(ddp_model(x.double()), y.double())
            loss.backward()
            optimizer.step()
        if rank == 0:  # rank 0 evaluates alone, on the inner module (the wrapper's forward would sync buffers)
            ddp_model.module.eval()
            with torch.no_grad():
                val = sum(loss_fn(ddp_model.module(x.double()), y.double()).item() for x, y in shard(1, world))
            ddp_model.module.train()
            print(f"epoch {epoch + 1} loss {loss.item():.4f} val {val:.4f}", flush=True)
            torch.save(ddp_model.module.state_dict(), os.path.join(os.environ.get("OUT", "."), "ddp_104336.pt"))


def fixed(rank: int, world: int) -> None:
    train(rank, world, fixed=True)


if __name__ == "__main__":
    run(train)
