"""A training run's periodic checkpoints and its resume, from the run's side.

:mod:`.resumable` writes, lists and reads the checkpoint files; this module
decides when one is due, puts the run's own bookkeeping in it beside the
trainer's state (the loss it started from, the best validation and the
patience counter, the validations so far, examples seen, time trained),
stops the run cleanly when the disk could not hold the next one, and loads
the newest back into a resumed run. It is kept apart from
:mod:`.training`, whose :class:`~.training.TrainingRun` builds on it, so the
training loop and the end of the run read on their own.
"""

from __future__ import annotations

import time
from typing import Any

from . import resumable
from .config import CheckpointConfig
from .process import RunProcess
from .trainer import RunBookkeeping, Trainer, TrainerState


class DiskFullSoon(Exception):
    """The next checkpoint would not fit on the disk: the run stops cleanly, resumable."""


def _state_bytes(state: Any) -> int:
    """Bytes of the tensors in a state dict (what a checkpoint of it takes on disk, roughly)."""
    import torch

    if torch.is_tensor(state):
        return int(state.numel() * state.element_size())
    if isinstance(state, dict):
        return sum(_state_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(_state_bytes(v) for v in state)
    return 0


class CheckpointedRun(RunProcess):
    """What a training run adds to the process skeleton to checkpoint and resume.

    :class:`~.training.TrainingRun` sets every attribute declared here in its
    ``__init__`` and keeps it up to date while it trains.
    """

    trainer: Trainer | None
    total: int
    lead: bool
    resume_point: int | None
    checkpoints: CheckpointConfig
    trainable_only: bool
    last_checkpoint: float
    last_checkpoint_bytes: int
    disk_full: bool
    save_times: list[float]
    trained_s: float
    train_t0: float
    start_loss: float | None
    best: tuple[float, int] | None
    since_best: int
    evals: list[dict[str, float]]
    examples_seen: int
    eval_times: list[float]
    step_times: list[float]

    def _step(self) -> int:
        """The updates done so far (none before the trainer exists)."""
        return self.trainer.step if self.trainer is not None else 0

    def checkpoint_due(self, step: int) -> bool:
        every = self.checkpoints.every_updates
        minutes = self.checkpoints.every_minutes
        if step >= self.total:
            return False  # the end writes its own
        if every and step % every == 0:
            return True
        return bool(minutes) and time.monotonic() - self.last_checkpoint >= minutes * 60

    def checkpoint(self) -> None:
        """Everything a new process needs to go on exactly from here (every rank's RNG in a distributed run)."""
        tr = self.trainer
        assert tr is not None
        self.phase = "checkpoint"
        t0 = time.perf_counter()
        state = tr.state_dict(self.trainable_only)
        if self.world > 1:
            from . import dist

            state["rng_ranks"] = dist.gather(state["rng"])
        state["run"] = {
            "start_loss": self.start_loss,
            "best": list(self.best) if self.best else None,
            "since_best": self.since_best,
            "evals": self.evals,
            "examples_seen": self.examples_seen,
            "trained_s": time.monotonic() - self.train_t0,
            "eval_times": self.eval_times,
            "step_times": self.step_times[-1000:],
        }
        if self.lead:
            self.room_for(state)
            path, size = resumable.write(self.rdir, tr.step, state, self.checkpoints.keep)
            self.last_checkpoint_bytes = size
            dt = time.perf_counter() - t0
            self.save_times.append(dt)
            self.log(f"checkpoint at update {tr.step}: {path.name}, {size / 2**20:.1f} MiB in {dt:.2f} s")
        self.last_checkpoint = time.monotonic()

    def room_for(self, state: TrainerState) -> None:
        """Stop cleanly before a checkpoint the disk cannot hold, rather than die in the middle of writing it."""
        from .. import machine

        size = self.last_checkpoint_bytes or _state_bytes(state)
        free = machine.free_bytes(self.rdir)
        if free < 2 * size:  # the new file is written beside the newest kept one before the oldest goes
            self.disk_full = True
            then = (
                "resume with `cockpit series --resume` once space is free"
                if resumable.listed(self.rdir)
                else "no checkpoint yet to resume from: start it again once space is free"
            )
            raise DiskFullSoon(
                f"disk full soon: {free / 2**20:,.0f} MiB free where {self.rdir.parent} lives, and a checkpoint takes "
                f"{size / 2**20:,.0f} MiB; stopped cleanly after {self._step()} of {self.total} updates ({then}; "
                "[checkpoints] keep = 1 or trainable_only = true leave less on disk)"
            )

    def restore(self) -> int:
        """Load the newest checkpoint into the trainer and the run's bookkeeping; the update it was taken at."""
        tr = self.trainer
        assert tr is not None
        found = resumable.latest(self.rdir)
        if found is None:
            raise RuntimeError(f"no checkpoint in {resumable.folder(self.rdir)} to resume from")
        step, state = found
        tr.load_state_dict(state)
        run: RunBookkeeping = state.get("run") or {}
        self.start_loss = run.get("start_loss")
        best = run.get("best")
        self.best = (best[0], int(best[1])) if best else None
        self.since_best = int(run.get("since_best") or 0)
        self.evals = list(run.get("evals") or [])
        self.examples_seen = int(run.get("examples_seen") or 0)
        self.trained_s = float(run.get("trained_s") or 0.0)
        self.eval_times = list(run.get("eval_times") or [])
        self.step_times = list(run.get("step_times") or [])
        self.resume_point = step
        self.log(f"resumed from the checkpoint of update {step} of {self.total}: the updates after it are done again")
        return step
