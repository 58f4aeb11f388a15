"""Which layers of the script's model train, by kind: what the probe says when a freeze took more than meant.

A script freezes by name (``if "bn" not in name: p.requires_grad = False``) or by module, and a filter that
matches more than the author meant trains the wrong part of the model without any error: TrainCheck's
pytorch-forum-84911 froze every layer but BatchNorm, the classifier head too, and handed the optimizer all of
them. Read from the model as it is at the first update: each parameter's own module (the one that holds it
directly), its kind (normalisation layers told by their class name: ``BatchNorm2d``, ``LayerNorm``,
``GroupNorm``, ``LlamaRMSNorm``), and the share of the parameters that trains. No state.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

NORM = re.compile(r"Norm(\d+d)?$")  # BatchNorm1d/2d/3d, SyncBatchNorm, LayerNorm, GroupNorm, InstanceNorm2d, RMSNorm


@dataclass
class Layer:
    path: str  # the module's name in the model ("" for the root itself)
    kind: str  # its class name
    tensors: int = 0
    trainable: int = 0
    numel: int = 0
    trainable_numel: int = 0

    @property
    def norm(self) -> bool:
        return bool(NORM.search(self.kind))

    @property
    def name(self) -> str:
        return self.path or self.kind


@dataclass
class Trainable:
    """The model's parameterised layers in order, and what of them trains."""

    layers: list[Layer] = field(default_factory=list)

    @property
    def tensors(self) -> int:
        return sum(x.tensors for x in self.layers)

    @property
    def trainable(self) -> int:
        return sum(x.trainable for x in self.layers)

    @property
    def numel(self) -> int:
        return sum(x.numel for x in self.layers)

    @property
    def trainable_numel(self) -> int:
        return sum(x.trainable_numel for x in self.layers)

    def only_norm(self) -> bool:
        """Every trainable tensor is a normalisation layer's, and some other layer holds frozen ones."""
        training = [x for x in self.layers if x.trainable]
        return bool(training) and all(x.norm for x in training) and any(not x.norm for x in self.layers)

    def words(self) -> str:
        """The figures: tensors and parameters that train, and the layers frozen, by kind."""
        n, k = self.tensors, self.trainable
        share = self.trainable_numel / self.numel if self.numel else 0.0
        head = f"{k} of {n} tensors train, {self.trainable_numel:,} of {self.numel:,} parameters ({share:.1%})"
        frozen = [x for x in self.layers if x.tensors and not x.trainable]
        return head + (f"; frozen: {by_kind(frozen)}" if frozen else "")

    def only_norm_words(self) -> str:
        training = [x for x in self.layers if x.trainable]
        kinds = sorted({x.kind for x in training})
        others = [x for x in self.layers if not x.norm]
        last = others[-1] if others else None
        also = f"; the last layer ({last.name}, {last.kind}) is frozen too" if last and not last.trainable else ""
        return (
            f"only the normalisation layers train ({' and '.join(kinds)}: {short(training)}): {self.words()}{also}"
            + ". Every weight that maps inputs to outputs is fixed, so the model can barely learn: a freeze by "
            'name (`if "bn" not in name: p.requires_grad = False`) takes more than the backbone. Set '
            "requires_grad_(True) on what should learn (the head, the layers being fine-tuned); if training only "
            "the normalisation layers is the plan, this is what it costs"
        )


def short(layers: list[Layer], k: int = 4) -> str:
    names = [x.name for x in layers]
    return ", ".join(names[:k]) + (f" and {len(names) - k} more" if len(names) > k else "")


def by_kind(layers: list[Layer]) -> str:
    kinds: dict[str, list[Layer]] = {}
    for x in layers:
        kinds.setdefault(x.kind, []).append(x)
    return "; ".join(f"{len(v)} {kind} ({short(v, 3)})" for kind, v in kinds.items())


def trainable(roots: Iterable[tuple[str, torch.nn.Module]]) -> Trainable:
    """The layers of the given roots (``(prefix, module)``; a prefix names a root when there are several)."""
    out = Trainable()
    seen: set[int] = set()
    for prefix, root in roots:
        for path, m in root.named_modules():
            layer = Layer(".".join(p for p in (prefix, path) if p), type(m).__name__)
            for p in m.parameters(recurse=False):
                if id(p) in seen:
                    continue  # tied weights count once, with the first module that holds them
                seen.add(id(p))
                layer.tensors += 1
                layer.numel += p.numel()
                if p.requires_grad:
                    layer.trainable += 1
                    layer.trainable_numel += p.numel()
            if layer.tensors:
                out.layers.append(layer)
    return out
