"""The run process of a probe: ``python -m cockpit.pilot RUN_DIR`` for a run whose kind is ``probe``.

It starts the user's command as its own child (same process group, so ``cockpit stop`` ends both;
the kernel kills the child if this process dies), with Cockpit's instrumentation on the child's
``PYTHONPATH`` and a pipe to report on. What the instrumentation reports becomes this run's
``events.jsonl`` (the same events a pilot writes), how the script ended becomes the run's outcome
(:mod:`.judge`), and when a resume command is given, the script is started again from its own
checkpoint and compared with the uninterrupted one (:mod:`.resume`).

This process never touches the GPU: it samples the script's memory (RSS, NVML) for the live charts.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import torch

from .. import events as ev
from ..pilot.meter import Meter
from ..pilot.process import RunProcess
from . import judge, resume
from . import phases as ph
from .channel import Message, Reader
from .config import ProbeConfig, script_name, shown

STOP_GRACE_S = 30.0  # after the probe's stop, the script's own clean-up may take this long before it is killed


class ProbeRun(RunProcess):
    kind = "probe"

    def __init__(self, rdir: Path, writer: ev.EventWriter, rank: int = 0, world: int = 1):
        super().__init__(rdir, writer, rank, world, sample_hz=10.0)
        self.device = torch.device("cpu")  # this process only watches: no CUDA context of its own
        self.meter = Meter(None, emit=writer.emit, sample_hz=10.0)
        self.cfg = ProbeConfig.from_frozen(self.frozen)
        self.script = script_name(self.cfg.command)
        self.proc: subprocess.Popen[bytes] | None = None
        self.open: str | None = None
        self.gated: set[str] = set()

    # ---- the skeleton's hooks

    def start_fields(self) -> dict[str, ev.JSON]:
        return {
            "phases": ph.planned(bool(self.cfg.resume)),
            "probe": {
                "command": shown(self.cfg.command, 400),
                "resume": shown(self.cfg.resume, 400) if self.cfg.resume else "",
                "steps": self.cfg.steps,
                "to_end": self.cfg.to_end,
                "cwd": self.cfg.cwd,
            },
        }

    def body(self) -> ev.Outcome:
        self.log(f"probing `{shown(self.cfg.command)}` in {self.cfg.cwd or os.getcwd()}")
        first = self.watch(self.cfg.command, "probe")
        outcome, gate = judge.outcome(first, self.script)
        if gate is not None:
            self.emit_gate(gate)
        for phase in ph.TRAINING:  # every phase has a row: what the script's end left unreached says why
            if phase not in first.gates and phase not in self.gated:
                self.emit(ev.GATE, **_row(phase, "skipped", f"never reached: {outcome.reason}"))
        if self.cfg.resume:
            outcome = self.resume(first, outcome)
        return outcome

    def finish(self, outcome: ev.Outcome) -> ev.Outcome:
        if self.proc is not None and self.proc.poll() is None:
            self.end_child(self.proc, "the run ended")
        if self.open is not None and outcome.status == ev.Status.STOPPED:
            why = f"stopped by a signal during this phase ({outcome.reason})"
            self.emit_gate(judge.failed_gate(self.open, "stopped", why, why))
        # A probe says so in its stop reason (the campaign table and `cockpit runs` show it).
        return ev.Outcome(outcome.status, outcome.code, f"probe of {self.script}: {outcome.reason}")

    def end_fields(self, outcome: ev.Outcome) -> dict[str, str]:
        return {"run_kind": self.kind}

    # ---- watching one process of the script

    def watch(self, argv: list[str], mode: str) -> judge.Watched:
        w = judge.Watched(mode=mode, argv=list(argv))
        rfd, wfd = os.pipe()
        os.set_blocking(rfd, False)
        t0 = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                env=self.cfg.environment(mode, wfd),
                cwd=self.cfg.cwd or None,
                pass_fds=(wfd,),
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl, async-signal-safe
            )
        except OSError as exc:
            os.close(rfd)
            w.spawn_error = f"{type(exc).__name__}: {exc.strerror or exc}"
            return w
        finally:
            os.close(wfd)
        proc = self.proc
        self.log(f"{mode}: started `{shown(argv)}` (pid {proc.pid})")
        with contextlib.suppress(psutil.Error):
            self.meter.proc = psutil.Process(proc.pid)
        reader = Reader(rfd)
        try:
            while True:
                for m in reader.read():
                    self.on_message(m, w)
                if proc.poll() is not None:
                    for m in reader.read():  # what it wrote before it ended
                        self.on_message(m, w)
                    break
                if w.stopping and w.kill_at and time.monotonic() > w.kill_at:
                    w.killed_by_probe = f"it did not exit within {STOP_GRACE_S:g} s of the probe's stop"
                    self.end_child(proc, w.killed_by_probe)
                if reader.eof:
                    time.sleep(0.1)
                else:
                    select.select([rfd], [], [], 0.2)
        finally:
            os.close(rfd)
        w.returncode = proc.returncode
        w.seconds = time.monotonic() - t0
        self.proc = None
        self.log(f"{mode}: the script's process ended ({_status(proc.returncode)}) after {w.seconds:.1f} s")
        return w

    def on_message(self, m: Message, w: judge.Watched) -> None:
        if m["msg"] == "hello":
            w.hello = m
            pid = m.get("pid")
            if isinstance(pid, int):
                with contextlib.suppress(psutil.Error):
                    self.meter.proc = psutil.Process(pid)  # the interpreter running the script (under a shell, too)
        elif m["msg"] == "event":
            if isinstance(m.get("event"), dict):
                self.relay(m["event"].copy(), w)
        elif m["msg"] == "stopping":
            w.stopping = str(m.get("reason") or "stopped by the probe")
            w.kill_at = time.monotonic() + STOP_GRACE_S
        elif m["msg"] == "internal":
            w.internal = str(m.get("error") or "unknown")
            if self.proc is not None:
                self.end_child(self.proc, "the probe's instrumentation failed")
        elif m["msg"] == "exit":
            w.exit = m

    def relay(self, e: ev.Event, w: judge.Watched) -> None:
        kind = e.pop("kind", "")
        if kind not in ev.KINDS or kind in (ev.RUN_START, ev.RUN_END):
            return
        if kind == ev.PHASE_START:
            w.open = self.open = self.phase = str(e.get("phase"))
            self.meter.phase_name = self.phase
        elif kind == ev.GATE:
            phase = str(e.get("phase"))
            w.gates[phase] = e
            if not str(e.get("message") or "").startswith(ev.NEVER_REACHED):
                w.last_phase = self.phase = phase  # a phase never reached is not where the script was
            if w.open == phase:
                w.open = self.open = None
            self.gated.add(phase)
            self.remedy(e)
        elif kind == ev.STEP:
            w.steps.append(e)
        self.writer.emit(kind, **{k: v for k, v in e.items() if k != "kind"})  # the writer stamps its kind

    def remedy(self, gate: ev.Event) -> None:
        """Out of memory: the pilot's remedy for that phase, naming the inputs that were running."""
        if any(c.get("name") == "memory" and not c.get("ok") for c in gate.get("checks") or []):
            from ..pilot.pilot import oom_remedy

            gate["remedy"] = oom_remedy(str(gate.get("phase")), dict(gate.get("inputs") or {}))

    def emit_gate(self, gate: judge.ProbeGate) -> None:
        self.gated.add(str(gate["phase"]))
        if self.open == gate["phase"]:
            self.open = None
        self.emit(ev.GATE, **gate)

    def end_child(self, proc: subprocess.Popen[bytes], why: str) -> None:
        """SIGTERM the script and every process it started, SIGKILL what is left after 5 s."""
        try:
            root = psutil.Process(proc.pid)
            tree = [*root.children(recursive=True), root]
        except psutil.Error:
            tree = []
        if tree:
            self.log(f"ending the script (pid {proc.pid}, {len(tree)} process{'es' if len(tree) > 1 else ''}): {why}")
        for p in tree:
            with contextlib.suppress(psutil.Error):
                p.terminate()
        _, alive = psutil.wait_procs(tree, timeout=5)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)

    # ---- resume

    def resume(self, first: judge.Watched, outcome: ev.Outcome) -> ev.Outcome:
        saves = (first.exit.get("saves") if first.exit else None) or []
        if outcome.status not in (ev.Status.PASSED, ev.Status.FAILED):
            self.emit(ev.GATE, **_row(ph.RESUME, "skipped", f"not run: the probe ended {outcome.status.value}"))
            return outcome
        if not saves:
            why = "the script saved no checkpoint (torch.save or safetensors) to resume from"
            row = _row(ph.RESUME, "fail", why)
            row["checks"] = [{"name": "checkpoint to resume from", "ok": False, "detail": why}]
            row["remedy"] = ph.REMEDY[ph.RESUME]
            self.emit(ev.GATE, **row)
            return _failed(first, [ph.RESUME])
        self.phase = ph.RESUME
        self.emit(
            ev.PHASE_START,
            phase=ph.RESUME,
            inputs={"command": shown(self.cfg.resume), "from_step": saves[-1].get("step")},
        )
        self.open = ph.RESUME
        self.meter.phase_name = ph.RESUME
        second = self.watch(self.cfg.resume, "resume")
        ended, _ = judge.outcome(second, self.script)
        bad = ended.status not in (ev.Status.PASSED, ev.Status.FAILED)
        if bad or second.hello is None:
            why = ended.reason
            self.emit_gate(judge.failed_gate(ph.RESUME, "new process", why, f"the resumed script: {why}"))
            return ev.Outcome(ended.status, ended.code, f"the resumed script: {why}")
        exact = str(((first.gates.get(ph.STACK) or {}).get("inputs") or {}).get("device", "cpu")) == "cpu"
        g = resume.gate(first, second, self.cfg.compare_steps, exact)
        self.emit_gate(resume.payload(g, second))
        if g.verdict == ev.Verdict.FAIL:
            return _failed(first, [ph.RESUME])
        return outcome


def _row(phase: str, verdict: str, why: str) -> judge.ProbeGate:
    return {
        "phase": phase,
        "verdict": verdict,
        "checks": [],
        "inputs": {},
        "remedy": "",
        "message": why,
        "duration_s": None,
        "mem": {},
    }


def _failed(first: judge.Watched, more: list[str]) -> ev.Outcome:
    failed = [p for p in ph.TRAINING if (first.gates.get(p) or {}).get("verdict") == ev.Verdict.FAIL.value] + more
    return ev.Outcome.of(ev.Status.FAILED, f"gate{'s' if len(failed) > 1 else ''} failed: {', '.join(failed)}")


def _status(rc: int | None) -> str:
    if rc is None:
        return "still running"
    if rc < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


def _die_with_parent() -> None:
    """In the child between fork and exec: the kernel kills it when this run process dies (Linux)."""
    if _PRCTL is not None:
        _PRCTL(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL


def _prctl() -> Any:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()  # loaded before any fork: nothing is imported between fork and exec
