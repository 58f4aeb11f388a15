"""Signals that stop a run, installed before anything heavy is imported. No torch.

A SIGTERM or SIGINT raises :class:`Stopped` in the main thread. The handlers
are installed first thing in the run process, so a stop that arrives while
torch is still being imported is a stop (exit 7), not a crash.
"""

from __future__ import annotations

import signal
from typing import Any


class Stopped(BaseException):
    """Raised in the main thread by SIGTERM or SIGINT; a BaseException so no handler of user errors swallows it."""


def install() -> None:
    def handler(signum: int, frame: Any) -> None:
        raise Stopped(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
