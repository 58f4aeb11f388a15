"""A Lightning script with automatic optimization, shaped like Lightning's own bug-report model (no Cockpit in
it): Lightning runs training_step and backward inside optimizer.step(closure). A validation every 4 steps, a
checkpoint saved at the end. --defect layer-left-out leaves the first layer out of configure_optimizers."""

import argparse
import os

import torch
from lightning.pytorch import LightningModule, Trainer, seed_everything
from torch import nn
from torch.utils.data import DataLoader, Dataset


class RandomData(Dataset):
    def __init__(self, n: int, seed: int):
        self.x = torch.randn(n, 16, generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.x[i]


class Model(LightningModule):
    def __init__(self, defect: str, log_path: str):
        super().__init__()
        self.layer1, self.layer2 = nn.Linear(16, 32), nn.Linear(32, 2)
        self.defect, self.log_path = defect, log_path

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer2(torch.relu(self.layer1(x)))

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        loss = self(batch).pow(2).mean()
        with open(self.log_path, "a") as f:
            f.write(f"train {self.global_step} {loss.item():.6f}\n")
        return loss

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        loss = self(batch).pow(2).mean()
        with open(self.log_path, "a") as f:
            f.write(f"val {self.global_step} {loss.item():.6f}\n")

    def configure_optimizers(self):
        params = self.layer2.parameters() if self.defect == "layer-left-out" else self.parameters()
        return torch.optim.SGD(params, lr=0.1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="lit")
    ap.add_argument("--max-steps", type=int, default=8)
    ap.add_argument("--defect", default="", choices=["", "layer-left-out"])
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    seed_everything(0, verbose=False)
    model = Model(a.defect, os.path.join(a.out, "log.txt"))
    trainer = Trainer(
        default_root_dir=a.out,
        max_steps=a.max_steps,
        val_check_interval=4,
        limit_val_batches=2,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
    )
    trainer.fit(model, DataLoader(RandomData(64, 1), batch_size=4), DataLoader(RandomData(16, 2), batch_size=4))
    torch.save(model.state_dict(), os.path.join(a.out, "final.pt"))
    print("done", flush=True)


if __name__ == "__main__":
    main()
