"""Test environment only: torchvision importable beside a CPU build of torch, in every process.

PyPI's torchvision wheels are built against CUDA torch; beside the CPU torch CI installs, importing
torchvision fails while registering the meta kernels of its compiled operators, and transformers,
PEFT and Lightning (through torchmetrics) import torchvision when it is installed. The example
campaigns run as real processes (pilot, resume and replay children, series runs), so the tests put
this folder on PYTHONPATH: Python imports ``sitecustomize`` at start-up, and this one makes only
that registration module tolerate the failure (the same repair as ``tests/shelf/vision.py``, done
lazily, at no cost to a process that never imports torchvision). A user's campaign needs none of it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any

NAME = "torchvision._meta_registrations"


class _Tolerant(importlib.abc.Loader):
    def __init__(self, real: Any):
        self.real = real

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: Any) -> None:
        try:
            self.real.exec_module(module)
        except RuntimeError as exc:
            if "torchvision::" not in str(exc):
                raise


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != NAME:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Tolerant(spec.loader)
        return spec


sys.meta_path.insert(0, _Finder())
