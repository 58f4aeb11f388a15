"""TrainCheck's x-jxmnop-ddp-out-of-sync, buggy: some steps call the bare model instead of its DDP wrapper.

The original (https://x.com/jxmnop/status/1778520637193240892, reproduced by TrainCheck with a Trainer subclass)
trains on several GPUs where the model is sometimes the bare ``nn.Module`` and sometimes wrapped in
DistributedDataParallel: the steps through the bare module never all-reduce their gradients, so each rank
applies its own and the ranks' copies drift apart, silently. Here: two ranks under gloo (this process is rank 0),
a step through ``model`` on even steps and through a DDP wrapper on odd ones, as the original's
``get_model_ddp_or_not`` does.
"""

import os

import torch
from ddp_common import ToyModel, run, shard
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank: int, world: int, fixed: bool = False) -> None:
    torch.manual_seed(0)
    model = ToyModel()
    wrapped = DDP(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss_fn = nn.MSELoss()
    step = 0
    for epoch in range(2):
        for x, y in shard(rank, world):
            net = wrapped if fixed or step % 2 else model  # the defect: the bare module on even steps
            optimizer.zero_grad()
            loss = loss_fn(net(x), y)
            loss.backward()
            optimizer.step()
            step += 1
        if rank == 0:  # rank 0 evaluates alone, on the inner module (the wrapper's forward would sync buffers)
            model.eval()
            with torch.no_grad():
                val = sum(loss_fn(model(x), y).item() for x, y in shard(1, world))
            model.train()
            print(f"epoch {epoch + 1} loss {loss.item():.4f} val {val:.4f}", flush=True)
            torch.save(model.state_dict(), os.path.join(os.environ.get("OUT", "."), "ddp_jxmnop.pt"))


def fixed(rank: int, world: int) -> None:
    train(rank, world, fixed=True)


if __name__ == "__main__":
    run(train)
