"""Every random stream a run uses: seeded, saved and restored together (Python, NumPy, torch, CUDA)."""

from __future__ import annotations

import random
from typing import Any

import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:  # pragma: no cover
        pass


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1])}
    state["python_full"] = [random.getstate()[0], random.getstate()[2]]
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np

        st: Any = np.random.get_state()
        state["numpy"] = {"keys": torch.from_numpy(st[1].astype("int64")), "pos": int(st[2])}
    except ImportError:  # pragma: no cover
        pass
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    version, gauss = state["python_full"]
    random.setstate((version, tuple(int(x) for x in state["python"]), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np

        keys = state["numpy"]["keys"].numpy().astype("uint32")
        np.random.set_state(("MT19937", keys, state["numpy"]["pos"], 0, 0.0))
