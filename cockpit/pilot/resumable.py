"""What makes a training run resumable: periodic checkpoints, and the run's CSV files cut back to them.

A training run writes ``checkpoints/update-NNNNNNNN.pt`` every ``[checkpoints]
every_updates`` updates and/or ``every_minutes`` minutes (atomically, keeping the
newest ``keep``): the trainer's whole state (model, optimizer, scheduler, grad
scaler, step, every RNG, the data position) and the run's own bookkeeping (the
loss it started from, the best validation and the patience counter, the
validations so far, examples seen, time trained). ``cockpit series --resume``
starts the same run in a new process from its newest checkpoint: the updates
after it are done again, and on the CPU its curve is bit-identical to an
uninterrupted run's.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import fsutil, runs
from . import checkpoint as ck

if TYPE_CHECKING:
    from .trainer import TrainerState

NAME = re.compile(r"^update-(\d{8})\.pt$")


def _num(x: Any) -> str:
    """A CSV cell: empty for absent, 'nan'/'inf' spelled as pandas reads them."""
    if x is None:
        return ""
    if isinstance(x, float):
        return repr(x)
    return str(x)


class Csv:
    """Append rows and flush each one, so a crash keeps every row written so far.

    ``resume_step``: the file is kept up to that step (rows after it belonged to
    updates the resumed run does again) and appended to.
    """

    def __init__(self, path: Path, columns: list[str], resume_step: int | None = None):
        self.columns = list(columns)
        kept: list[list[str]] = []
        if resume_step is not None and path.is_file():
            with open(path, newline="", encoding="utf-8") as fh:
                reader = csv.reader(fh)
                header = next(reader, None)
                if header:
                    self.columns = header
                    for row in reader:
                        try:
                            if row and float(row[0]) <= resume_step:
                                kept.append(row)
                        except ValueError:
                            continue
        text_rows = [self.columns, *kept]
        lines = []
        for r in text_rows:
            buf: list[str] = []
            w = csv.writer(_Lines(buf))
            w.writerow(r)
            lines.append("".join(buf))
        fsutil.write_text(path, "".join(lines))
        self.fh = open(path, "a", newline="", encoding="utf-8", buffering=1)  # noqa: SIM115 - kept open for the run
        self.w = csv.writer(self.fh)

    def row(self, values: Mapping[str, float | None]) -> None:
        self.w.writerow([_num(values.get(c)) for c in self.columns])
        self.fh.flush()

    def close(self) -> None:
        if not self.fh.closed:
            self.fh.close()


class _Lines:
    def __init__(self, out: list[str]):
        self.out = out

    def write(self, s: str) -> int:
        self.out.append(s)
        return len(s)


def folder(rdir: Path) -> Path:
    return Path(rdir) / runs.CHECKPOINTS_DIR


def listed(rdir: Path) -> list[tuple[int, Path]]:
    """(update, path) of the run's periodic checkpoints, oldest first."""
    d = folder(rdir)
    if not d.is_dir():
        return []
    out = []
    for p in d.iterdir():
        m = NAME.match(p.name)
        if m and p.is_file() and not p.is_symlink():
            out.append((int(m.group(1)), p))
    return sorted(out)


def write(rdir: Path, step: int, state: TrainerState, keep: int) -> tuple[Path, int]:
    """Write the checkpoint of ``step`` atomically and drop all but the newest ``keep``; its path and size."""
    d = folder(rdir)
    d.mkdir(exist_ok=True)
    path = d / f"update-{step:08d}.pt"
    size = ck.atomic_save(state, path)
    for _, old in listed(rdir)[: -max(keep, 1)]:
        old.unlink(missing_ok=True)
    return path, size


def latest(rdir: Path) -> tuple[int, TrainerState] | None:
    """The newest checkpoint that loads (a damaged one is skipped for the one before it)."""
    for step, path in reversed(listed(rdir)):
        try:
            return step, ck.safe_load(path)
        except Exception:  # noqa: BLE001 - an unreadable file: try the previous checkpoint
            continue
    return None
