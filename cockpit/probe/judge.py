"""How a probed script ended, as the run's outcome: the same statuses and exit codes as a pilot's. No torch.

The run process knows two things about its script: what the instrumentation said (its gates, and the
``exit`` message its interpreter sends at the end, with the uncaught exception when there was one) and
how the process ended (exit status or signal). :func:`outcome` turns both into one
:class:`cockpit.events.Outcome`, and into a failed gate for the phase the script died in when its
interpreter could not close that phase itself (killed by a signal).
"""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass, field

from .. import events as ev
from . import phases as ph
from .channel import Exit, Hello
from .config import shown

STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")


class ProbeGate(ev.GateExtras):
    """A gate row the run process writes itself (:class:`cockpit.schema.GateFields`): a phase a signal left open,
    a phase the script never reached, the resume gate. No duration or memory when nothing was measured."""

    phase: str
    verdict: str
    checks: list[ev.Check]
    inputs: ev.JSONObject
    remedy: str
    message: str
    duration_s: float | None
    mem: ev.Mem | ev.JSONObject | None


@dataclass
class Watched:
    """One process of the script (the probe, or the resume), as the run process saw it."""

    mode: str
    argv: list[str]
    hello: Hello | None = None
    exit: Exit | None = None  # the interpreter's last message
    returncode: int | None = None
    spawn_error: str = ""
    internal: str = ""  # the instrumentation failed
    stopping: str = ""  # the probe ended the script (why)
    killed_by_probe: str = ""  # the run process had to end it (why)
    kill_at: float = 0.0  # when the run process ends it if it has not exited after the probe's stop
    gates: dict[str, ev.Event] = field(default_factory=dict)  # by phase, as relayed to events.jsonl
    steps: list[ev.Event] = field(default_factory=list)  # its step events
    open: str | None = None  # a phase started and not gated
    last_phase: str | None = None
    seconds: float = 0.0

    @property
    def phase(self) -> str:
        return self.open or (self.exit.get("phase") if self.exit else None) or self.last_phase or "start-up"

    @property
    def signal(self) -> str:
        rc = self.returncode
        if rc is None or rc >= 0:
            return ""
        try:
            return signal.Signals(-rc).name
        except ValueError:
            return f"signal {-rc}"


def failed_gate(phase: str, check: str, detail: str, message: str, remedy: str = "") -> ProbeGate:
    return {
        "phase": phase,
        "verdict": ev.Verdict.FAIL.value,
        "checks": [{"name": check, "ok": False, "detail": detail}],
        "inputs": {},
        "remedy": remedy or ph.REMEDY.get(phase, ""),
        "message": message,
        "duration_s": None,
        "mem": {},
    }


def outcome(w: Watched, script: str) -> tuple[ev.Outcome, ProbeGate | None]:
    """The run's outcome from how the script's process ended, and a gate for a phase left open."""
    at = w.phase
    if w.spawn_error:
        return ev.Outcome.of(
            ev.Status.ERROR,
            f"cannot start `{shown(w.argv)}`: {w.spawn_error}; check [probe] command (the program must exist "
            "and be executable from the folder `cockpit probe` ran in)",
            ev.ExitCode.USAGE,
        ), None
    if w.internal:
        return ev.Outcome.of(
            ev.Status.ERROR,
            f"internal error in Cockpit's probe during {at}: {w.internal} (a bug in Cockpit; traceback in output.log)",
            ev.ExitCode.INTERNAL,
        ), None
    ended = _ended(w, script, at)
    if ended is not None:
        return ended
    if w.hello is None:
        return ev.Outcome.of(
            ev.Status.ERROR,
            f"`{shown(w.argv)}` ended (exit status {w.returncode}) without loading Cockpit's probe: no Python "
            f"process it started imported torch with Cockpit importable. Run the script with the interpreter "
            f"Cockpit is installed in ({sys.executable}); `python -S`/`-I` and launchers that start several "
            "processes (torchrun) are not probed",
            ev.ExitCode.USAGE,
        ), None
    return judge_gates(w, script), None


