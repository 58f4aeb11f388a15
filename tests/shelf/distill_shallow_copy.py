"""Broken twin of the distillation task: the teacher is made with ``copy.copy(student)``, a shallow copy that
shares the student's parameters, so freezing the teacher freezes the student too and nothing trains."""

from __future__ import annotations

import copy
from typing import Any

from tests.shelf import distill_task as base


def build(params: dict[str, Any]) -> base.Distiller:
    student = base.gpt2(32, 1)
    t = copy.copy(student)  # meant as a fixed snapshot of the student: shares its parameters
    t.requires_grad_(False)
    return base.Distiller(student, t)


task = base.make(build)
