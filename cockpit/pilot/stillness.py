"""Why a trainable tensor did not move in an optimizer step, measured from the gradients the step used.

A tensor the optimizer holds can stay bit-identical through a step for three reasons, and only one of them is a
finding by itself:

- no gradient reached it, or its gradient is exactly zero (a factor of a zero-initialised one, as LoRA's A
  while B is zero): the caller checks that later updates move it;
- its gradient is at rounding level next to the gradient of the other parameters of its own layer: the loss does
  not depend on it, because something after it cancels it (a bias right before a BatchNorm or a LayerNorm, whose
  mean subtraction removes it; the classic CIFAR ResNet with ``bias=True`` convolutions). Under a plain SGD step
  ``lr * grad`` is below the float resolution of the values, so they stay put; Adam's normalised step moves them
  anyway. Harmless for what the model learns: said, not warned;
- anything else: a gradient that should have moved it did not (the caller's finding).
No torch at import time beyond type names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

CANCELLED = 1e-4  # a gradient this far below its own layer's largest is the rounding of a cancelled sum


@dataclass
class Stillness:
    """The unchanged tensors of one step, by why they did not move."""

    no_gradient: list[str] = field(default_factory=list)  # grad None or exactly zero
    cancelled: list[str] = field(default_factory=list)  # rounding-level gradient next to its layer's own
    unexplained: list[str] = field(default_factory=list)
    ratios: dict[str, float] = field(default_factory=dict)  # cancelled: its largest |grad| / its layer's

    def cancelled_words(self) -> str:
        if not self.cancelled:
            return ""
        worst = max(self.ratios[n] for n in self.cancelled)
        names = ", ".join(self.cancelled[:4]) + (
            f" and {len(self.cancelled) - 4} more" if len(self.cancelled) > 4 else ""
        )
        return (
            f"{len(self.cancelled)} unchanged with a gradient at rounding level next to their own layer's "
            f"(at most {worst:.1e} of it: {names}): the loss does not depend on them, as a bias right before a "
            "normalisation layer, which removes it; harmless (bias=False saves them)"
        )


def classify(named: Iterable[tuple[str, torch.Tensor]], unchanged: Iterable[str]) -> Stillness:
    """Sort ``unchanged`` (names among ``named``) by why their step did not move them, from their ``.grad``."""
    params = dict(named)
    largest: dict[str, float] = {}
    for name, p in params.items():
        if p.grad is not None and p.grad.numel():
            largest[name] = float(p.grad.detach().abs().max())
    out = Stillness()
    for name in unchanged:
        g = largest.get(name)
        if g is None or g == 0.0:
            out.no_gradient.append(name)
            continue
        layer = name.rsplit(".", 1)[0] if "." in name else ""
        siblings = [v for n, v in largest.items() if n != name and (n.rsplit(".", 1)[0] if "." in n else "") == layer]
        top = max(siblings, default=0.0)
        if top > 0.0 and g <= CANCELLED * top:
            out.cancelled.append(name)
            out.ratios[name] = g / top
        else:
            out.unexplained.append(name)
    return out
