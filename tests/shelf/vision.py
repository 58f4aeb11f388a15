"""torchvision, importable beside a CPU build of torch.

PyPI's torchvision wheels are built against CUDA torch; beside the CPU build of
torch that CI installs, their compiled operators (nms, roi_align ...) cannot
register, and ``import torchvision`` fails while registering their meta
kernels. The models themselves are plain PyTorch and need none of those
operators: when (and only when) that import fails, the registration module is
replaced by an empty one and torchvision is imported again. On a machine whose
torchvision matches its torch, nothing is changed.
"""

from __future__ import annotations

import sys
import types


def import_torchvision() -> types.ModuleType:
    try:
        import torchvision
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
        import torchvision
    return torchvision


def make_torchvision_importable() -> None:
    """Import torchvision now if it is installed (Hugging Face transformers imports it when present)."""
    import importlib.util

    if importlib.util.find_spec("torchvision") is not None:
        import_torchvision()
