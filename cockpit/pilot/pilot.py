"""The pilot: the loop that runs every phase in order, measures each within the same bounds, records its gate.

The pilot stops at the first failed gate whose failure makes later phases
meaningless; independent phases (data, leakage, accumulation, overfit) let
it go on so one run shows every problem. Every exception a phase raises
becomes that phase's failed check and the run's outcome, classified once in
:func:`cockpit.pilot.process.outcome_of`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

import torch

from .. import blame, machine, runs
from .. import events as ev
from . import dist as dist_
from . import signals
from .config import PilotConfig
from .context import Context, Measured
from .gate import Gate, Phase
from .phases import PHASES
from .process import Cause, RunProcess, cause_of, outcome_of
from .trainer import NonFinite, UserCodeError


def _injected(phase: str) -> str | None:
    """Test hook: COCKPIT_INJECT="oom:worst_case" (or error:, nonfinite:, sleep:, die:) fails that phase."""
    for part in os.environ.get("COCKPIT_INJECT", "").split(","):
        kind, _, where = part.partition(":")
        if where == phase:
            return kind
    return None


def _inject(ctx: Context, name: str) -> None:
    kind = _injected(name)
    here = os.environ.get("COCKPIT_INJECT_RANK") in (None, str(ctx.rank))
    if kind == "oom":
        raise torch.OutOfMemoryError(f"CUDA out of memory (injected by COCKPIT_INJECT=oom:{name})")
    if kind == "error":
        raise UserCodeError("loss", RuntimeError(f"injected failure in user code (COCKPIT_INJECT=error:{name})"))
    if kind == "nonfinite":
        raise NonFinite("loss", float("nan"), None)
    if kind == "sleep" and here:
        time.sleep(3600)
    if kind == "die" and here:
        os._exit(9)


def _fmt_inputs(inputs: Mapping[str, ev.JSON]) -> str:
    return ", ".join(f"{k}={v}" for k, v in inputs.items() if k != "ids") or "none"


def _mib(b: int | None) -> str:
    return "absent" if b is None else f"{b / 2**20:,.1f} MiB"


class PhaseEnded(Exception):
    """A phase ended the run: its outcome, and whether the collectives can still be trusted."""

    def __init__(self, outcome: ev.Outcome, collective_broken: bool = False):
        self.outcome, self.collective_broken = outcome, collective_broken
        super().__init__(outcome.reason)


def phase_failed(ctx: Context, phase: Phase, g: Gate, exc: BaseException) -> PhaseEnded:
    """Turn what a phase raised into its failed check, its message and the run's outcome."""
    name = phase.name
    at = f"in {name}"
    cause = cause_of(exc)  # the run process's classification; the words here speak of the phase and its gate
    if cause is Cause.STOPPED:  # a stop, even one torch turned into a RuntimeError
        g.fail("stopped", "stopped by a signal during this phase")
        return PhaseEnded(outcome_of(exc, f"during {name}"))
    if isinstance(exc, NonFinite):  # Cause.NON_FINITE
        g.fail("finite", str(exc))
        g.message = f"{exc}; inputs: {_fmt_inputs(g.inputs)}"
        return PhaseEnded(ev.Outcome.of(ev.Status.DIVERGED, f"non-finite {exc.what} {at}"))
    if cause is Cause.USER_CODE:  # raised in the task's code, or on the state it left (blame's one rule)
        return user_failed(ctx, g, exc, at)
    if cause is Cause.TASK:  # the task or the campaign cannot do what the phase needs: the user's to fix
        g.fail("task and data", str(exc))
        g.message = str(exc)
        g.remedy = getattr(exc, "remedy", "") or "fix the task file or [task] entry as the message says"
        return PhaseEnded(ev.Outcome.of(ev.Status.FAILED, f"{exc} ({at})", ev.ExitCode.GATE_FAILED))
    if ctx.dist and cause is Cause.COLLECTIVE:
        who = dist_.lagging(ctx.rdir, ctx.world, ctx.rank)
        lost = "closed by peer" in str(exc)
        what = "lost its peer (another rank went away)" if lost else f"timed out after {dist_.timeout_s():g} s"
        g.fail("ranks in step", f"collective {what}: {who}")
        g.message = f"rank {ctx.rank}: a collective in {name} {what}: {who}"
        g.remedy = "find why that rank stopped (its log in output.log); raise COCKPIT_COLLECTIVE_TIMEOUT_S only if it is just slow"
        return PhaseEnded(
            ev.Outcome.of(
                ev.Status.ERROR,
                f"{who} ({'peer lost' if lost else 'collective timeout'} {at})",
                ev.ExitCode.RANK_FAILED,
            ),
            collective_broken=True,
        )
    if cause is Cause.OOM:
        outcome_of(exc, at)  # frees the allocator's cache
        g.fail("memory", f"out of memory: {str(exc).splitlines()[0][:300]}")
        g.message = f"out of memory in {name} with inputs {_fmt_inputs(g.inputs)}"
        g.remedy = oom_remedy(name, g.inputs)
        return PhaseEnded(ev.Outcome.of(ev.Status.OOM, f"out of memory {at}"))
    outcome = outcome_of(exc, at)  # prints the traceback when it is a bug in Cockpit
    if cause is Cause.DISK_FULL:
        g.fail("disk space", outcome.reason)
        g.message = outcome.reason
        g.remedy = "free space on the disk that holds the campaign's runs/ folder, then pilot again"
        return PhaseEnded(outcome)
    g.fail("cockpit", f"{type(exc).__name__}: {exc}")
    g.message = f"Cockpit failed inside {name}: {type(exc).__name__}: {exc} (a bug in Cockpit; traceback in output.log)"
    return PhaseEnded(ev.Outcome.of(ev.Status.ERROR, f"internal error {at}", outcome.code))


