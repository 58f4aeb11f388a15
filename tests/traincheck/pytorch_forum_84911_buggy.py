"""TrainCheck's pytorch-forum-84911, buggy: every layer but BatchNorm is frozen by a name filter, the head too.

The original (https://discuss.pytorch.org/t/obtaining-abnormal-changes-in-loss-and-accuracy/84911) fine-tunes
an EfficientNet on CIFAR-100 and never learns: the loop that was meant to freeze the backbone freezes every
parameter whose name lacks "bn", and a second loop then freezes the classifier head as well. The optimizer is
handed all the parameters, so nothing fails: only the BatchNorm layers' scales and shifts train, a sliver of
the model, and the accuracy stays at chance. Here: a small CNN on synthetic images, the same two loops.
"""

import argparse
import os

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.conv2, self.bn2 = nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32)
        self._fc = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(nn.functional.max_pool2d(x, 2))))
        return self._fc(x.mean(dim=(2, 3)))


def data(n: int, seed: int) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    x = torch.randn(n, 3, 16, 16, generator=g) * 0.5
    rows = torch.arange(16)
    band = (rows[None, :] // 4 == (y[:, None] // 3) % 4).float()  # a class is a bright band in one channel
    x[torch.arange(n), y % 3] += band[:, :, None]
    return torch.utils.data.TensorDataset(x, y)


def main(fixed: bool = False) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--out", default="out_84911")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(786)
    train = torch.utils.data.DataLoader(data(64, 0), batch_size=8, shuffle=True)
    valid = torch.utils.data.DataLoader(data(32, 1), batch_size=16)
    model = Net()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for name, param in model.named_parameters():
        if "bn" not in name and not (fixed and name.startswith("_fc")):
            param.requires_grad = False  # meant: freeze the backbone
    if not fixed:
        for param in model._fc.parameters():
            param.requires_grad = False  # the head frozen too: the defect
    best = float("inf")
    for epoch in range(a.epochs):
        model.train()
        train_loss = 0.0
        for x, y in train:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            train_loss += loss.item() / len(train)
        model.eval()
        valid_loss, correct = 0.0, 0
        with torch.no_grad():
            for x, y in valid:
                out = model(x)
                valid_loss += criterion(out, y).item() / len(valid)
                correct += int((out.argmax(1) == y).sum())
        print(f"epoch {epoch + 1} train {train_loss:.4f} valid {valid_loss:.4f} acc {correct / 32:.2f}", flush=True)
        if valid_loss <= best:
            best = valid_loss
            torch.save(model.state_dict(), os.path.join(a.out, "model.pt"))


if __name__ == "__main__":
    main()
