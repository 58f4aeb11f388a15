"""A training run: one variant and one seed trained for the campaign's budget, under its stop rules.

A series (``cockpit.series``) is a sequence of such runs. ``python -m cockpit.pilot RUN_DIR``
runs :class:`TrainingRun` for a run whose ``run.toml`` kind is ``"train"``. The run folder keeps, in formats pandas reads:

``events.jsonl``      run_start (run_kind "train"), a step event per update, an eval
                      event per validation, run_end with status and stop reason
``curve.csv``         step, loss, lr, grad_norm, examples_seen, elapsed_s (every update)
``evals.csv``         step, val_loss and the task's metrics (every validation)
``predictions.jsonl`` the validation predictions at the end, one example per line
``metrics.json``      final and best validation loss, updates, stop reason, status,
                      mean times per update / validation, save time, examples seen
``checkpoint.pt``     the final state (model, optimizer, scheduler, RNG, data position)

Stop rules come from the frozen ``[stop]`` table, fixed in the notebook before
the series: non-finite loss or gradient and divergence end a run as *diverged*;
the budget, patience and the wall-clock limit end it as *completed* (the stop
reason says which); a signal ends it as *stopped*; out of memory as *oom*; an
exception in the task's code as *error*. Whatever the outcome, the files
written so far stay, so a diverged run keeps its curve.

Periodic checkpoints, the disk check before each and resuming from the newest
are in :mod:`.checkpointing`, which :class:`TrainingRun` builds on.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:  # typing.NotRequired is Python 3.11; annotations here are never evaluated
    from typing import NotRequired

import torch

from .. import arithmetic, fsutil, runs
from .. import events as ev
from . import checkpoint as ck
from . import resumable, returned, signals
from .checkpointing import CheckpointedRun, DiskFullSoon
from .config import CheckpointConfig, StopConfig, ValidationConfig
from .predictions import PredictionRow, predict_pass
from .process import outcome_of
from .signals import Stopped
from .splits import data_revision
from .task import Task, load_task
from .trainer import NonFinite, Trainer


class Diverged(Exception):
    """The training loss rose above the divergence factor times its starting value."""


class Replayed(TypedDict):
    """The trained model exported, reloaded in a new process and replayed on the control inputs."""

    export_s: float
    weights: str
    weights_bytes: int
    equal: bool
    detail: str
    base: NotRequired[dict[str, ev.JSON]]
    generated: NotRequired[list[str]]


class TrainingRun(CheckpointedRun):
    kind = "train"

    def __init__(self, rdir: Path, writer: ev.EventWriter, rank: int = 0, world: int = 1, resume: bool = False):
        super().__init__(rdir, writer, rank, world, sample_hz=1.0)
        self.resume = resume
        points = resumable.listed(self.rdir) if resume else []
        self.resume_point: int | None = points[-1][0] if points else None
        self.checkpoints = CheckpointConfig.from_table(self.frozen.get("checkpoints"))
        self.trainable_only = self.checkpoints.trainable_only
        self.last_checkpoint = time.monotonic()
        self.trained_s = 0.0  # training time before this process (a resumed run counts it toward its clock)
        self.stop = StopConfig.from_table(self.frozen.get("stop"))
        self.validation = ValidationConfig.from_table(self.frozen.get("validation"))
        self.lead = rank == 0  # only rank 0 writes the run's files
        self.task: Task | None = None
        self.trainer: Trainer | None = None
        self.total = 0
        self.examples_seen = 0
        self.start_loss: float | None = None
        self.step_times: list[float] = []
        self.eval_times: list[float] = []
        self.save_time: float | None = None
        self.evals: list[dict[str, float]] = []  # step, val_loss and the metrics of each validation
        self.best: tuple[float, int] | None = None  # (val loss, step)
        self.since_best = 0
        self.last_rows: list[PredictionRow] | None = None
        self.last_rows_step: int | None = None
        self.curve: resumable.Csv | None = None
        self.evals_csv: resumable.Csv | None = None
        self.save_times: list[float] = []
        self.data_revision: dict[str, ev.JSON] = {}
        self.last_checkpoint_bytes = 0
        self.disk_full = False  # a checkpoint would not fit: no final save either
        self.replay: Replayed | None = None
        self.train_t0 = time.monotonic()
        self.mem: ev.Mem | None = None

    # ---- the skeleton's hooks

    def start_fields(self) -> dict[str, ev.JSON]:
        out: dict[str, ev.JSON] = {
            "phases": ["train"],
            "stop": self.frozen.get("stop", {}),  # the tables as run.toml holds them
            "validation": self.frozen.get("validation", {}),
            "checkpoints": self.frozen.get("checkpoints", {}),
        }
        if self.resume:
            out["resumed_from"] = self.resume_point
        return out

    def body(self) -> ev.Outcome:
        measure = None
        try:
            with self.meter.measure("train") as measure:
                self.setup()
                reason = self.train_loop()
        except Diverged as exc:
            return ev.Outcome.of(ev.Status.DIVERGED, str(exc))
        except DiskFullSoon as exc:
            return ev.Outcome.of(ev.Status.STOPPED, str(exc))
        finally:
            self.mem = measure.mem if measure is not None and measure.mem else self.meter.read()
        return ev.Outcome.of(ev.Status.COMPLETED, reason)

    def where(self) -> str:
        return f"during {self.phase}, after {self._step()} of {self.total} updates"

    def end_fields(self, outcome: ev.Outcome) -> ev.RunEndFigures:
        return {"updates": self._step(), "mem": self.mem}

    def finish(self, outcome: ev.Outcome) -> ev.Outcome:
        stop_phase = self.phase
        after = self.final_steps(outcome)
        if after.status == ev.Status.COMPLETED and self.lead:
            import shutil

            shutil.rmtree(resumable.folder(self.rdir), ignore_errors=True)  # a finished run is not resumed
        if after.status == outcome.status:  # the phase the run stopped in, unless the final steps changed the outcome
            self.phase = stop_phase
        self.write_metrics(after, self.mem or self.meter.read())
        for f in (self.curve, self.evals_csv):
            if f is not None:
                f.close()
        return after

    def setup(self) -> None:
        self.phase = "setup"
        self.task = load_task(self.frozen["task"]["entry"], self.rdir.parent.parent)
        if self.world > 1:
            from . import dist

            dist.init()  # the process skeleton has done it already; here for a TrainingRun made directly
        probe = Trainer(self.task, self.params, self.seed, self.device, rank=self.rank, world=self.world)
        splits = probe.load_data()
        plan_params = dict(self.params)
        plan_params["dataset_size"] = self.params.get("dataset_size") or len(splits["train"])
        budget = arithmetic.budget_from(arithmetic.plan_from(plan_params), plan_params)
        self.total = int(budget.updates)
        self.trainer = Trainer(
            self.task,
            self.params,
            self.seed,
            self.device,
            splits=splits,
            total_updates=self.total,
            rank=self.rank,
            world=self.world,
        )
        self.trainer.load_data()
        self.data_revision = data_revision(self.trainer.splits)
        self.trainer.build()
        resume_step = self.restore() if self.resume else None
        if self.lead:
            self.curve = resumable.Csv(self.rdir / runs.CURVE_FILE, list(runs.CURVE_COLUMNS), resume_step)
            if resume_step is not None and (self.rdir / runs.EVALS_FILE).is_file():
                self.evals_csv = resumable.Csv(self.rdir / runs.EVALS_FILE, ["step", "val_loss"], resume_step)
        self.log(
            f"training {self.variant} seed {self.seed} for {self.total} updates "
            f"({budget.basis} budget, {arithmetic.plan_from(plan_params).examples_per_update} examples per update) "
            f"on {self.device}; validation every {self.validation.every_updates or 'never'} updates"
        )

    def _agree(self, *values: float) -> list[float]:
        """Across ranks: the mean of each value, so every rank takes the same stop decision."""
        if self.world <= 1:
            return [float(v) for v in values]
        import torch.distributed as dist

        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return [float(x) / self.world for x in t.tolist()]

    def train_loop(self) -> str:
        tr = self.trainer
        assert tr is not None
        every = self.validation.every_updates
        factor = self.stop.divergence_factor
        patience = self.stop.patience
        wall = self.stop.wall_clock_minutes
        nonfinite = self.stop.nonfinite
        self.phase = "train"
        self.emit(
            ev.PHASE_START,
            phase="train",
            inputs={
                "updates": self.total,
                "microbatch": tr.microbatch,
                "accumulation": tr.accumulation,
                "precision": tr.precision,
                "every_updates": every,
            },
        )
        self.train_t0 = time.monotonic() - self.trained_s
        self.last_checkpoint = time.monotonic()
        while tr.step < self.total:
            signals.check()  # a stop whose exception something on its way up swallowed
            if wall and (time.monotonic() - self.train_t0) > float(wall) * 60:
                return f"wall-clock limit: {float(wall):g} min reached after {tr.step} of {self.total} updates"
            t0 = time.perf_counter()
            mbs = tr.next_microbatches()
            tr.model.train()
            out = tr.accumulate(mbs, check_finite=nonfinite and self.world == 1)
            (loss,) = self._agree(out["loss"])
            if nonfinite and not math.isfinite(loss):
                raise NonFinite("loss", loss, tr.step + 1)
            applied = tr.apply(check_finite=nonfinite)
            duration = time.perf_counter() - t0
            self.step_times.append(duration)
            self.examples_seen += int(out["examples"])
            grad_norm = applied["grad_norm"]
            self.emit(
                ev.STEP,
                step=tr.step,
                loss=ev.finite_or_none(loss),
                lr=applied["lr"],
                grad_norm=ev.finite_or_none(grad_norm),
                examples=out["examples"],
                duration_s=duration,
                phase="train",
            )
            if self.curve is not None:
                self.curve.row(
                    {
                        "step": tr.step,
                        "loss": loss,
                        "lr": applied["lr"],
                        "grad_norm": grad_norm,
                        "examples_seen": self.examples_seen,
                        "elapsed_s": round(time.monotonic() - self.train_t0, 4),
                    }
                )
            if self.start_loss is None:
                self.start_loss = loss
            elif factor and math.isfinite(loss) and loss > float(factor) * self.start_loss:
                raise Diverged(
                    f"diverged: loss {loss:.4g} at update {tr.step} is above {float(factor):g} x its "
                    f"starting value {self.start_loss:.4g}"
                )
            if every and tr.step % every == 0:
                self.evaluate()
                if patience and self.since_best >= int(patience):
                    best, at = self.best or (float("nan"), 0)
                    return (
                        f"patience: validation loss did not improve for {self.since_best} evaluations "
                        f"(best {best:.4g} at update {at}); stopped after {tr.step} of {self.total} updates"
                    )
            if self.checkpoint_due(tr.step):
                self.checkpoint()
            self.phase = "train"
        return f"budget reached: {self.total} updates"

    # ---- validation

    def evaluate(self) -> dict[str, float]:
        tr = self.trainer
        assert tr is not None and self.task is not None
        self.phase = "validation"
        t0 = time.perf_counter()
        out = tr.evaluate("val")
        metrics, rows = predict_pass(tr)
        (loss,) = self._agree(out["loss"])
        metric_values = list(metrics.values())
        if metric_values:
            metrics = dict(zip(metrics, self._agree(*metric_values), strict=True))
        dt = time.perf_counter() - t0
        self.eval_times.append(dt)
        self.last_rows, self.last_rows_step = rows, tr.step
        self.emit(
            ev.EVAL,
            step=tr.step,
            loss=ev.finite_or_none(loss),
            metrics={k: ev.finite_or_none(v) for k, v in metrics.items()},
            duration_s=dt,
            examples=out["n"],
        )
        point: dict[str, float] = {"step": tr.step, "val_loss": loss, **metrics}
        self.evals.append(point)
        if self.lead:
            if self.evals_csv is None:
                self.evals_csv = resumable.Csv(self.rdir / runs.EVALS_FILE, ["step", "val_loss", *metrics])
            self.evals_csv.row(point)
        if math.isfinite(loss) and (self.best is None or loss < self.best[0]):
            self.best, self.since_best = (loss, tr.step), 0
        else:
            self.since_best += 1
        return point

    def final_steps(self, outcome: ev.Outcome) -> ev.Outcome:
        """Final validation and predictions (completed runs), then the final checkpoint (any run with a model)."""
        tr = self.trainer
        status, reason = outcome.status, outcome.reason
        if tr is None or tr.model is None:
            return outcome
        try:
            if status == ev.Status.COMPLETED:
                if not self.evals or self.evals[-1]["step"] != tr.step:
                    self.evaluate()
                elif self.last_rows is None:  # validated at this step before a resume: its predictions again
                    self.last_rows, self.last_rows_step = predict_pass(tr)[1], tr.step
                if self.lead and self.last_rows is not None:
                    self.phase = "predictions"
                    lines = "".join(
                        json.dumps({"step": self.last_rows_step, **row}, default=str) + "\n" for row in self.last_rows
                    )
                    fsutil.write_text(self.rdir / runs.PREDICTIONS_FILE, lines)
            if self.lead and not self.disk_full:
                self.phase = "save"
                self.emit(ev.PHASE_START, phase="save", inputs={"file": runs.CHECKPOINT})  # a kill here says "save"
                t0 = time.perf_counter()
                state = tr.state_dict(self.trainable_only)
                state["stop_reason"] = reason
                state["status"] = status.value
                ck.atomic_save(state, self.rdir / runs.CHECKPOINT)
                self.save_time = time.perf_counter() - t0
            if status == ev.Status.COMPLETED and self.lead:
                self.phase = "export"
                self.replay = self.export_and_replay()
        except Stopped as exc:
            return ev.Outcome.of(ev.Status.STOPPED, f"stopped by signal ({exc}) during {self.phase} after: {reason}")
        except Exception as exc:  # noqa: BLE001 - a completed run ends as what failed; any other keeps its outcome
            failed = outcome_of(exc, f"during {self.phase}", self.params)
            if status == ev.Status.COMPLETED:
                return failed
            self.log(f"after {status.value}: {failed.reason}", "warn")
        return outcome

    def export_and_replay(self) -> Replayed:
        """The trained model as the pilot proved it can be shipped: exported, reloaded in a new process, replayed."""
        from .context import Context, subprocess_child

        tr, task = self.trainer, self.task
        assert tr is not None and task is not None
        adir = self.rdir / runs.ARTIFACT_DIR
        t0 = time.perf_counter()
        controls = returned.control_examples(task, self.params, tr.splits)
        manifest = ck.export_trained(
            tr,
            adir,
            {
                "run": self.frozen["run"]["id"],
                "entry": self.frozen["task"]["entry"],
                "params": self.params,
                "step": tr.step,
                "seed": self.seed,
                "data_revision": self.data_revision,
                "task_code": (self.frozen.get("revisions") or {}).get("task_code"),
            },
            controls,
        )
        export_s = time.perf_counter() - t0
        ctx = Context(
            params=self.params,
            seed=self.seed,
            device=self.device,
            rdir=self.rdir,
            emit=self.emit,
            meter=self.meter,
            frozen=self.frozen,
        )
        data, said = subprocess_child("replay", ctx, False)
        result: Replayed = {
            "export_s": round(export_s, 3),
            "weights": manifest["weights"],
            "weights_bytes": manifest["files"][ck.MODEL_FILE]["bytes"],
            "equal": bool(data and data.get("equal")),
            "detail": (data or {}).get("detail") or said,
        }
        if manifest.get("base"):
            b = manifest["base"]
            result["base"] = {
                "sha256": b.get("sha256"),
                "name_or_path": b.get("name_or_path"),
                "revision": b.get("revision"),
                "values": b.get("values"),
            }
        if data and data.get("generated") is not None:
            result["generated"] = data["generated"]
        self.log(
            f"exported {result['weights_bytes'] / 2**20:.1f} MiB and replayed in a new process: "
            f"{'reproduced' if result['equal'] else 'NOT reproduced'} ({result['detail']})",
            "info" if result["equal"] else "warning",
        )
        return result

    def write_metrics(self, outcome: ev.Outcome, mem: ev.Mem) -> None:
        if not self.lead:
            return
        final = self.evals[-1] if self.evals else {}
        metrics = {
            "final_val_loss": ev.finite_or_none(final.get("val_loss")),
            "best_val_loss": ev.finite_or_none(self.best[0]) if self.best else None,
            "best_step": self.best[1] if self.best else None,
            "updates": self._step(),
            "stop_reason": outcome.reason,
            "status": outcome.status.value,
            "step_time_s": sum(self.step_times) / len(self.step_times) if self.step_times else None,
            "eval_time_s": sum(self.eval_times) / len(self.eval_times) if self.eval_times else None,
            "save_time_s": self.save_time,
            "examples_seen": self.examples_seen,
            "seed": self.seed,
            "variant": self.variant,
            "planned_updates": self.total,
            "final_step": final.get("step"),
            "final_metrics": {k: ev.finite_or_none(v) for k, v in final.items() if k not in ("step", "val_loss")},
            "start_loss": ev.finite_or_none(self.start_loss),
            "duration_s": time.monotonic() - self.t0,
            "peak": _peak_summary(mem),
            "checkpoint_time_s": sum(self.save_times) / len(self.save_times) if self.save_times else None,
            "data_revision": self.data_revision,
            "replay": self.replay,
        }
        fsutil.write_text(self.rdir / runs.METRICS_FILE, json.dumps(metrics, indent=2, allow_nan=False, default=str))


def _peak_summary(mem: ev.Mem) -> ev.PeakSummary:
    """The run's peak memory over the whole training, with the counter named (GPU absent on CPU)."""
    t = mem.get("torch")
    return {
        "peak_allocated": t["peak_allocated"] if t else None,
        "peak_reserved": t["peak_reserved"] if t else None,
        "rss_peak": mem.get("rss_peak"),
        "counter": runs.mem_peak(mem)[1] or "not measured",
    }