def user_failed(ctx: Context, g: Gate, exc: BaseException, at: str) -> PhaseEnded:
    """The task's code raised (or Cockpit's backward failed on the state it left): the gate names the user's
    file:line and what to do, the run ends as the user's (exit 5), and output.log gets the traceback."""
    err = blame.user_error(exc, ctx.params) or UserCodeError("task code", exc)
    b = blame.of(err, ctx.params)
    outcome_of(err, at, ctx.params)  # prints the task's traceback to output.log
    what = f"{type(err.exc).__name__}: {blame.first_line(err.exc)}"
    camp = campaign_shown(ctx)
    if b.state is not None:  # Cockpit's backward walked into what the task's code kept or changed
        held = _attached(ctx)
        named = f" ({'; '.join(held)})" if held else ""
        attr = held[0].partition(",")[0].rpartition(".")[2] if held else ""
        remedy = b.state.remedy_for(attr) if attr else b.remedy
        said = f"{type(err.exc).__name__}: {blame.first_line(err.exc, 100)}"  # torch's words; the state says why
        g.fail("task code", f"{b.state.label}{named}: the backward of the task's loss raised {said}")
        g.message = f"{b.state.label}{named}: {b.state.what}; the backward raised {said}"
        g.remedy = remedy
        reason = f"{b.state.label}{named} {at}: {remedy}"
        return PhaseEnded(ev.Outcome.of(ev.Status.ERROR, reason, ev.ExitCode.USER_ERROR))
    line = f" at {b.where}" if b.where else ""
    fn = blame.called(err.where)
    fix = f"fix {b.where}" if b.where else f"fix the task's {fn} where it raised"
    defined = getattr(ctx.task, err.where, None) if ctx.task is not None and err.where.isidentifier() else None
    if not b.where and callable(defined):  # a value it returned that Cockpit cannot use: no line of it raised
        line = f" (defined at {blame.defined_at(defined)})"
        fix = f"fix what {blame.defined_at(defined)} returns"
    g.fail("task code", f"{fn} raised {what}{line}")
    g.message = f"the task's {fn} raised {what}{line}; full traceback in output.log"
    g.remedy = "; ".join(
        x
        for x in (
            b.remedy,
            f"{fix} (the traceback in output.log ends there)",
            f"`cockpit check {camp}` imports the task, builds the model and makes one batch before a run",
        )
        if x
    )
    hint = f": {b.remedy}" if b.remedy else ""
    reason = f"{fn} raised {type(err.exc).__name__} {at}{line}{hint}"
    return PhaseEnded(ev.Outcome.of(ev.Status.ERROR, reason, ev.ExitCode.USER_ERROR))


