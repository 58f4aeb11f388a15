"""The pilot: every phase of the campaign, in order, each ending in a gate.

A gate is data (see ``cockpit.events``): the phase, its input parameters, the
checks it ran, the measurements taken within the same bounds, a verdict and
the remedy for a failure. The pilot stops at the first failed gate whose
failure makes later phases meaningless; independent gates (data, leakage,
accumulation, overfit) let it go on so one run shows every problem.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import events as ev
from .. import runs
from . import checkpoint as ck
from . import datachecks
from . import dist as dist_
from .meter import Meter, stack_info
from .task import Task, TaskError, load_task
from .train import NonFinite, Trainer, UserCodeError, is_oom, resolve_device, user

REMEDY = {
    "stack": "install a torch build that matches the driver and the task's extensions; set training.device",
    "data": "fix the dataset or the collate function (ids, targets, lengths, masks) before any training",
    "leakage": "split by the task's group unit so no group appears in two splits",
    "forward": "inspect the reduced batch and its values: shapes, dtype, the loss's reduction",
    "backward": "check the graph (detached tensors, frozen parameters), precision and normalisation",
    "update_first": "inspect the optimizer: which parameters it holds, their requires_grad, the learning rate",
    "update_second": "inspect the optimizer and accumulation; compare with the first step's memory",
    "accumulation": "return (sum, count) from the loss so Cockpit normalises over the whole update, "
    "or divide by the accumulation count",
    "worst_case": "the longest batch does not fit: lower the microbatch and raise accumulation, "
    "enable activation checkpointing or bf16, or shorten max_length (and check what that truncates)",
    "overfit": "the model cannot learn a few fixed examples: check labels, the loss, the learning rate ([pilot] overfit_lr), frozen parameters",
    "validation": "separate validation settings from training's: eval mode, no grad, its own microbatch",
    "save": "fix what is saved (model, optimizer, scheduler, scaler, step, RNG, data position) before the series",
    "resume": "fix the checkpoint: everything that changes during training must be saved and restored",
    "export": "fix export or loading: save a state_dict of tensors, rebuild the model from the task, replay",
}

# A failure in one of these does not make the next phases meaningless.
INDEPENDENT = {"data", "leakage", "accumulation", "overfit"}


class Stopped(BaseException):
    """Raised in the main thread by SIGTERM or SIGINT; a BaseException so no handler of user errors swallows it."""


class Abort(Exception):
    def __init__(self, status: ev.Status, code: ev.ExitCode, reason: str):
        self.status, self.code, self.reason = status, code, reason
        super().__init__(reason)


@dataclass
class Gate:
    phase: str
    inputs: dict[str, Any] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    remedy: str = ""
    failed_hard: bool = False
    skipped: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def check(self, name: str, ok: bool, detail: str = "", warn: bool = False) -> bool:
        self.checks.append({"name": name, "ok": bool(ok), "detail": detail, **({"warn": True} if warn else {})})
        return bool(ok)

    def fail(self, name: str, detail: str) -> None:
        self.check(name, False, detail)

    @property
    def verdict(self) -> ev.Verdict:
        if self.skipped:
            return ev.Verdict.SKIPPED
        if any(not c["ok"] and not c.get("warn") for c in self.checks):
            return ev.Verdict.FAIL
        if any(not c["ok"] for c in self.checks):
            return ev.Verdict.WARN
        return ev.Verdict.PASS


def _injected(phase: str) -> str | None:
    """Test hook: COCKPIT_INJECT="oom:worst_case" (or error:, nonfinite:, sleep:) fails that phase."""
    spec = os.environ.get("COCKPIT_INJECT", "")
    for part in spec.split(","):
        kind, _, where = part.partition(":")
        if where == phase:
            return kind
    return None


def _param_fingerprint(model: torch.nn.Module) -> dict[str, tuple[float, float]]:
    with torch.no_grad():
        return {n: (float(p.double().sum()), float(p.double().abs().sum())) for n, p in model.named_parameters()}


def _mib(b: int | None) -> str:
    return "absent" if b is None else f"{b / 2**20:,.1f} MiB"


def _peak(mem: dict[str, Any]) -> int | None:
    t = mem.get("torch")
    return t["peak_allocated"] if t else mem.get("rss_peak")


class Pilot:
    def __init__(self, rdir: Path, writer: ev.EventWriter, rank: int = 0, world: int = 1):
        self.rdir = Path(rdir)
        self.frozen = runs.read_run_toml(self.rdir)
        self.params: dict[str, Any] = dict(self.frozen["params"])
        self.pilot_cfg: dict[str, Any] = dict(self.frozen.get("pilot", {}))
        self.seed = int(self.frozen["run"]["seed"])
        self.writer = writer
        self.rank, self.world = rank, world
        self.device = resolve_device(self.params.get("device"))
        if self.device.type == "cuda" and world > 1:
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        self.meter = Meter(self.device, emit=self.emit)
        self.task: Task | None = None
        self.trainer: Trainer | None = None
        self.splits: dict[str, Any] | None = None
        self.gates: list[Gate] = []
        self.failed: list[str] = []
        self.t0 = time.time()
        self.phase = ""
        self.measures: dict[str, dict[str, Any]] = {}
        self.resume_losses: list[float] = []
        self.dist = world > 1

    def emit(self, kind: str, **payload: Any) -> dict[str, Any]:
        return self.writer.emit(kind, **payload)

    def log(self, message: str, level: str = "info") -> None:
        print(f"[{level}] {message}", flush=True)
        self.emit(ev.LOG, level=level, message=message)

    # ---- running a phase

    def run_phase(self, name: str, inputs: dict[str, Any], body: Callable[[Gate], None]) -> Gate:
        self.phase = name
        g = Gate(name, dict(inputs))
        if self.dist:
            dist_.barrier()  # every rank starts the phase within the same bounds
        self.emit(ev.PHASE_START, phase=name, inputs=g.inputs)
        abort: Abort | None = None
        measure = None
        collective_broken = False
        try:
            with self.meter.measure(name) as measure:
                kind = _injected(name)
                if kind == "oom":
                    raise torch.OutOfMemoryError(f"CUDA out of memory (injected by COCKPIT_INJECT=oom:{name})")
                if kind == "error":
                    raise UserCodeError("loss", RuntimeError(f"injected failure in user code (COCKPIT_INJECT=error:{name})"))
                if kind == "nonfinite":
                    raise NonFinite("loss", float("nan"), None)
                if kind == "sleep" and self._injected_here():
                    time.sleep(3600)
                if kind == "die" and self._injected_here():
                    os._exit(9)
                body(g)
        except Stopped:
            g.fail("stopped", "stopped by a signal during this phase")
            abort = Abort(ev.Status.STOPPED, ev.ExitCode.STOPPED, f"stopped by signal during {name}")
        except NonFinite as exc:
            g.fail("finite", str(exc))
            g.message = f"{exc}; inputs: {_fmt_inputs(g.inputs)}"
            abort = Abort(ev.Status.DIVERGED, ev.ExitCode.NONFINITE, f"non-finite {exc.what} in {name}")
        except UserCodeError as exc:
            tb = "".join(traceback.format_exception(exc.exc))
            print(f"--- exception in the task's {exc.where}() during phase {name} ---\n{tb}", file=sys.stderr, flush=True)
            g.fail("task code", f"{exc.where}() raised {type(exc.exc).__name__}: {exc.exc}")
            g.message = f"the task's {exc.where}() raised {type(exc.exc).__name__}: {exc.exc} ({_user_frame(exc.exc)}); full traceback in output.log"
            abort = Abort(ev.Status.ERROR, ev.ExitCode.USER_ERROR, f"{exc.where}() raised {type(exc.exc).__name__} in {name}")
        except Exception as exc:  # noqa: BLE001 - classified below, never a bare crash
            if self.dist and dist_.is_timeout(exc):
                collective_broken = True
                who = dist_.lagging(self.rdir, self.world, self.rank)
                lost = "closed by peer" in str(exc)
                what = "lost its peer (another rank went away)" if lost else f"timed out after {dist_.timeout_s():g} s"
                g.fail("ranks in step", f"collective {what}: {who}")
                g.message = f"rank {self.rank}: a collective in {name} {what}: {who}"
                g.remedy = "find why that rank stopped (its log in output.log); raise COCKPIT_COLLECTIVE_TIMEOUT_S only if it is just slow"
                abort = Abort(ev.Status.ERROR, ev.ExitCode.RANK_FAILED,
                              f"{who} ({'peer lost' if lost else 'collective timeout'} in {name})")
            elif is_oom(exc):
                g.fail("memory", f"out of memory: {str(exc).splitlines()[0][:300]}")
                g.message = f"out of memory in {name} with inputs {_fmt_inputs(g.inputs)}"
                g.remedy = REMEDY["worst_case"]
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                abort = Abort(ev.Status.OOM, ev.ExitCode.OOM, f"out of memory in {name}")
            else:
                tb = traceback.format_exc()
                print(f"--- internal error during phase {name} ---\n{tb}", file=sys.stderr, flush=True)
                g.fail("cockpit", f"{type(exc).__name__}: {exc}")
                g.message = f"Cockpit failed inside {name}: {type(exc).__name__}: {exc} (a bug in Cockpit; traceback in output.log)"
                abort = Abort(ev.Status.ERROR, ev.ExitCode.INTERNAL, f"internal error in {name}")
        mem = measure.mem if measure is not None else self.meter.read()
        duration = measure.duration_s if measure is not None else 0.0
        self.measures[name] = {"mem": mem, "duration_s": duration, "inputs": g.inputs}
        verdict = g.verdict
        if verdict == ev.Verdict.FAIL and not g.remedy:
            g.remedy = REMEDY.get(name, "")
        if verdict == ev.Verdict.FAIL and not g.message:
            g.message = "; ".join(f"{c['name']}: {c['detail']}" for c in g.checks if not c["ok"] and not c.get("warn"))
        self.emit(
            ev.GATE,
            phase=name,
            verdict=verdict.value,
            checks=g.checks,
            inputs=g.inputs,
            remedy=g.remedy if verdict in (ev.Verdict.FAIL, ev.Verdict.WARN) else "",
            message=g.message,
            duration_s=duration,
            mem=mem,
            **g.extra,
        )
        self.gates.append(g)
        peak = _peak(mem)
        self.log(f"{name}: {verdict.value} in {duration:.2f} s, peak {_mib(peak)}"
                 + (f" — {g.message}" if g.message and verdict != ev.Verdict.PASS else ""),
                 "info" if verdict in (ev.Verdict.PASS, ev.Verdict.SKIPPED) else ("warning" if verdict == ev.Verdict.WARN else "error"))
        hard = abort is not None or (verdict == ev.Verdict.FAIL and name not in INDEPENDENT)
        if self.dist and not collective_broken and dist_.any_rank(hard) and not hard:
            raise Abort(ev.Status.FAILED, ev.ExitCode.GATE_FAILED, f"another rank failed phase {name}")
        if abort is not None:
            raise abort
        if verdict == ev.Verdict.FAIL:
            self.failed.append(name)
            if name not in INDEPENDENT:
                raise Abort(ev.Status.FAILED, ev.ExitCode.GATE_FAILED, f"gate {name} failed")
        return g

    def _injected_here(self) -> bool:
        want = os.environ.get("COCKPIT_INJECT_RANK")
        return want is None or int(want) == self.rank

    # ---- the run

    def run(self) -> int:
        phases = list(ev.PHASES)
        self.emit(
            ev.RUN_START,
            run_id=self.frozen["run"]["id"],
            campaign=self.frozen["run"].get("campaign"),
            variant=self.frozen["run"]["variant"],
            seed=self.seed,
            run_kind="pilot",
            pid=os.getpid(),
            phases=phases,
            params=self.params,
            stack=stack_info(self.device, self.meter.nvml),
            world=self.world,
        )
        self.meter.start_sampler()
        status, code, reason = ev.Status.PASSED, ev.ExitCode.OK, "every gate passed"
        try:
            self.phase_stack()
            self.phase_data()
            self.phase_leakage()
            self.meter.take_baseline()
            self.phase_forward_backward_updates()
            self.phase_accumulation()
            self.phase_worst_case()
            self.phase_overfit()
            self.phase_validation()
            self.phase_save()
            self.phase_resume()
            self.phase_export()
            if self.failed:
                status, code = ev.Status.FAILED, ev.ExitCode.GATE_FAILED
                reason = f"gate{'s' if len(self.failed) > 1 else ''} failed: {', '.join(self.failed)}"
        except Abort as a:
            status, code, reason = a.status, a.code, a.reason
            if self.failed and a.status == ev.Status.FAILED:
                reason = f"gate{'s' if len(self.failed) > 1 else ''} failed: {', '.join(self.failed)}"
        except Stopped:
            status, code, reason = ev.Status.STOPPED, ev.ExitCode.STOPPED, f"stopped by signal after {self.phase}"
        finally:
            self.meter.stop_sampler()
        self.emit(
            ev.RUN_END,
            status=status.value,
            stop_reason=reason,
            phase=self.phase,
            message=reason,
            exit_code=int(code),
            duration_s=time.time() - self.t0,
            inputs=self.measures.get(self.phase, {}).get("inputs", {}),
        )
        return int(code)

    # ---- phases

    def phase_stack(self) -> None:
        def body(g: Gate) -> None:
            info = stack_info(self.device, self.meter.nvml)
            g.check("torch", True, f"torch {info['torch']} ({info['build']} build)")
            if self.device.type == "cuda":
                g.check("cuda", torch.cuda.is_available(), f"CUDA {info['cuda']}, driver {info['driver']}")
            else:
                g.check("device", True, "CPU: GPU counters are recorded as absent")
            if self.params.get("precision") == "bf16" and self.device.type == "cuda":
                g.check("bf16", bool(info["bf16"]), "bf16 supported" if info["bf16"] else "this GPU has no bf16")
            if self.world > 1 and self.device.type == "cuda":
                g.check("nccl", bool(info["nccl"]), "NCCL available" if info["nccl"] else "NCCL missing")
            for ext in self.frozen.get("task", {}).get("extensions", []):
                try:
                    __import__(ext)
                    g.check(f"import {ext}", True, "imported")
                except Exception as exc:  # noqa: BLE001
                    g.check(f"import {ext}", False, f"{type(exc).__name__}: {exc}")
            try:
                self.task = load_task(self.frozen["task"]["entry"], self.rdir.parent.parent)
                g.check("task", True, f"{self.frozen['task']['entry']} ({self.task.kind})")
            except TaskError as exc:
                g.check("task", False, str(exc))
            except Exception as exc:
                raise UserCodeError("task import", exc) from exc
            g.extra["stack"] = info

        self.run_phase("stack", {"device": str(self.device), "precision": self.params.get("precision")}, body)

    def phase_data(self) -> None:
        assert self.task is not None

        def body(g: Gate) -> None:
            self.trainer = Trainer(self.task, self.params, self.seed, self.device, rank=self.rank, world=self.world)
            self.splits = self.trainer.load_data()
            datachecks.data_gate(self, g)

        self.run_phase("data", {"microbatch": self.params["microbatch"], "max_length": self._max_length()}, body)

    def phase_leakage(self) -> None:
        self.run_phase("leakage", {"group_unit": self.task.group_unit}, lambda g: datachecks.leakage_gate(self, g))

    def _max_length(self) -> int | None:
        if self.task and self.task.max_length:
            return int(user("max_length", self.task.max_length, self.params))
        return None

    def _batch_inputs(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"microbatch": len(examples), "ids": [e.get("id") for e in examples][:8]}
        if self.task.length:
            lens = [int(self.task.length(e)) for e in examples]
            out["lengths"] = lens
            ml = self._max_length()
            if ml:
                out["cropped_to"] = ml
        return out

    def _step_event(self, out: dict[str, Any], phase: str) -> None:
        self.emit(ev.STEP, step=out.get("step", self.trainer.step), loss=ev.finite_or_none(out.get("loss")),
                  lr=out.get("lr"), grad_norm=ev.finite_or_none(out.get("grad_norm")), examples=out.get("examples"),
                  phase=phase, duration_s=out.get("duration_s"))

    def phase_forward_backward_updates(self) -> None:
        tr = self.trainer
        state: dict[str, Any] = {}

        def forward(g: Gate) -> None:
            tr.build()
            n_params = sum(p.numel() for p in tr.model.parameters())
            n_train = sum(p.numel() for n, p in tr.model.named_parameters() if n in tr.trainable_names)
            g.inputs.update({"parameters": n_params, "trainable": n_train})
            state["before"] = _param_fingerprint(tr.model)
            mbs = tr.next_microbatches()
            state["mbs"] = mbs
            g.inputs.update(self._batch_inputs(mbs[0]))
            tr.model.train()
            tr.optimizer.zero_grad(set_to_none=True)
            batch = tr.collate(mbs[0])
            if tr.ddp is not None and len(mbs) > 1:
                state["no_sync"] = tr.ddp.no_sync()  # not the last microbatch: no all-reduce yet
                state["no_sync"].__enter__()
            value, count = tr.loss_of(batch)
            state["value"], state["count"] = value, count
            ok_shape = value.dim() == 0
            g.check("loss is a scalar", ok_shape, f"shape {tuple(value.shape)}" + ("" if ok_shape else ": reduce it to one number (mean, or sum with a count)"))
            if count is not None:
                g.check("count", float(count) > 0, f"{float(count):g} items count toward the loss")
            v = float(value.detach())
            if not math.isfinite(v):
                raise NonFinite("loss", v, 1)
            g.check("finite loss", True, f"loss {v / float(count) if count is not None else v:.4f}")
            if tr.task.predict is not None and tr.task.label_key in batch:
                with torch.no_grad():
                    pred = user("predict", tr.task.predict, tr.model, batch)
                lab = batch[tr.task.label_key]
                g.check("prediction shape", tuple(pred.shape) == tuple(lab.shape), f"predictions {tuple(pred.shape)} vs targets {tuple(lab.shape)}")
            datachecks.initial_loss(self, g, v / float(count) if count is not None else v)

        def backward(g: Gate) -> None:
            value, count = state["value"], state["count"]
            n = len(state["mbs"])
            scaled = value if count is not None else value / n
            if tr.scaler is not None:
                scaled = tr.scaler.scale(scaled)
            scaled.backward()
            if "no_sync" in state:
                state.pop("no_sync").__exit__(None, None, None)
            missing, nonfinite, frozen_grad = [], [], []
            for name, p in tr.model.named_parameters():
                if name in tr.trainable_names:
                    if p.grad is None:
                        missing.append(name)
                    elif not bool(torch.isfinite(p.grad).all()):
                        nonfinite.append(name)
                elif p.grad is not None:
                    frozen_grad.append(name)
            total = len(tr.trainable_names)
            g.check("every trainable parameter has a gradient", not missing,
                    f"{total - len(missing)}/{total}" + (f"; none for {', '.join(missing[:4])} (detached from the loss, or unused)" if missing else ""))
            if nonfinite and tr.scaler is None:
                raise NonFinite(f"gradient in {', '.join(nonfinite[:3])}", None, 1)
            g.check("finite gradients", not nonfinite or tr.scaler is not None,
                    "all finite" if not nonfinite else f"non-finite in {', '.join(nonfinite[:3])} (the fp16 scaler will skip this step)")
            g.check("frozen parameters get no gradient", not frozen_grad,
                    "none" if not frozen_grad else f"{', '.join(frozen_grad[:4])} have gradients")
            state["count_total"] = float(count) if count is not None else None
            state["loss_sum"] = float(value.detach()) if count is not None else None
            state["means"] = [float(value.detach())] if count is None else []
            del state["value"]

        def update_first(g: Gate) -> None:
            mbs = state["mbs"]
            n = len(mbs)
            t0 = time.perf_counter()
            for i, mb in enumerate(mbs[1:], start=1):
                batch = tr.collate(mb)
                # under DDP, gradients are all-reduced only on the update's last microbatch
                ctx = tr.ddp.no_sync() if (tr.ddp is not None and i < n - 1) else contextlib.nullcontext()
                with ctx:
                    value, count = tr.loss_of(batch)
                    v = float(value.detach())
                    if not math.isfinite(v):
                        raise NonFinite("loss", v, 1)
                    if count is None:
                        state["means"].append(v)
                        scaled = value / n
                    else:
                        state["loss_sum"] += v
                        state["count_total"] += float(count)
                        scaled = value
                    if tr.scaler is not None:
                        scaled = tr.scaler.scale(scaled)
                    scaled.backward()
            if tr.scaler is not None:
                tr.scaler.unscale_(tr.optimizer)
            if state["count_total"] is not None:
                for p in tr.model.parameters():
                    if p.grad is not None:
                        p.grad.div_(tr._reduce_count(state["count_total"]))
                loss = state["loss_sum"] / state["count_total"]
            else:
                loss = sum(state["means"]) / n
            scale_before = tr.scaler.get_scale() if tr.scaler is not None else None
            out = tr.apply()
            skipped = tr.scaler is not None and tr.scaler.get_scale() < scale_before
            out.update(step=tr.step, loss=loss, examples=sum(len(m) for m in mbs), duration_s=time.perf_counter() - t0)
            self._step_event(out, "update_first")
            after = _param_fingerprint(tr.model)
            before = state["before"]
            changed = [n_ for n_ in tr.trainable_names if after[n_] != before[n_]]
            frozen_changed = [n_ for n_ in after if n_ not in tr.trainable_names and after[n_] != before[n_]]
            unchanged = sorted(set(tr.trainable_names) - set(changed))
            if skipped:
                # fp16: gradients overflowed at the scaler's initial scale, so it skipped this step and
                # halved the scale. Normal for a few steps; a warning, since nothing was updated yet.
                g.check("optimizer step taken", False,
                        f"the fp16 grad scaler skipped the first step (inf/NaN gradients at scale {scale_before:g}; now "
                        f"{tr.scaler.get_scale():g}), so no parameter moved and no optimizer state exists yet; the scaler lowers "
                        "its scale until a step is taken. "
                        "A sum loss needs a lower training.loss_scale_init (e.g. 1024)", warn=True)
            else:
                g.check("targeted parameters changed", not unchanged,
                        f"{len(changed)}/{len(tr.trainable_names)} changed" + (f"; unchanged: {', '.join(unchanged[:4])}" if unchanged else ""))
            g.check("frozen parameters unchanged", not frozen_changed, "unchanged" if not frozen_changed else f"changed: {', '.join(frozen_changed[:4])}")
            g.check("step counted", tr.step == 1, f"step {tr.step}")
            n_state = len(tr.optimizer.state)
            if not skipped:
                g.check("optimizer state allocated", n_state > 0 or (tr.params.get("optimizer") == "sgd" and not tr.params.get("momentum")),
                        f"state for {n_state} parameter tensors")
            g.check("gradient accumulation", True, f"{n} microbatches of {len(mbs[0])} per update")
            self._effective_batch(g, len(mbs[0]), n)
            if self.dist:
                self._ranks_agree(g)
                shards = dist_.gather(sorted(str(e.get("id")) for mb in mbs for e in mb))
                overlap = set()
                for i, a in enumerate(shards):
                    for b in shards[i + 1 :]:
                        overlap |= set(a) & set(b)
                g.check("rank shards disjoint", not overlap,
                        f"{self.world} ranks x {len(shards[0])} examples, no id on two ranks" if not overlap
                        else f"{len(overlap)} examples on several ranks: {sorted(overlap)[:4]}")

        def update_second(g: Gate) -> None:
            t0 = time.perf_counter()
            mbs = tr.next_microbatches()
            g.inputs.update(self._batch_inputs(mbs[0]))
            out = tr.update(mbs)
            out["duration_s"] = time.perf_counter() - t0
            self._step_event(out, "update_second")
            g.check("step counted", tr.step == 2, f"step {tr.step}")
            g.check("finite loss", math.isfinite(out["loss"]), f"loss {out['loss']:.4f}")
            if self.dist:
                self._ranks_agree(g)
            first = _peak(self.measures["update_first"]["mem"])
            g.extra["first_step_peak"] = first

        base = {"microbatch": tr.microbatch, "accumulation": tr.accumulation, "precision": tr.precision}
        self.run_phase("forward", dict(base), forward)
        self.run_phase("backward", dict(base), backward)
        self.run_phase("update_first", dict(base), update_first)
        g2 = self.run_phase("update_second", dict(base), update_second)
        p1, p2 = _peak(self.measures["update_first"]["mem"]), _peak(self.measures["update_second"]["mem"])
        if p1 and p2:
            g2.extra["peak_vs_first"] = p2 / p1

    def _effective_batch(self, g: Gate, micro: int, accum: int) -> None:
        from ..arithmetic import BatchPlan

        declared = int(self.params.get("data_replicas") or 1)
        plan = BatchPlan(micro, accum, self.world, int(self.params.get("model_parallel") or 1))
        g.inputs["examples_per_update"] = plan.examples_per_update
        if declared == self.world:
            g.check("effective batch", True, f"{plan.examples_per_update} = {micro} x {accum} x {self.world} replica(s)")
        else:
            ref = BatchPlan(micro, accum, declared).examples_per_update
            g.check("effective batch", False,
                    f"{plan.examples_per_update} = {micro} x {accum} x {self.world} ranks, but the notebook declares "
                    f"data_replicas = {declared} ({ref} per update): set [batch] data_replicas = {self.world}, "
                    f"or divide accumulation by {self.world // max(declared, 1) or 1} to keep the experiment", warn=True)

    def _ranks_agree(self, g: Gate) -> None:
        prints = dist_.gather(sorted(_param_fingerprint(self.trainer.model).items()))
        same = all(p == prints[0] for p in prints[1:])
        g.check("parameters identical on every rank", same,
                f"{self.world} ranks agree" if same else "ranks hold different parameters after the update")

    def phase_accumulation(self) -> None:
        tr = self.trainer
        tol = float(self.pilot_cfg.get("grad_tolerance", 1e-4))
        if tr.precision != "fp32":
            tol = max(tol, 2e-2)

        def body(g: Gate) -> None:
            n = max(tr.accumulation, 2)
            train = tr.splits["train"]
            # microbatches of different lengths: the case a per-microbatch mean gets wrong
            pool = list(train[: min(len(train), 512)])
            if tr.task.length:
                pool.sort(key=lambda e: tr.task.length(e))
            k = n * tr.microbatch
            step = max(1, len(pool) // k)
            chosen = pool[::step][:k]
            if len(chosen) < k:
                g.skipped = True
                g.check("examples", True, f"only {len(chosen)} examples; need {k}", warn=True)
                return
            mbs = [chosen[i * tr.microbatch : (i + 1) * tr.microbatch] for i in range(n)]
            g.inputs.update({"microbatches": n, "microbatch": tr.microbatch, "tolerance": tol})
            if tr.task.length:
                g.inputs["lengths"] = [[tr.task.length(e) for e in mb] for mb in mbs]
            modes = {m: m.training for m in tr.model.modules()}
            bn = [m for m in tr.model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
            try:
                for m in tr.model.modules():  # dropout off, batch statistics kept as in training
                    if not isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                        m.eval()
                saved_scaler = tr.scaler
                tr.scaler = None
                tr.accumulate(mbs)
                acc = [p.grad.detach().clone() if p.grad is not None else None for p in tr.model.parameters()]
                tr.optimizer.zero_grad(set_to_none=True)
                batch = tr.collate([e for mb in mbs for e in mb])
                value, count = tr.loss_of(batch)
                (value / count if count is not None else value).backward()
                single = [p.grad.detach().clone() if p.grad is not None else None for p in tr.model.parameters()]
            finally:
                tr.scaler = saved_scaler
                tr.optimizer.zero_grad(set_to_none=True)
                for m, mode in modes.items():
                    m.train(mode)
            num = sum(float((a - s).double().pow(2).sum()) for a, s in zip(acc, single, strict=False) if a is not None and s is not None)
            den = sum(float(s.double().pow(2).sum()) for s in single if s is not None)
            rel = math.sqrt(num) / max(math.sqrt(den), 1e-30)
            g.extra["relative_difference"] = rel
            how = "(sum, count) normalised over the update" if count is not None else f"mean per microbatch / {n}"
            ok = rel <= tol
            if not ok and (bn or tr.task.batch_statistics):
                g.check("accumulated == single batch", False,
                        f"differ by {rel:.2e} (relative): legitimate here, the model uses batch statistics "
                        f"({len(bn)} BatchNorm layers) that depend on the microbatch", warn=True)
                return
            detail = f"relative difference {rel:.2e} (tolerance {tol:.0e}); loss {how}"
            if not ok and count is None:
                detail += (": the loss is a mean per microbatch over items of different counts, so each microbatch "
                           "weighs the same whatever its size; return (sum, count) instead")
            g.check("accumulated == single batch", ok, detail)

        self.run_phase("accumulation", {"accumulation": tr.accumulation}, body)

    def worst_batch(self) -> list[dict[str, Any]]:
        tr = self.trainer
        train = tr.splits["train"]
        if tr.task.length:
            ranked = sorted(train, key=lambda e: tr.task.length(e), reverse=True)
        else:
            ranked = list(train)
        return ranked[: tr.microbatch]

    def phase_worst_case(self) -> None:
        tr = self.trainer

        def body(g: Gate) -> None:
            worst = self.worst_batch()
            g.inputs.update(self._batch_inputs(worst))
            t0 = time.perf_counter()
            out = tr.update([worst] * tr.accumulation)
            out["duration_s"] = time.perf_counter() - t0
            self._step_event(out, "worst_case")
            g.check("finite loss", math.isfinite(out["loss"]), f"loss {out['loss']:.4f}")
            typical = _peak(self.measures["update_second"]["mem"])
            g.extra["typical_peak"] = typical

        self.run_phase("worst_case", {"accumulation": tr.accumulation}, body)
        ratio_src = self.measures.get("worst_case", {}).get("mem")
        if ratio_src:
            w, t = _peak(ratio_src), _peak(self.measures["update_second"]["mem"])
            if w and t:
                self.gates[-1].extra["worst_vs_typical"] = w / t

    def phase_overfit(self) -> None:
        n = int(self.pilot_cfg.get("overfit_examples", 16))
        steps = int(self.pilot_cfg.get("overfit_steps", 60))
        self.run_phase("overfit", {"examples": n, "steps": steps}, lambda g: datachecks.overfit_gate(self, g))

    def phase_validation(self) -> None:
        tr = self.trainer

        def body(g: Gate) -> None:
            val = list(tr.splits["val"])
            if tr.task.length:
                val.sort(key=lambda e: tr.task.length(e), reverse=True)  # the longest batch first
                g.inputs["longest"] = tr.task.length(val[0]) if val else 0
            g.inputs.update({"examples": len(val), "eval_microbatch": tr.eval_microbatch})
            modes: list[bool] = []
            grad: list[bool] = []
            def spy(module: Any, args: Any) -> None:
                modes.append(module.training)
                grad.append(torch.is_grad_enabled())

            hook = tr.model.register_forward_pre_hook(spy)
            try:
                out = tr.evaluate("val", val)
                again = tr.evaluate("val", val[: tr.eval_microbatch])
                first = tr.evaluate("val", val[: tr.eval_microbatch])
            finally:
                hook.remove()
            g.check("eval mode", bool(modes) and not any(modes), "model.eval() during validation" if not any(modes) else "model was in training mode")
            g.check("no grad", not any(grad), "torch.no_grad()" if not any(grad) else "gradients were recorded")
            ids = out["ids"]
            want = [e["id"] for e in val]
            dup = len(ids) - len(set(ids))
            missing = set(want) - set(ids)
            g.check("complete outputs", out["n"] == len(val) and not missing and not dup,
                    f"{out['n']}/{len(val)} examples evaluated" + (f"; missing {sorted(missing)[:4]}" if missing else "") + (f"; {dup} duplicated" if dup else ""))
            g.check("finite loss", math.isfinite(out["loss"]), f"val loss {out['loss']:.4f}")
            g.check("deterministic", again["loss"] == first["loss"], "same loss twice (dropout off)" if again["loss"] == first["loss"] else "two evaluations differ: dropout or sampling active in eval")
            g.check("training mode restored", tr.model.training, "back in train mode")
            g.extra["val_loss"] = out["loss"]
            self.emit(ev.EVAL, step=tr.step, loss=ev.finite_or_none(out["loss"]), metrics={})

        self.run_phase("validation", {}, body)

    def phase_save(self) -> None:
        tr = self.trainer

        def body(g: Gate) -> None:
            t0 = time.perf_counter()
            st = tr.state_dict()
            if self.dist:  # one file, saved once, with every rank's RNG state
                st["rng_ranks"] = dist_.gather(st["rng"])
                self.saved = {"step": tr.step, "lr": float(tr.optimizer.param_groups[0]["lr"]), "data": tr.order.state()}
                if self.rank != 0:
                    g.inputs["step"] = tr.step
                    g.check("saved once, by rank 0", True, "this rank's RNG state is in it")
                    return
            size = ck.atomic_save(st, self.rdir / ck.CHECKPOINT)
            g.inputs["step"] = tr.step
            g.check("written", size > 0, f"{size / 2**20:.2f} MiB in {time.perf_counter() - t0:.2f} s")
            back = ck.safe_load(self.rdir / ck.CHECKPOINT)
            want = ["model", "optimizer", "scheduler", "step", "rng", "data"] + (["scaler"] if tr.scaler else [])
            missing = [k for k in want if k not in back or back[k] is None]
            g.check("complete", not missing, "model, optimizer, scheduler, step, RNG, data position" + (", scaler" if tr.scaler else "") if not missing else f"missing {missing}")
            g.check("safe to load", True, "torch.load(weights_only=True)")
            g.extra["bytes"] = size
            self.saved = {"step": tr.step, "lr": float(tr.optimizer.param_groups[0]["lr"]), "data": tr.order.state()}

        self.run_phase("save", {}, body)

    def _child(self, what: str, g: Gate, distributed: bool = False) -> dict[str, Any]:
        env = os.environ.copy()
        name = f"{what}.json"
        if distributed:  # every rank starts its own new process; they form a new group on a new port
            port = dist_.broadcast(dist_.free_port() if self.rank == 0 else None)
            env.update({"MASTER_PORT": str(port), "COCKPIT_CHILD_DIST": "1"})
            env.pop("TORCHELASTIC_USE_AGENT_STORE", None)  # rank 0's child hosts its own store
            if self.rank:
                name = f"{what}.rank{self.rank}.json"
        else:
            env["WORLD_SIZE"], env["RANK"] = "1", "0"
        out = self.rdir / name
        if out.exists():
            out.unlink()
        cmd = [sys.executable, "-m", "cockpit.pilot.child", what, str(self.rdir)]
        t0 = time.perf_counter()
        limit = float(os.environ.get("COCKPIT_CHILD_TIMEOUT_S", "1800"))
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=limit)
        except subprocess.TimeoutExpired as exc:
            g.fail("new process", f"no answer after {limit:g} s (COCKPIT_CHILD_TIMEOUT_S); its output: {(exc.output or '')[-300:]}")
            return {}
        elapsed = time.perf_counter() - t0
        if proc.stdout:
            print(proc.stdout, end="", flush=True)
        if proc.returncode != 0 or not out.exists():
            tail = proc.stdout.strip().splitlines()[-3:] if proc.stdout else []
            g.fail("new process", f"exit {proc.returncode}: {' | '.join(tail)}")
            return {}
        data = json.loads(out.read_text())
        data["elapsed_s"] = elapsed
        g.check("new process", True, f"pid {data.get('pid')} in {elapsed:.1f} s")
        return data

    def phase_resume(self) -> None:
        tr = self.trainer
        k = int(self.pilot_cfg.get("updates_after_resume", 2))

        def body(g: Gate) -> None:
            g.inputs.update({"from_step": self.saved["step"], "updates": k})
            losses = []
            for _ in range(k):
                out = tr.update()
                self._step_event(out, "resume")
                losses.append(out["loss"])
            data = self._child("resume", g, distributed=self.dist)
            if not data:
                return
            g.check("step restored", data["step"] == self.saved["step"], f"step {data['step']} (saved {self.saved['step']})")
            g.check("learning rate restored", data["lr"] == self.saved["lr"], f"lr {data['lr']:.3g}")
            g.check("data position restored", data["data"] == self.saved["data"], f"epoch {data['data']['epoch']}, position {data['data']['cursor']}")
            exact = self.device.type == "cpu"
            got = data["losses"]
            if exact:
                same = got == losses
                detail = "bit-identical: " if same else "differ: "
            else:
                same = len(got) == len(losses) and all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(got, losses, strict=False))
                detail = "within 1e-5 (GPU kernels are not bit-deterministic): " if same else "differ: "
            detail += ", ".join(f"{a:.6f}/{b:.6f}" for a, b in zip(got, losses, strict=False))
            g.check("next losses equal the uninterrupted run", same, detail)
            g.extra["child_peak"] = data.get("peak")

        self.run_phase("resume", {}, body)

    def phase_export(self) -> None:
        tr = self.trainer

        def body(g: Gate) -> None:
            if self.rank != 0:
                g.check("exported once, by rank 0", True, "parameters are identical on every rank")
                return
            adir = self.rdir / ck.ARTIFACT_DIR
            t0 = time.perf_counter()
            manifest = ck.export_artifact(tr.model, adir, {
                "run": self.frozen["run"]["id"], "entry": self.frozen["task"]["entry"], "params": self.params,
                "step": tr.step, "seed": self.seed,
            })
            controls = user("control_inputs", tr.task.control_inputs, self.params) if tr.task.control_inputs else list(tr.splits["val"][:4])
            outputs = control_outputs(tr, controls)
            size = ck.atomic_save({"ids": [c["id"] for c in controls], **outputs}, adir / ck.CONTROL_FILE)
            manifest["files"][ck.CONTROL_FILE] = {"sha256": ck.sha256(adir / ck.CONTROL_FILE), "bytes": size}
            manifest["controls"] = controls
            ck.write_manifest(adir, manifest)
            g.inputs.update({"controls": len(controls), "step": tr.step})
            mb = manifest["files"][ck.MODEL_FILE]["bytes"]
            g.check("artifact written", mb > 0, f"{mb / 2**20:.2f} MiB weights in {time.perf_counter() - t0:.2f} s")
            data = self._child("replay", g)
            if not data:
                return
            g.check("safe reload", data["safe"], "torch.load(weights_only=True), hashes verified")
            g.check("replay reproduces control outputs", data["equal"], data["detail"])

        self.run_phase("export", {}, body)


@torch.no_grad()
def control_outputs(tr: Trainer, controls: list[dict[str, Any]]) -> dict[str, Any]:
    was = tr.model.training
    tr.model.eval()
    try:
        batch = tr.collate(controls)
        value, count = tr.loss_of(batch, net=tr.model)
        loss = float(value) / float(count) if count is not None else float(value)
        pred = user("predict", tr.task.predict, tr.model, batch).detach().cpu() if tr.task.predict else torch.tensor([])
    finally:
        tr.model.train(was)
    return {"loss": torch.tensor(loss, dtype=torch.float64), "predictions": pred}


def _fmt_inputs(inputs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in inputs.items() if k != "ids") or "none"


def _user_frame(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    cockpit_dir = str(Path(__file__).resolve().parent.parent)
    frames = [f for f in tb if not f.filename.startswith(cockpit_dir) or "/tasks/" in f.filename]
    f = (frames or tb)[-1] if (frames or tb) else None
    return f"{f.filename}:{f.lineno} in {f.name}" if f else "no frame"


def install_signal_handlers() -> None:
    def handler(signum: int, frame: Any) -> None:
        raise Stopped(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
