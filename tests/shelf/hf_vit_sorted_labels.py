"""Broken twin of the ViT task: the collate numbers the classes in alphabetical order (``sorted(names)``) while
the task's label names, the model's head and every report use the dataset's order. The model learns a mapping
that every prediction then names wrongly. The data gate must say which names map to which ids."""

from __future__ import annotations

from tests.shelf import hf_vit_task as base

task = base.make(sorted(base.LABELS))