def campaign_shown(ctx: Context) -> str:
    """The campaign folder of the run, as the user would type it here (CAMPAIGN when the run has none)."""
    camp = ctx.rdir.parent.parent
    if ctx.rdir.parent.name != runs.RUNS_DIR or not (camp / "campaign.toml").is_file():
        return "CAMPAIGN"
    return blame.shown(str(camp))


def _attached(ctx: Context) -> list[str]:
    """The model's attributes that hold a tensor still attached to a graph (state kept across batches)."""
    from . import carried

    model = ctx.trainer_.model if ctx.trainer_ is not None else None
    if model is None:
        return []
    try:
        return carried.attached(model)
    except Exception:  # noqa: BLE001 - naming the tensor is a courtesy; the failure is said without it
        return []


def oom_remedy(phase: str, inputs: Mapping[str, ev.JSON]) -> str:
    """What frees memory depends on what was running: each phase its own remedy, naming its inputs."""
    running = _fmt_inputs(inputs)
    activations = (
        "lower the microbatch and raise accumulation to keep the update (activations shrink with the "
        "microbatch), enable activation checkpointing or bf16, or shorten max_length (and check what that "
        "truncates)"
    )
    by_phase = {
        "forward": f"the forward pass of one microbatch ({running}) does not fit: {activations}",
        "backward": f"the backward pass ({running}) holds activations and gradients: {activations}; "
        "or train fewer parameters (freeze some, or an adapter) to drop their gradients",
        "update_first": f"the first optimizer step ({running}) allocates the optimizer state (Adam keeps two "
        "copies the size of the trainable parameters), and accumulation does not help: weights and optimizer state "
        "stay whatever the microbatch. Use a lighter optimizer (SGD with momentum, Adafactor, 8-bit Adam), shard "
        "the state across GPUs (FSDP, ZeRO), train fewer parameters (an adapter), or rent a bigger GPU",
        "update_second": f"a later update ({running}) with the optimizer state resident does not fit: {activations}; "
        "the state itself shrinks only with a lighter optimizer, sharding or fewer trainable parameters",
        "worst_case": f"the longest batch the campaign can produce ({running}) does not fit: {activations}",
        "accumulation": f"the accumulation check runs all microbatches of one update as one batch ({running}): "
        "the pilot's own comparison, not training, needing accumulation x the activations at once; pilot this "
        "variant with a smaller accumulation (--set accumulation=2), or on a larger GPU",
        "overfit": f"the overfit check builds a second copy of the model ({running}): it needs room for two models; "
        "lower [pilot] overfit_examples, or pilot on a larger GPU than training needs",
        "validation": f"validation ({running}) does not fit at the eval microbatch and the longest validation "
        "example: lower [batch] eval_microbatch, shorten max_length for evaluation, and check that validation runs "
        "under torch.no_grad() (the gate checks it)",
        "save": f"saving ({running}) copies the state to host memory: free host memory, or save the model and the "
        "optimizer state in shards instead of one dict",
        "resume": f"the resumed process ({running}) does not fit beside the pilot: the same remedies as the update",
        "export": f"the export ({running}) copies the weights to host memory and reloads them in a new process: free "
        "host memory, or export in shards",
    }
    return by_phase.get(phase, f"{phase} ({running}) does not fit: {activations}")


