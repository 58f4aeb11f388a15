"""Calling the task's code, and what its failures look like.

Everything the pilot or a training run calls in the user's task goes through
:func:`user`, so an exception there is the task's (exit 5, its traceback in
output.log), never taken for a bug in Cockpit (exit 6), and an out-of-memory
or a failed collective stays what it is. Whose any other exception is, and at
which line of the user's code, is :mod:`cockpit.blame`'s one rule.
"""

from __future__ import annotations

from typing import Any

import torch

from ..blame import UserCodeError

__all__ = ["NonFinite", "UserCodeError", "is_collective_failure", "is_oom", "resolve_device", "user", "user_int"]


class NonFinite(Exception):
    """A loss or gradient that is NaN or infinite."""

    def __init__(self, what: str, value: float | None = None, step: int | None = None):
        self.what, self.value, self.step = what, value, step
        at = f" at update {step}" if step is not None else ""
        super().__init__(f"non-finite {what}{at} ({value})")


def user(where: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call the task's code, turning its exceptions into UserCodeError (OOM passes through)."""
    try:
        return fn(*args, **kwargs)
    except (torch.OutOfMemoryError, KeyboardInterrupt, NonFinite):
        raise
    except Exception as exc:
        if is_oom(exc) or is_collective_failure(exc):
            raise
        raise UserCodeError(where, exc) from exc


def user_int(where: str, fn: Any, *args: Any, none: bool = False) -> Any:
    """The task's function that must return a whole number (``length``, ``max_length``, ``vocab_size``): its value
    as an int; None passes where ``none`` (no limit); anything else is the task's mistake, said in one line."""
    value = user(where, fn, *args)
    if value is None and none:
        return None
    try:
        if isinstance(value, bool) or (torch.is_tensor(value) and value.numel() != 1):
            raise TypeError
        number = float(value.item() if hasattr(value, "item") else value)
        if number != int(number):
            raise ValueError
        return int(number)
    except (TypeError, ValueError, OverflowError):
        said = f"a tensor of shape {tuple(value.shape)}" if torch.is_tensor(value) else repr(value)[:60]
        raise UserCodeError(
            where, TypeError(f"returned {said} ({type(value).__name__}): it must return a whole number")
        ) from None


def is_collective_failure(exc: BaseException) -> bool:
    """A distributed collective that timed out or lost its peer (raised inside DDP's forward or backward)."""
    name = type(exc).__name__
    text = str(exc)
    return name in ("DistBackendError", "DistNetworkError", "DistStoreError") or any(
        s in text for s in ("gloo/transport", "Timed out waiting", "Connection closed by peer", "NCCL", "ProcessGroup")
    )


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def resolve_device(name: str | None) -> torch.device:
    name = (name or "auto").lower()
    if name == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    return torch.device(name)
