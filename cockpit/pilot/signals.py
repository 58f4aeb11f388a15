"""Signals that stop a run, installed before anything heavy is imported. No torch.

A SIGTERM or SIGINT raises :class:`Stopped` in the main thread, once: the
signal is remembered (:func:`received`), so a stop whose exception was
swallowed or converted on its way up (torch turns an exception raised inside
``torch.save`` into a ``RuntimeError``) is still classified as a stop, and a
second signal does not interrupt the run's own clean-up. The launcher starts
the run process with SIGTERM and SIGINT blocked; :func:`install` installs the
handlers and only then unblocks them, so a stop that arrives while Python is
still starting (or torch is being imported) is a stop (exit 7), not a crash.
"""

from __future__ import annotations

import signal
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_received: list[str] = []


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


def install() -> None:
    def handler(signum: int, frame: Any) -> None:
        if _received:
            return  # the stop is under way: the run is writing its end
        _received.append(signal.Signals(signum).name)
        raise Stopped(_received[0])

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # a stop that waited is raised here
