"""Signals that stop a run, installed before anything heavy is imported. No torch.

A SIGTERM or SIGINT raises :class:`Stopped` in the main thread, once: the
signal is remembered (:func:`received`), so a stop whose exception was
swallowed or converted on its way up (torch turns an exception raised inside
``torch.save`` into a ``RuntimeError``) is still classified as a stop, and a
second signal does not interrupt the run's own clean-up. The launcher starts
the run process with SIGTERM and SIGINT blocked; :func:`install` installs the
handlers and only then unblocks them, so a stop that arrives while Python is
still starting is a stop (exit 7), not a crash. Inside :func:`held` (the
import of torch and numpy) a stop is only recorded and raised on leaving: an
exception raised inside a C extension's loading breaks it for good (numpy then
refuses with "cannot load module more than once per process", and the stop
became a crash).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_received: list[str] = []
_held = [0]  # depth of held() blocks: a stop inside one is recorded, raised on leaving the outermost


class Stopped(BaseException):
    """Raised in the main thread by SIGTERM or SIGINT; a BaseException so no handler of user errors swallows it."""


def received() -> str:
    """The name of the stop signal this process received ("SIGTERM"), or "" when none."""
    return _received[0] if _received else ""


def check() -> None:
    """Raise :class:`Stopped` again when a stop signal arrived and its first exception was swallowed."""
    if _received:
        raise Stopped(_received[0])


def stopped_by(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or was raised while handling, a stop (torch wraps it in a RuntimeError)."""
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, (Stopped, KeyboardInterrupt)):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


@contextmanager
def held() -> Iterator[None]:
    """A block a stop must not interrupt (imports of C extensions): the stop is raised when it ends."""
    _held[0] += 1
    try:
        yield
    finally:
        _held[0] -= 1
    if not _held[0]:
        check()


def install() -> None:
    def handler(signum: int, frame: Any) -> None:
        if _received:
            return  # the stop is under way: the run is writing its end
        _received.append(signal.Signals(signum).name)
        if _held[0]:
            return  # raised when the held block ends
        raise Stopped(_received[0])

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # a stop that waited is raised here
