"""TrainCheck's stackoverflow-60335387, buggy: ``optimizer.zero_grad()`` is missing from the training loop.

The original (https://stackoverflow.com/questions/60335387/pytorch-mnist-example-not-converge) trains a small
CNN on MNIST with Adam and gets worse with more training: nothing zeroes the gradients, so each backward adds
to the sum of every gradient so far and each step applies that growing sum. The loss still prints, nothing
fails. Here: the same shape of CNN on synthetic 1x12x12 digits, an evaluation and a checkpoint per epoch.
"""

import argparse
import os

import torch
from torch import nn
from torch.nn import functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 8, 3, 1), nn.Conv2d(8, 16, 3, 1)
        self.fc1, self.fc2 = nn.Linear(16 * 4 * 4, 32), nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


def data(n: int, seed: int) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    x = torch.randn(n, 1, 12, 12, generator=g) * 0.3
    x[torch.arange(n), 0, y, :] += 1.5  # a digit is a bright row
    return torch.utils.data.TensorDataset((x - 0.1307) / 0.3081, y)


def main(fixed: bool = False) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--out", default="out_60335387")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    train = torch.utils.data.DataLoader(data(90, 0), batch_size=30, shuffle=True)
    test = torch.utils.data.DataLoader(data(60, 1), batch_size=30)
    model = Net()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    for epoch in range(a.epochs):
        model.train()
        for x, y in train:
            if fixed:
                optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
        model.eval()
        total = 0.0
        with torch.no_grad():
            for x, y in test:
                total += criterion(model(x), y).item() / len(test)
        print(f"epoch {epoch + 1} loss {loss.item():.4f} test {total:.4f}", flush=True)
        torch.save({"model": model.state_dict(), "epoch": epoch}, os.path.join(a.out, "checkpoint.pth.tar"))


if __name__ == "__main__":
    main()
