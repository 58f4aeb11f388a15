"""Float inputs against the range a model expects: images never normalised or normalised twice, audio at the
scale of 16-bit samples, images resized far from the size the model was built for, splits normalised differently.

The data gate collates every example; each chunk adds its float fields to running statistics here (mean, std, min,
max; per channel for images; the spatial size or length seen), over the positions the attention mask keeps when it
has the field's shape. The figures are always recorded. What they suggest is a warning, never a failure: an unusual
range is not proof (a model may normalise inside its forward), so each says which figures and what they look like.
What the task or the model declares (``Task.extras["image_mean"]``/``["image_std"]``, a normaliser's figures; the
model config's ``image_size`` and ``num_channels``) is a hint checked against the measurement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

WAVE_MIN = 256  # samples per row from which a (batch, samples) float field is read as a waveform


@dataclass
class FieldStats:
    """Running statistics of one float field over the rows scanned."""

    rows: int = 0
    n: int = 0
    total: float = 0.0
    squares: float = 0.0
    low: float = math.inf
    high: float = -math.inf
    image: bool = True  # every chunk was (batch, channels 1 to 4, height, width)
    wave: bool = True  # every chunk was (batch, samples) with many samples
    channels: list[list[float]] = field(default_factory=list)  # per channel: [n, total, squares]
    sizes: set[tuple[int, ...]] = field(default_factory=set)  # (height, width) of images, else the trailing shape

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else 0.0

    @property
    def std(self) -> float:
        return math.sqrt(max(self.squares / self.n - self.mean**2, 0.0)) if self.n else 0.0

    def channel(self, c: int) -> tuple[float, float]:
        n, t, q = self.channels[c]
        m = t / n if n else 0.0
        return m, math.sqrt(max(q / n - m * m, 0.0)) if n else 0.0

    def add(self, v: torch.Tensor, keep: torch.Tensor | None) -> None:
        # float32 sums per chunk (float64 reductions cost 5-40x more on a CPU), added up in Python floats
        x = v.detach().float()
        is_image = x.dim() == 4 and 1 <= x.shape[1] <= 4
        self.image = self.image and is_image
        self.wave = self.wave and x.dim() == 2 and x.shape[1] >= WAVE_MIN
        self.rows += x.shape[0]
        self.sizes.add(tuple(x.shape[2:]) if is_image else tuple(x.shape[1:]))
        if keep is not None or not math.isfinite(float(x.sum())):  # the kept, finite values only (a copy)
            ok = torch.isfinite(x) if keep is None else torch.isfinite(x) & keep.bool()
            x, is_image = x[ok], False  # per channel needs the layout
        if not x.numel():
            return
        lo, hi = torch.aminmax(x)
        self.low, self.high = min(self.low, float(lo)), max(self.high, float(hi))
        self.n += x.numel()
        if not is_image:
            self.total += float(x.sum())
            self.squares += float((x * x).sum())
            return
        if len(self.channels) != x.shape[1]:
            self.channels = [[0, 0.0, 0.0] for _ in range(x.shape[1])]
        per = x.shape[0] * x.shape[2] * x.shape[3]
        sums, squares = x.sum(dim=(0, 2, 3)).tolist(), (x * x).sum(dim=(0, 2, 3)).tolist()
        self.total += sum(sums)
        self.squares += sum(squares)
        for c in range(x.shape[1]):
            self.channels[c][0] += per
            self.channels[c][1] += sums[c]
            self.channels[c][2] += squares[c]

    def figures(self) -> str:
        return f"mean {self.mean:.3g}, std {self.std:.3g}, min {self.low:.3g}, max {self.high:.3g}"


@dataclass
class InputStats:
    """Per float field of the batch, its statistics over one split."""

    fields: dict[str, FieldStats] = field(default_factory=dict)

    def add(self, batch: Mapping[str, Any], mask_key: str | None, label_key: str | None = None) -> None:
        """The batch's float inputs: the targets (``label_key``) and the mask are not inputs."""
        mask = batch.get(mask_key) if mask_key else None
        for k, v in batch.items():
            if not torch.is_tensor(v) or not v.is_floating_point() or v.dim() < 2 or k in (mask_key, label_key):
                continue
            keep = mask if torch.is_tensor(mask) and tuple(mask.shape) == tuple(v.shape) else None
            self.fields.setdefault(k, FieldStats()).add(v, keep)
