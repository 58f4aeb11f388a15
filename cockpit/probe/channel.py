"""The pipe from the instrumented script to its run process: one JSON object per line. No torch.

The script writes (:class:`Channel`); the run process reads (:func:`messages`). Every message has a
``msg``: ``hello`` (the interpreter took the instrumentation), ``event`` (an event for events.jsonl,
as the run process relays it), ``stopping`` (the probe is ending the script), ``internal`` (the
instrumentation failed: nothing more can be measured) and ``exit`` (how the script ended, as far as
its interpreter knows).
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from .. import events as ev

FD_ENV = "COCKPIT_PROBE_FD"  # the pipe's write end in the script
CONFIG_ENV = "COCKPIT_PROBE"  # what to watch, as JSON (ProbeConfig.child)
CLAIM_ENV = "COCKPIT_PROBE_CLAIMED"  # the pid of the process that took the instrumentation (its children skip)


class Channel:
    """Lines to the run process. A write blocks only while the pipe is full (the run process reads it at once)."""

    def __init__(self, fd: int):
        self.fd = fd
        self._lock = threading.Lock()
        self.broken = False

    def send(self, msg: str, **payload: Any) -> None:
        payload["msg"] = msg
        try:
            line = json.dumps(payload, separators=(",", ":"), allow_nan=False, default=_plain)
        except ValueError:  # a NaN or infinity slipped into a payload: JSON has none
            line = json.dumps(_finite(payload), separators=(",", ":"), default=_plain)
        data = (line + "\n").encode()
        with self._lock:
            view = memoryview(data)
            while view:
                try:
                    n = os.write(self.fd, view)
                except InterruptedError:  # pragma: no cover - PEP 475 retries, kept for clarity
                    continue
                except OSError:
                    self.broken = True  # the run process is gone: nobody records this script any more
                    raise
                view = view[n:]


def _plain(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if hasattr(obj, "__fspath__"):
        return os.fspath(obj)
    return str(obj)


def _finite(x: Any) -> Any:
    if isinstance(x, float):
        return ev.finite_or_none(x)
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


class Reader:
    """Complete messages from the pipe's read end, bounded per line (events.LineSplitter)."""

    def __init__(self, fd: int):
        self.fd = fd
        self._split = ev.LineSplitter()
        self.eof = False
        self.bad = 0

    def read(self) -> list[dict[str, Any]]:
        """What is there now (the fd is non-blocking); an empty list when nothing came."""
        out: list[dict[str, Any]] = []
        while not self.eof:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                self.eof = True
                break
            for raw in self._split.feed(chunk):
                try:
                    m = json.loads(raw)
                except (ValueError, RecursionError):
                    self.bad += 1
                    continue
                if isinstance(m, dict) and isinstance(m.get("msg"), str):
                    out.append(m)
                else:
                    self.bad += 1
        return out
