"""Every random stream a run uses: seeded, saved and restored together (Python, NumPy, torch, CUDA)."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:  # typing.NotRequired is Python 3.11; annotations here are never evaluated
    from typing import NotRequired

import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:  # pragma: no cover
        pass


class NumpyState(TypedDict):
    keys: torch.Tensor  # the Mersenne Twister's keys, as int64
    pos: int


class RngState(TypedDict):
    """Every random stream's state, as a checkpoint saves it (tensors and plain lists: safe loading reads it)."""

    torch: torch.Tensor
    python: list[int]  # random's Mersenne Twister state
    python_full: list[int | float | None]  # random's version and its cached gauss
    cuda: NotRequired[list[torch.Tensor]]
    numpy: NotRequired[NumpyState]


def rng_state() -> RngState:
    state: RngState = {
        "torch": torch.get_rng_state(),
        "python": list(random.getstate()[1]),
        "python_full": [random.getstate()[0], random.getstate()[2]],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np

        st: Any = np.random.get_state()
        state["numpy"] = {"keys": torch.from_numpy(st[1].astype("int64")), "pos": int(st[2])}
    except ImportError:  # pragma: no cover
        pass
    return state


def set_rng_state(state: RngState) -> None:
    torch.set_rng_state(state["torch"])
    version, gauss = state["python_full"]
    random.setstate((version, tuple(int(x) for x in state["python"]), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np

        keys = state["numpy"]["keys"].numpy().astype("uint32")
        np.random.set_state(("MT19937", keys, state["numpy"]["pos"], 0, 0.0))
