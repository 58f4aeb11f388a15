"""A Lightning user's existing code: a classifier module and its data module (not written for Cockpit)."""

import lightning.pytorch as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitClassifier(L.LightningModule):
    def __init__(self, features: int = 8, hidden: int = 32, classes: int = 3, lr: float = 3e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.7)}


class SensorData(L.LightningDataModule):
    """Readings of 8 sensors; the class is the level of the first three (low, mid, high)."""

    def __init__(self, batch_size: int = 16):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(720, 8, generator=g)
        y = torch.bucketize(x[:, :3].sum(1), torch.tensor([-1.0, 1.0]))
        self.train_set = TensorDataset(x[:480], y[:480])
        self.val_set = TensorDataset(x[480:600], y[480:600])
        self.test_set = TensorDataset(x[600:], y[600:])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=64)

    def test_dataloader(self):
        return DataLoader(self.test_set, batch_size=64)
