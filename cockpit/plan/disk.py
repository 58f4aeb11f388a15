"""The disk a series needs: checkpoints and exports against the free space of ``runs/``. No torch."""

from __future__ import annotations

from dataclasses import dataclass

from .. import notebook as nbm
from .timing import Timing


@dataclass
class Disk:
    """What a series leaves on the disk that holds ``runs/``, from the sizes the pilots measured.

    At once: each run in progress keeps ``keep`` periodic checkpoints and writes the next beside
    them; for good: each finished run's last checkpoint and exported model, and one archive of
    the chosen model (its artifact)."""

    where: str
    free: int
    keep: int
    lanes: int
    runs: int
    checkpoint: int | None  # bytes, the largest variant's
    export: int
    source: str
    trainable_only: bool = False

    @staticmethod
    def need_for(checkpoint: int, export: int, keep: int, lanes: int, runs: int) -> int:
        return lanes * (keep + 1) * checkpoint + runs * (checkpoint + export) + export

    @property
    def need(self) -> int | None:
        if self.checkpoint is None:
            return None
        return self.need_for(self.checkpoint, self.export, self.keep, self.lanes, self.runs)

    @property
    def fits(self) -> bool:
        return self.need is None or self.need <= self.free

    def words(self) -> str:
        if self.checkpoint is None:
            return "not estimated (no pilot measured a checkpoint's size)"
        need = self.need or 0
        text = (
            f"{_mib(need)} needed of {_mib(self.free)} free where {self.where} lives "
            f"({self.lanes} run{'s' if self.lanes != 1 else ''} at once x ({self.keep} kept + 1 being written) "
            f"x {_mib(self.checkpoint)} per checkpoint + {self.runs} finished run{'s' if self.runs != 1 else ''} "
            f"x ({_mib(self.checkpoint)} last checkpoint + {_mib(self.export)} export) + one archive "
            f"{_mib(self.export)}; sizes from {self.source})"
        )
        return text if self.fits else text + ". " + self.remedy()

    def remedy(self) -> str:
        """The settings that would make it fit, each with what it would need."""
        ck, ex = self.checkpoint or 0, self.export
        ways = []
        if self.keep > 1:
            ways.append(f"[checkpoints] keep = 1 needs {_mib(self.need_for(ck, ex, 1, self.lanes, self.runs))}")
        if self.lanes > 1:
            ways.append(f"--parallel 1 needs {_mib(self.need_for(ck, ex, self.keep, 1, self.runs))}")
        if not self.trainable_only:
            ways.append(
                "[checkpoints] trainable_only = true saves only the parameters that train (an adapter's size; "
                "pilot again to measure it)"
            )
        fit = max(0, (self.free - self.lanes * (self.keep + 1) * ck - ex) // max(1, ck + ex))
        ways.append(f"{fit} run{' fits' if fit == 1 else 's fit'} as set: fewer seeds or variants, or free disk")
        return "Does not fit: " + "; ".join(ways)


def _mib(b: int) -> str:
    return f"{b / 2**30:,.1f} GiB" if b >= 2**30 else f"{b / 2**20:,.1f} MiB"


def disk_for(nb: nbm.Notebook, timings: list[Timing], runs: int, lanes: int, free: int | None = None) -> Disk:
    """The disk ``runs`` training runs need, ``lanes`` at a time, against the free space of ``runs/``."""
    from .. import machine

    where = nb.directory / "runs"
    sized = [t for t in timings if t.checkpoint_bytes is not None]
    big = max(sized, key=lambda t: t.checkpoint_bytes or 0) if sized else None
    return Disk(
        where=str(where),
        free=machine.free_bytes(where) if free is None else free,
        keep=max(1, int(nb.checkpoints.keep)),
        lanes=max(1, min(lanes, runs)) if runs else lanes,
        runs=runs,
        checkpoint=big.checkpoint_bytes if big else None,
        export=max((t.export_bytes or 0) for t in sized) if sized else 0,
        source=big.bytes_source if big else "",
        trainable_only=bool(nb.checkpoints.trainable_only),
    )
