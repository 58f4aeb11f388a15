"""The checkpoint as the probe sees it: the files each save writes, and the save phase's gate.

A checkpoint is often several calls (the model, the optimizer, a scheduler, a config), so the save
phase stays open until the script does anything else, and its gate covers every file written in
between. Every save is also kept by step (``saves``): the resume comparison starts from the first one.
It begins in :mod:`.observer`'s ``save_begin``, which must first end an evaluation.
"""

from __future__ import annotations

import os
import time
from typing import TypedDict

from . import phases as ph
from .bounds import SavedFile
from .reading import file_position, file_size, short_list
from .updates import Updates


class SaveToken(TypedDict):
    """What a save call's start (:meth:`cockpit.probe.observer.Observer.save_begin`) leaves for its end."""

    path: str | None  # the path it was given
    name: str | None  # else the file object's own file, when it names one
    target: object  # what it writes to
    pos: int | None  # the file object's position before the write
    t0: float


class Saving(Updates):
    """The files saved and loaded, and the save phase closed."""

    def save_end(self, token: SaveToken) -> None:
        took = time.perf_counter() - token["t0"]
        path, pos = token["path"], token["pos"]
        if path:
            size = file_size(path)
        else:
            now = file_position(token["target"])
            size = now - pos if pos is not None and now is not None else None
        path = path or token.get("name")  # a file object's own file: named, its size read from its position
        entry: SavedFile = {
            "path": os.path.abspath(path) if path else None,
            "bytes": size,
            "seconds": took,
            "step": self.step,
        }
        if self.burst is not None and self.open is not None and self.open.name == ph.SAVE:
            self.burst["files"].append(entry)
            self.burst["bytes"] += size or 0
            self.burst["seconds"] += took
            self.burst["calls"] += 1
            self.burst["end"] = time.perf_counter()
        self._saved(entry)

    def _saved(self, entry: SavedFile) -> None:
        if entry["step"] < 1:
            return
        if not self.saves or self.saves[-1]["step"] != entry["step"]:
            self.saves.append({"step": entry["step"], "files": []})
        if entry["path"]:
            self.saves[-1]["files"].append(entry["path"])

    def load(self, target: object) -> None:
        if isinstance(target, (str, os.PathLike)):
            self.loaded.append(os.path.abspath(os.fspath(target)))

    def _close_save(self) -> None:
        """The save phase ends where anything else begins: its gate covers every file of the checkpoint."""
        o = self.open
        if o is None or o.name != ph.SAVE or self.in_save:
            return
        b = self.burst or {"files": [], "bytes": 0, "seconds": 0.0, "calls": 0}
        self.burst = None
        o = self.end()
        g = o.gate
        files = b["files"]
        duration = (b.get("end", o.t0) - o.t0) if files else o.measure.duration_s
        g.inputs.update(
            {
                "files": [os.path.basename(f["path"]) if f["path"] else "(a file object)" for f in files][:8],
                "calls": b["calls"],
            }
        )
        empty = [f["path"] for f in files if f["path"] and not f["bytes"]]
        g.check(
            "written",
            bool(files) and not empty,
            f"{b['bytes'] / 2**20:.2f} MiB in {len(files)} file{'s' if len(files) != 1 else ''}, "
            f"{b['seconds']:.2f} s writing ({duration:.2f} s from the first write to the last)"
            if not empty
            else f"empty: {short_list(empty)}",
        )
        g.extra["bytes"] = b["bytes"]
        g.extra["files"] = [f["path"] for f in files if f["path"]]
        self.record(o, duration=duration)