def run_phase(ctx: Context, phase: Phase) -> tuple[Gate, PhaseEnded | None]:
    """Run one phase within the meter's bounds and record its gate; never raises for a failure."""
    name = phase.name
    ctx.phase = name
    g = Gate(name, dict(phase.inputs(ctx)))
    if ctx.dist:
        dist_.barrier()  # every rank starts the phase within the same bounds
    ctx.emit(ev.PHASE_START, phase=name, inputs=g.inputs)
    ended: PhaseEnded | None = None
    measure = None
    cpu = machine.CpuWatch.start()
    try:
        with ctx.meter.measure(name) as measure:
            _inject(ctx, name)
            phase.run(ctx, g)
    except (Exception, signals.Stopped, KeyboardInterrupt) as exc:
        ended = phase_failed(ctx, phase, g, exc)
    mem = measure.mem if measure is not None and measure.mem else ctx.meter.read()
    duration = measure.duration_s if measure is not None else 0.0
    g.extra["machine"] = load = cpu.stop()
    if ctx.device.type == "cuda":
        held: dict[int, int] = {}
        for p in machine.gpu_others():
            held[p["gpu"]] = held.get(p["gpu"], 0) + int(p.get("used") or 0)
        load["gpu_others"] = {str(k): v for k, v in held.items()}  # other processes' memory, per GPU, at the end
    if load["busy"]:
        g.extra["busy"] = machine.busy_words(load)
    ctx.measures[name] = Measured(mem, duration, g.inputs)
    if ended is None and phase.after is not None:
        phase.after(ctx, g, mem)
    verdict = g.verdict
    if verdict == ev.Verdict.FAIL and not g.remedy:
        g.remedy = phase.remedy
    if verdict == ev.Verdict.FAIL and not g.message:
        g.message = "; ".join(f"{c['name']}: {c['detail']}" for c in g.failures())
    gate: ev.GateEvent = {
        "phase": name,
        "verdict": verdict.value,
        "checks": g.checks,
        "inputs": g.inputs,
        "remedy": g.remedy if verdict in (ev.Verdict.FAIL, ev.Verdict.WARN) else "",
        "message": g.message,
        "duration_s": duration,
        "mem": mem,
        **ev.finite_figures(g.extra),
    }
    ctx.emit(ev.GATE, **gate)
    peak = runs.mem_peak(mem)[0]
    level = (
        "info"
        if verdict in (ev.Verdict.PASS, ev.Verdict.SKIPPED, ev.Verdict.NA)
        else ("warning" if verdict == ev.Verdict.WARN else "error")
    )
    ctx.log(
        f"{name}: {verdict.value} in {duration:.2f} s, peak {_mib(peak)}"
        + (f" — {g.message}" if g.message and verdict != ev.Verdict.PASS else ""),
        level,
    )
    return g, ended


def run_phases(ctx: Context, phases: tuple[Phase, ...] = PHASES) -> tuple[ev.Outcome, list[Gate]]:
    """Every phase in order; the outcome of the pilot and the gates it recorded."""
    failed: list[str] = []
    gates: list[Gate] = []

    def gate_failures(default: str) -> str:
        return f"gate{'s' if len(failed) > 1 else ''} failed: {', '.join(failed)}" if failed else default

    for phase in phases:
        g, ended = run_phase(ctx, phase)
        gates.append(g)
        if ended is None and signals.received():  # a stop that a phase swallowed on its way up
            return ev.Outcome.of(
                ev.Status.STOPPED, f"stopped by signal ({signals.received()}) after {phase.name}"
            ), gates
        fail = g.verdict == ev.Verdict.FAIL
        hard = ended is not None or (fail and not phase.independent)
        if ctx.dist and not (ended and ended.collective_broken) and dist_.any_rank(hard) and not hard:
            return ev.Outcome.of(ev.Status.FAILED, f"another rank failed phase {phase.name}"), gates
        if ended is not None:
            return ended.outcome, gates
        if fail:
            failed.append(phase.name)
            if not phase.independent:
                return ev.Outcome.of(ev.Status.FAILED, gate_failures(f"gate {phase.name} failed")), gates
    if failed:
        return ev.Outcome.of(ev.Status.FAILED, gate_failures("")), gates
    return ev.Outcome.of(ev.Status.PASSED, "every gate passed"), gates


class PilotRun(RunProcess):
    """The pilot process: the context from run.toml, then every phase."""

    kind = "pilot"

    def __init__(self, rdir: Path, writer: ev.EventWriter, rank: int = 0, world: int = 1):
        super().__init__(rdir, writer, rank, world)
        self.ctx = Context(
            params=self.params,
            seed=self.seed,
            device=self.device,
            rdir=self.rdir,
            emit=self.emit,
            meter=self.meter,
            pilot_cfg=PilotConfig.from_table(self.frozen.get("pilot")),
            frozen=self.frozen,
            rank=rank,
            world=world,
        )

    def start_fields(self) -> dict[str, ev.JSON]:
        return {"phases": [p.name for p in PHASES]}

    def body(self) -> ev.Outcome:
        outcome, _ = run_phases(self.ctx)
        return outcome

    def current_phase(self) -> str:
        return self.ctx.phase or "start-up"

    def where(self) -> str:
        return f"after {self.current_phase()}"

    def end_fields(self, outcome: ev.Outcome) -> ev.RunEndFigures:
        m = self.ctx.measures.get(self.ctx.phase)
        return {"inputs": m.inputs if m is not None else {}}
