"""A series run: one variant and one seed trained for the campaign's budget, under its stop rules.

``python -m cockpit.pilot RUN_DIR`` calls :func:`run_training` for a run whose
``run.toml`` kind is ``"train"``. The run folder keeps, in formats pandas reads:

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
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from .. import arithmetic, runs
from .. import events as ev
from . import checkpoint as ck
from .gates import Stopped
from .meter import Meter, stack_info
from .task import Task, TaskError, load_task
from .train import NonFinite, Trainer, UserCodeError, is_oom, resolve_device, user

CURVE_FILE = "curve.csv"
EVALS_FILE = "evals.csv"
PREDICTIONS_FILE = "predictions.jsonl"
METRICS_FILE = "metrics.json"
CURVE_COLUMNS = ("step", "loss", "lr", "grad_norm", "examples_seen", "elapsed_s")


class Diverged(Exception):
    """The training loss rose above the divergence factor times its starting value."""


def run_training(rdir: Path, writer: ev.EventWriter, rank: int = 0, world: int = 1) -> int:
    """Train one run to its budget or first stop rule; returns the exit code (``ExitCode``)."""
    return TrainingRun(Path(rdir), writer, rank, world).run()


def _num(x: Any) -> str:
    """A CSV cell: empty for absent, 'nan'/'inf' spelled as pandas reads them."""
    if x is None:
        return ""
    if isinstance(x, float):
        return repr(x)
    return str(x)


class _Csv:
    """Append rows and flush each one, so a crash keeps every row written so far."""

    def __init__(self, path: Path, columns: list[str]):
        self.columns = list(columns)
        self.fh = open(path, "w", newline="", encoding="utf-8", buffering=1)  # noqa: SIM115 - kept open for the run
        self.w = csv.writer(self.fh)
        self.w.writerow(self.columns)
        self.fh.flush()

    def row(self, values: dict[str, Any]) -> None:
        self.w.writerow([_num(values.get(c)) for c in self.columns])
        self.fh.flush()

    def close(self) -> None:
        if not self.fh.closed:
            self.fh.close()


class TrainingRun:
    def __init__(self, rdir: Path, writer: ev.EventWriter, rank: int = 0, world: int = 1):
        self.rdir = rdir
        self.frozen = runs.read_run_toml(rdir)
        self.params: dict[str, Any] = dict(self.frozen["params"])
        self.stop: dict[str, Any] = dict(self.frozen.get("stop", {}))
        self.validation: dict[str, Any] = dict(self.frozen.get("validation", {}))
        self.seed = int(self.frozen["run"]["seed"])
        self.variant = str(self.frozen["run"].get("variant", ""))
        self.writer = writer
        self.rank, self.world = rank, world
        self.lead = rank == 0  # only rank 0 writes the run's files
        self.device = resolve_device(self.params.get("device"))
        if self.device.type == "cuda" and world > 1:
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        self.meter = Meter(self.device, emit=writer.emit, sample_hz=1.0)
        self.task: Task | None = None
        self.trainer: Trainer | None = None
        self.phase = "start-up"
        self.total = 0
        self.examples_seen = 0
        self.start_loss: float | None = None
        self.step_times: list[float] = []
        self.eval_times: list[float] = []
        self.save_time: float | None = None
        self.evals: list[dict[str, Any]] = []
        self.best: tuple[float, int] | None = None  # (val loss, step)
        self.since_best = 0
        self.last_rows: list[dict[str, Any]] | None = None
        self.last_rows_step: int | None = None
        self.curve: _Csv | None = None
        self.evals_csv: _Csv | None = None
        self.t0 = time.time()
        self.train_t0 = time.monotonic()

    # ---- events and logging

    def emit(self, kind: str, **payload: Any) -> dict[str, Any]:
        return self.writer.emit(kind, **payload)

    def log(self, message: str, level: str = "info") -> None:
        print(f"[{level}] {message}", flush=True)
        self.emit(ev.LOG, level=level, message=message)

    # ---- the run

    def run(self) -> int:
        self.emit(
            ev.RUN_START,
            run_id=self.frozen["run"]["id"],
            campaign=self.frozen["run"].get("campaign"),
            variant=self.variant,
            seed=self.seed,
            run_kind="train",
            follows=self.frozen["run"].get("follows", ""),
            pid=os.getpid(),
            phases=["train"],
            params=self.params,
            stop=self.stop,
            validation=self.validation,
            stack=stack_info(self.device, self.meter.nvml),
            world=self.world,
        )
        self.meter.start_sampler()
        status, code, reason = ev.Status.COMPLETED, ev.ExitCode.OK, ""
        measure = None
        try:
            with self.meter.measure("train") as measure:
                self.setup()
                reason = self.train_loop()
        except Stopped as exc:
            status, code = ev.Status.STOPPED, ev.ExitCode.STOPPED
            reason = f"stopped by signal ({exc}) after {self._step()} of {self.total} updates"
        except Diverged as exc:
            status, code, reason = ev.Status.DIVERGED, ev.ExitCode.NONFINITE, str(exc)
        except NonFinite as exc:
            status, code = ev.Status.DIVERGED, ev.ExitCode.NONFINITE
            reason = f"non-finite {exc.what} at update {exc.step} ({exc.value})"
        except UserCodeError as exc:
            tb = "".join(traceback.format_exception(exc.exc))
            print(f"--- exception in the task's {exc.where}() during {self.phase} ---\n{tb}", file=sys.stderr, flush=True)
            status, code = ev.Status.ERROR, ev.ExitCode.USER_ERROR
            reason = f"{exc.where}() raised {type(exc.exc).__name__}: {exc.exc} ({self.phase}, update {self._step()})"
        except TaskError as exc:
            status, code, reason = ev.Status.ERROR, ev.ExitCode.USAGE, f"task: {exc}"
        except Exception as exc:  # noqa: BLE001 - classified here, never a bare crash
            if is_oom(exc):
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                status, code = ev.Status.OOM, ev.ExitCode.OOM
                reason = f"out of memory during {self.phase} at update {self._step() + 1}: {str(exc).splitlines()[0][:200]}"
            else:
                traceback.print_exc()
                status, code = ev.Status.ERROR, ev.ExitCode.INTERNAL
                reason = f"internal error during {self.phase}: {type(exc).__name__}: {exc} (see output.log)"
        finally:
            self.meter.stop_sampler()
        mem = measure.mem if measure is not None and measure.mem else self.meter.read()
        stop_phase = self.phase
        after = self.finish(status, code, reason)
        if after[0] == status:  # the phase the run stopped in, unless the final steps changed the outcome
            self.phase = stop_phase
        status, code, reason = after
        self.write_metrics(status, reason, mem)
        for f in (self.curve, self.evals_csv):
            if f is not None:
                f.close()
        self.emit(
            ev.RUN_END,
            status=status.value,
            stop_reason=reason,
            phase=self.phase,
            message=reason,
            exit_code=int(code),
            duration_s=time.time() - self.t0,
            updates=self._step(),
            mem=mem,
        )
        self.teardown()
        return int(code)

    def _step(self) -> int:
        return self.trainer.step if self.trainer is not None else 0

    def setup(self) -> None:
        self.phase = "setup"
        self.task = load_task(self.frozen["task"]["entry"], self.rdir.parent.parent)
        if self.world > 1:
            import torch.distributed as dist

            if not dist.is_initialized():
                if self.device.type == "cuda":
                    torch.cuda.set_device(self.device)
                dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")
        probe = Trainer(self.task, self.params, self.seed, self.device, rank=self.rank, world=self.world)
        splits = probe.load_data()
        plan_params = dict(self.params)
        plan_params["dataset_size"] = self.params.get("dataset_size") or len(splits["train"])
        budget = arithmetic.budget_from(arithmetic.plan_from(plan_params), plan_params)
        self.total = int(budget.updates)
        self.trainer = Trainer(self.task, self.params, self.seed, self.device, splits=splits,
                               total_updates=self.total, rank=self.rank, world=self.world)
        self.trainer.load_data()
        self.trainer.build()
        if self.world > 1 and self.trainer.ddp is None:  # Trainer.build wraps it itself in newer versions
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.trainer.ddp = DistributedDataParallel(self.trainer.model, device_ids=ids)
        if self.lead:
            self.curve = _Csv(self.rdir / CURVE_FILE, list(CURVE_COLUMNS))
        self.log(
            f"training {self.variant} seed {self.seed} for {self.total} updates "
            f"({budget.basis} budget, {arithmetic.plan_from(plan_params).examples_per_update} examples per update) "
            f"on {self.device}; validation every {self.validation.get('every_updates') or 'never'} updates"
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
        every = int(self.validation.get("every_updates") or 0)
        factor = self.stop.get("divergence_factor")
        patience = self.stop.get("patience")
        wall = self.stop.get("wall_clock_minutes")
        nonfinite = bool(self.stop.get("nonfinite", True))
        self.phase = "train"
        self.emit(ev.PHASE_START, phase="train", inputs={
            "updates": self.total, "microbatch": tr.microbatch, "accumulation": tr.accumulation,
            "precision": tr.precision, "every_updates": every,
        })
        self.train_t0 = time.monotonic()
        while tr.step < self.total:
            if wall and (time.monotonic() - self.train_t0) > float(wall) * 60:
                return f"wall-clock limit: {float(wall):g} min reached after {tr.step} of {self.total} updates"
            t0 = time.perf_counter()
            mbs = tr.next_microbatches()
            tr.model.train()
            out = tr.accumulate(mbs, check_finite=nonfinite and self.world == 1)
            (loss,) = self._agree(out["loss"])
            if nonfinite and not math.isfinite(loss):
                raise NonFinite("loss", loss, tr.step + 1)
            out.update(tr.apply(check_finite=nonfinite))
            duration = time.perf_counter() - t0
            self.step_times.append(duration)
            self.examples_seen += int(out["examples"])
            grad_norm = out.get("grad_norm")
            self.emit(ev.STEP, step=tr.step, loss=ev.finite_or_none(loss), lr=out.get("lr"),
                      grad_norm=ev.finite_or_none(grad_norm), examples=out["examples"],
                      duration_s=duration, phase="train")
            if self.curve is not None:
                self.curve.row({"step": tr.step, "loss": loss, "lr": out.get("lr"), "grad_norm": grad_norm,
                                "examples_seen": self.examples_seen,
                                "elapsed_s": round(time.monotonic() - self.train_t0, 4)})
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
                    return (f"patience: validation loss did not improve for {self.since_best} evaluations "
                            f"(best {best:.4g} at update {at}); stopped after {tr.step} of {self.total} updates")
            self.phase = "train"
        return f"budget reached: {self.total} updates"

    # ---- validation

    def evaluate(self) -> dict[str, Any]:
        tr = self.trainer
        assert tr is not None and self.task is not None
        self.phase = "validation"
        t0 = time.perf_counter()
        out = tr.evaluate("val")
        metrics, rows = self.predict_pass()
        (loss,) = self._agree(out["loss"])
        metric_values = list(metrics.values())
        if metric_values:
            metrics = dict(zip(metrics, self._agree(*metric_values), strict=True))
        dt = time.perf_counter() - t0
        self.eval_times.append(dt)
        self.last_rows, self.last_rows_step = rows, tr.step
        self.emit(ev.EVAL, step=tr.step, loss=ev.finite_or_none(loss),
                  metrics={k: ev.finite_or_none(v) for k, v in metrics.items()}, duration_s=dt, examples=out["n"])
        point = {"step": tr.step, "val_loss": loss, **metrics}
        self.evals.append(point)
        if self.lead:
            if self.evals_csv is None:
                self.evals_csv = _Csv(self.rdir / EVALS_FILE, ["step", "val_loss", *metrics])
            self.evals_csv.row(point)
        if math.isfinite(loss) and (self.best is None or loss < self.best[0]):
            self.best, self.since_best = (loss, tr.step), 0
        else:
            self.since_best += 1
        return point

    @torch.no_grad()
    def predict_pass(self) -> tuple[dict[str, float], list[dict[str, Any]]]:
        """Metrics and one row per validation example from the task's ``predict`` (if it has one).

        Predictions of a causal LM are teacher-forced next tokens at the supervised
        positions, not free generation; each row says so.
        """
        tr, task = self.trainer, self.task
        assert tr is not None and task is not None
        data = list(tr.splits["val"])
        rows: list[dict[str, Any]] = []
        correct = counted = exact = n_rows = 0
        flat = False
        was = tr.model.training
        tr.model.eval()
        try:
            for i in range(0, len(data), tr.eval_microbatch):
                chunk = data[i : i + tr.eval_microbatch]
                batch = tr.collate(chunk)
                ids = list(batch.get("ids", [e.get("id") for e in chunk]))
                if task.predict is None:
                    rows.extend({"id": x, "prediction": None, "why": "the task declares no predict()"} for x in ids)
                    continue
                with tr.autocast():
                    pred = user("predict", task.predict, tr.model, batch)
                lab = batch.get(task.label_key)
                if not torch.is_tensor(pred) or not torch.is_tensor(lab) or tuple(pred.shape) != tuple(lab.shape):
                    for r, x in enumerate(ids):
                        p = pred[r].tolist() if torch.is_tensor(pred) else None
                        rows.append({"id": x, "prediction": p, "why": "predictions not comparable with the targets"})
                    continue
                pred, lab = pred.detach().cpu(), lab.detach().cpu()
                flat = lab.dim() == 1
                counts = lab != task.ignore_index
                hit = (pred == lab) & counts
                correct += int(hit.sum())
                counted += int(counts.sum())
                rows.extend(self._rows(batch, ids, pred, lab, counts))
                per_row = counts.view(len(ids), -1).sum(1)
                exact += int(((hit.view(len(ids), -1).sum(1) == per_row) & (per_row > 0)).sum())
                n_rows += len(ids)
        finally:
            tr.model.train(was)
        metrics: dict[str, float] = {}
        if counted:
            if flat:
                metrics["accuracy"] = correct / counted
            else:
                metrics["token_accuracy"] = correct / counted
                metrics["exact_match"] = exact / max(n_rows, 1)
        return metrics, rows

    def _rows(self, batch: dict[str, Any], ids: list[Any], pred: torch.Tensor, lab: torch.Tensor,
              counts: torch.Tensor) -> list[dict[str, Any]]:
        task = self.task
        assert task is not None
        out = []
        names = task.label_names
        swapped = self._predicted_batch(batch, pred, lab, counts) if task.decode is not None and lab.dim() == 2 else None
        cpu = {k: (v.detach().cpu() if torch.is_tensor(v) else v) for k, v in batch.items()}
        for r, x in enumerate(ids):
            m = counts[r]
            t_ids = lab[r][m].tolist() if lab.dim() > 1 else [int(lab[r])] if bool(m) else []
            p_ids = pred[r][m].tolist() if lab.dim() > 1 else [int(pred[r])] if bool(m) else []
            n_ok = sum(1 for a, b in zip(t_ids, p_ids, strict=True) if a == b)
            row: dict[str, Any] = {"id": x, "n_targets": len(t_ids), "n_correct": n_ok,
                                   "correct": bool(t_ids) and n_ok == len(t_ids),
                                   "target_ids": t_ids, "predicted_ids": p_ids}
            if names and lab.dim() == 1 and t_ids:
                row["target"] = names[t_ids[0]] if 0 <= t_ids[0] < len(names) else t_ids[0]
                row["prediction"] = names[p_ids[0]] if 0 <= p_ids[0] < len(names) else p_ids[0]
            if task.decode is not None:
                row.update(self._decoded(cpu, r, swapped))
            out.append(row)
        return out

    def _predicted_batch(self, batch: dict[str, Any], pred: torch.Tensor, lab: torch.Tensor,
                         counts: torch.Tensor) -> dict[str, Any] | None:
        """The batch with predictions in place of the targets, when the batch follows the causal
        convention (each counted target is the next input token), so ``decode`` renders predictions.
        Rows that do not follow it are left out (None)."""
        task = self.task
        inp = batch.get(task.input_key)
        if not torch.is_tensor(inp) or tuple(inp.shape) != tuple(lab.shape):
            return None
        inp = inp.detach().cpu()
        width = inp.shape[1]
        if width < 2:
            return None
        inner = counts[:, : width - 1]
        mask = batch.get(task.mask_key)
        if torch.is_tensor(mask) and tuple(mask.shape) == tuple(inp.shape):
            inner = inner & mask.detach().cpu()[:, 1:].bool()  # a row's last target has padding after it
        follows = ((inp[:, 1:] == lab[:, : width - 1]) | ~inner).all(1)
        if not bool(follows.any()):
            return None
        new_inp = inp.clone()
        new_lab = lab.clone()
        new_lab[counts] = pred[counts]
        new_inp[:, 1:] = torch.where(inner, pred[:, : width - 1], inp[:, 1:])
        swapped = {k: (v.detach().cpu() if torch.is_tensor(v) else v) for k, v in batch.items()}
        swapped[task.input_key] = new_inp
        swapped[task.label_key] = new_lab
        swapped["_rows_ok"] = follows.tolist()
        return swapped

    def _decoded(self, batch: dict[str, Any], r: int, swapped: dict[str, Any] | None) -> dict[str, Any]:
        task = self.task
        try:
            spans = user("decode", task.decode, batch, r)
        except UserCodeError as exc:
            return {"decode_error": str(exc)}
        out: dict[str, Any] = {}
        if isinstance(spans, str):
            out["text"] = spans
        else:
            out["input"] = "".join(t for t, s in spans if not s)
            out["target"] = "".join(t for t, s in spans if s)
        if swapped is not None and swapped["_rows_ok"][r] and not isinstance(spans, str):
            try:
                pspans = user("decode", task.decode, swapped, r)
                out["prediction"] = "".join(t for t, s in pspans if s)
                out["prediction_mode"] = "teacher-forced next token at each target position"
            except UserCodeError as exc:
                out["decode_error"] = str(exc)
        return out

    # ---- the end

    def finish(self, status: ev.Status, code: ev.ExitCode, reason: str) -> tuple[ev.Status, ev.ExitCode, str]:
        """Final validation and predictions (completed runs), then the final checkpoint (any run with a model)."""
        tr = self.trainer
        if tr is None or tr.model is None:
            return status, code, reason
        try:
            if status == ev.Status.COMPLETED:
                if not self.evals or self.evals[-1]["step"] != tr.step:
                    self.evaluate()
                if self.lead and self.last_rows is not None:
                    self.phase = "predictions"
                    tmp = self.rdir / (PREDICTIONS_FILE + ".tmp")
                    with open(tmp, "w", encoding="utf-8") as fh:
                        for row in self.last_rows:
                            fh.write(json.dumps({"step": self.last_rows_step, **row}, default=str) + "\n")
                    os.replace(tmp, self.rdir / PREDICTIONS_FILE)
            if self.lead:
                self.phase = "save"
                t0 = time.perf_counter()
                state = tr.state_dict()
                state["stop_reason"] = reason
                state["status"] = status.value
                ck.atomic_save(state, self.rdir / ck.CHECKPOINT)
                self.save_time = time.perf_counter() - t0
        except Stopped as exc:
            return ev.Status.STOPPED, ev.ExitCode.STOPPED, f"stopped by signal ({exc}) during {self.phase} after: {reason}"
        except UserCodeError as exc:
            if status == ev.Status.COMPLETED:
                return ev.Status.ERROR, ev.ExitCode.USER_ERROR, f"{exc.where}() raised {type(exc.exc).__name__}: {exc.exc} during {self.phase}"
            self.log(f"after {status.value}: {exc} during {self.phase}", "warn")
        except Exception as exc:  # noqa: BLE001 - keep the outcome already decided, say what else failed
            traceback.print_exc()
            if is_oom(exc) and status == ev.Status.COMPLETED:
                return ev.Status.OOM, ev.ExitCode.OOM, f"out of memory during {self.phase}"
            if status == ev.Status.COMPLETED:
                return ev.Status.ERROR, ev.ExitCode.INTERNAL, f"internal error during {self.phase}: {type(exc).__name__}: {exc}"
            self.log(f"after {status.value}: {type(exc).__name__}: {exc} during {self.phase}", "warn")
        return status, code, reason

    def write_metrics(self, status: ev.Status, reason: str, mem: dict[str, Any]) -> None:
        if not self.lead:
            return
        final = self.evals[-1] if self.evals else {}
        metrics = {
            "final_val_loss": ev.finite_or_none(final.get("val_loss")),
            "best_val_loss": ev.finite_or_none(self.best[0]) if self.best else None,
            "best_step": self.best[1] if self.best else None,
            "updates": self._step(),
            "stop_reason": reason,
            "status": status.value,
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
            "duration_s": time.time() - self.t0,
            "peak": _peak_summary(mem),
        }
        tmp = self.rdir / (METRICS_FILE + ".tmp")
        tmp.write_text(json.dumps(metrics, indent=2, allow_nan=False, default=str))
        os.replace(tmp, self.rdir / METRICS_FILE)

    def teardown(self) -> None:
        if self.world > 1:
            try:
                import torch.distributed as dist

                if dist.is_initialized():
                    dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - the outcome is already recorded
                pass


def _peak_summary(mem: dict[str, Any]) -> dict[str, Any]:
    """The run's peak memory over the whole training, with the counter named (GPU absent on CPU)."""
    t = (mem or {}).get("torch")
    return {
        "peak_allocated": t["peak_allocated"] if t else None,
        "peak_reserved": t["peak_reserved"] if t else None,
        "rss_peak": (mem or {}).get("rss_peak"),
        "counter": "torch peak allocated / reserved" if t else "process RSS (no GPU)",
    }