def _ended(w: Watched, script: str, at: str) -> tuple[ev.Outcome, ProbeGate | None] | None:
    """The outcome when the script ended badly (an exception, a signal, a non-zero status), else None."""
    exit_ = w.exit
    how = exit_.get("how") if exit_ else None
    exc = exit_.get("exception") if exit_ else None
    if exc:
        first = str(exc.get("message") or "").splitlines()[0][:200] if exc.get("message") else exc.get("type")
        if exc.get("oom"):
            return ev.Outcome.of(ev.Status.OOM, f"out of memory in {at}: {first}"), None
        remedy = f": {exc.get('remedy')}" if exc.get("remedy") else ""
        return ev.Outcome.of(
            ev.Status.ERROR, f"{script} raised {exc.get('type')}: {first} in {at} ({exc.get('frame')}){remedy}"
        ), None
    if how == "diverged":
        d = exit_.get("diverged") if exit_ else None
        where, step, value = (d.get("phase", at), d.get("step"), d.get("value")) if d else (at, None, None)
        return ev.Outcome.of(ev.Status.DIVERGED, f"non-finite loss in {where} at step {step} ({value})"), None
    stopped_by_probe = how == "stopped" or bool(w.killed_by_probe and w.stopping)
    if stopped_by_probe:
        return None
    sig = w.signal
    if sig:
        if sig == "SIGKILL":
            why = (
                f"the script was killed (SIGKILL) during {at}: the kernel's out-of-memory killer (host memory; "
                "`dmesg` says) or a kill from outside"
            )
            return ev.Outcome.of(ev.Status.CRASHED, why), _open_gate(w, "script alive", why)
        if sig in STOP_SIGNALS:
            why = f"the script was stopped by {sig} from outside during {at}"
            return ev.Outcome.of(ev.Status.STOPPED, why), _open_gate(w, "stopped", why)
        why = f"the script died of {sig} during {at} (a crash in native code: the end of output.log shows it)"
        return ev.Outcome.of(ev.Status.ERROR, why), _open_gate(w, "script alive", why)
    if w.returncode not in (0, None) and w.hello is not None:
        return ev.Outcome.of(
            ev.Status.ERROR,
            f"{script} exited with status {w.returncode} during {at} without an uncaught exception "
            "(sys.exit or os._exit; its output.log says why)",
        ), None
    return None


KILLED = (
    "find what ended it: `dmesg` names the kernel's out-of-memory killer (then lower the host memory the script "
    "holds: fewer data loader workers, a smaller prefetch, memory-mapped data) or the process that sent the signal"
)


def _open_gate(w: Watched, check: str, why: str) -> ProbeGate | None:
    return failed_gate(w.open, check, why, why, KILLED if check == "script alive" else "") if w.open else None


def judge_gates(w: Watched, script: str) -> ev.Outcome:
    """A script that ran and ended, or was ended by the probe: its gates decide."""
    skipped = ev.Verdict.SKIPPED.value
    forward = w.gates.get(ph.FORWARD)
    if forward is None or forward.get("verdict") == skipped:
        why = str((forward or {}).get("message") or "").removeprefix("never reached: ")
        return ev.Outcome.of(
            ev.Status.FAILED,
            f"{script} ended (exit status {w.returncode}) without a training step the probe could see: no forward "
            "pass with grad enabled reached a model; nothing was measured" + (f" ({why})" if why else ""),
        )
    update = w.gates.get(ph.UPDATE_FIRST)
    if update is None or update.get("verdict") == skipped:
        why = str((update or {}).get("message") or "no update_first row")
        return ev.Outcome.of(ev.Status.FAILED, f"no update seen: {why}")
    failed = [p for p in ph.TRAINING if (w.gates.get(p) or {}).get("verdict") == ev.Verdict.FAIL.value]
    warned = sum(1 for g in w.gates.values() if g.get("verdict") == ev.Verdict.WARN.value)
    exit_ = w.exit
    how = (
        w.stopping
        or (exit_.get("reason") if exit_ else None)
        or f"the script ended after {exit_.get('step', '?') if exit_ else '?'} steps"
    )
    if failed:
        return ev.Outcome.of(ev.Status.FAILED, f"gate{'s' if len(failed) > 1 else ''} failed: {', '.join(failed)}")
    warn = f" ({warned} warning{'s' if warned != 1 else ''})" if warned else ""
    unseen = [p for p, g in w.gates.items() if g.get("verdict") == skipped]
    if unseen:  # not seen is not passed: the reader learns which phases the probe could not vouch for
        return ev.Outcome.of(
            ev.Status.PASSED,
            f"every gate it saw passed{warn}; not seen, so not vouched for: {', '.join(unseen)} (their rows say "
            f"why); {how}",
        )
    return ev.Outcome.of(ev.Status.PASSED, f"every gate passed{warn}; {how}")
