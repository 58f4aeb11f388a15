"""The value checks of a parsed notebook: ranges, choices, ids, references between sections.

Every number is checked for finiteness and for an upper bound (a microbatch of
10^12 or ``epochs = inf`` is refused here, not found late inside a run), and
every key a variant's ``set`` or ``[task.params]`` can give the run is checked
by the same rule as the ``[training]`` or ``[batch]`` key it replaces
(:data:`PARAM_RULES`), so a wrong type never reaches a run.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

from .model import (
    CAMPAIGN_KINDS,
    DECISION_KINDS,
    HELD,
    PRECISIONS,
    RUN_KINDS,
    STRATEGIES,
    BatchSpec,
    Notebook,
    TrainingSpec,
)

# Run ids are made by Cockpit: the letter r and 4 to 9 digits (cockpit.runs.RUN_ID, repeated here so
# the notebook needs nothing from the run folders). An id such as "../x" could name a path outside runs/.
RUN_ID = re.compile(r"^r[0-9]{4,9}$")
RUN_STATUSES = (
    "created",
    "running",
    "passed",
    "failed",
    "completed",
    "diverged",
    "oom",
    "error",
    "stopped",
    "crashed",
)
MAX_SEED = 2**32 - 1  # numpy's limit; torch's is larger
MAX_ID = 100
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def suggest(key: str, options: Any) -> str:
    """A did-you-mean for a key that is not one of ``options``."""
    import difflib

    close = difflib.get_close_matches(key, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _num(x: Any) -> TypeGuard[float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _int(x: Any) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(frozen=True)
class Rule:
    """What one parameter may hold: a whole number or a number within bounds, true/false, or one of choices."""

    kind: str  # "int", "num", "bool", "choice"
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False  # lo itself excluded
    choices: tuple[str, ...] = ()

    def problem(self, value: Any) -> str | None:
        """None when ``value`` is fine, else what is wrong with it (for "<key>: is X; <problem>")."""
        if self.kind == "bool":
            return None if isinstance(value, bool) else "it must be true or false"
        if self.kind == "choice":
            return None if value in self.choices else f"use one of {', '.join(self.choices)}"
        what = "a whole number" if self.kind == "int" else "a number"
        if self.lo == 0 and self.lo_open:
            what = f"a positive {what.split()[-1] if self.kind == 'num' else 'whole number'}"
        if (self.kind == "int" and not _int(value)) or (self.kind == "num" and not _num(value)):
            return f"it must be {what}{self._range()}"
        if not math.isfinite(value):
            return f"it must be finite: {what}{self._range()}"
        if self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo)):
            return f"it must be {what}{self._range()}"
        if self.hi is not None and value > self.hi:
            return f"it must be {what}{self._range()}"
        return None

    def _range(self) -> str:
        positive = self.lo == 0 and self.lo_open  # said by "a positive number"
        lo = "" if self.lo is None or positive else f"{'>' if self.lo_open else '>='} {_fmt(self.lo)}"
        hi = "" if self.hi is None else f"<= {_fmt(self.hi)}"
        both = " and ".join(x for x in (lo, hi) if x)
        return f" {both}" if both else ""


def _fmt(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def Int(lo: float, hi: float) -> Rule:  # noqa: N802 - reads as a type in the table below
    return Rule("int", lo, hi)


def Num(lo: float, hi: float, lo_open: bool = False) -> Rule:  # noqa: N802
    return Rule("num", lo, hi, lo_open)


BOOL = Rule("bool")

# Every key of [training] and [batch]: the rule for the section's own value, for a variant's ``set``
# and for a [task.params] key of the same name (which replaces it in the run's parameters).
PARAM_RULES: dict[str, Rule] = {
    "microbatch": Int(1, 1_000_000),
    "accumulation": Int(1, 1_000_000),
    "data_replicas": Int(1, 100_000),
    "model_parallel": Int(1, 100_000),
    "dataset_size": Int(1, 10**13),
    "updates": Int(1, 10**10),
    "epochs": Num(0, 1_000_000, lo_open=True),
    "examples": Int(1, 10**15),
    "drop_last": BOOL,
    "eval_microbatch": Int(1, 1_000_000),
    "lr": Num(0, 1_000, lo_open=True),
    "optimizer": Rule("choice", choices=("adamw", "sgd")),
    "weight_decay": Num(0, 1_000),
    "momentum": Num(0, 1),
    "schedule": Rule("choice", choices=("constant", "cosine", "linear")),
    "warmup_updates": Int(0, 10**10),
    "grad_clip": Num(0, 1e9),  # 0: no clipping
    "precision": Rule("choice", choices=PRECISIONS),
    "loss_scale_init": Num(0, 2.0**64, lo_open=True),
    "activation_checkpointing": BOOL,
    "device": Rule("choice", choices=("auto", "cpu", "cuda")),
}


# The names a [task.params] key may not take: every key of [training] and [batch], which the task receives in the
# same flat ``params`` (docs/notebook.md lists them).
RESERVED: frozenset[str] = frozenset(PARAM_RULES)
BUDGETS = ("updates", "epochs", "examples")


def _field_names(cls: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def check_values(nb: Notebook, problems: list[str]) -> None:
    typed = {p.split(":", 1)[0] for p in problems}  # paths whose type was already reported

    def bad(path: str, msg: str) -> None:
        if path not in typed:
            problems.append(f"{path}: {msg}")

    def rule(path: str, value: Any, r: Rule, optional: bool = True) -> None:
        if value is None and optional:
            return
        why = r.problem(value)
        if why is not None:
            bad(path, f"is {_show(value)}; {why}")

    def num(path: str, value: Any, lo: float, hi: float, lo_open: bool = False) -> None:
        rule(path, value, Num(lo, hi, lo_open))

    def whole(path: str, value: Any, lo: float, hi: float) -> None:
        rule(path, value, Int(lo, hi))

    c = nb.campaign
    if isinstance(c.name, str) and not c.name.strip():
        bad("campaign.name", "must not be empty")
    if c.held_constant not in HELD:
        bad("campaign.held_constant", f"is {c.held_constant!r}; use one of {', '.join(HELD)}")
    num("campaign.quality_target", c.quality_target, -1e12, 1e12)
    whole("campaign.protocol_revision", c.protocol_revision, 1, 1_000_000)
    if c.kind not in CAMPAIGN_KINDS:
        bad(
            "campaign.kind", f"is {_show(c.kind)}; use task (the default) or probe (made by `cockpit probe -- COMMAND`)"
        )
    elif c.kind == "probe" and (nb.probe is None or not nb.probe.command):
        bad(
            "campaign.kind",
            'is "probe" but [probe] has no command; give it as command = ["python", "train.py"] '
            "or run `cockpit probe CAMPAIGN -- python train.py`",
        )
    if c.kind != "probe":  # a probe campaign has no [task], [batch], [training] or [variants]: the script's own
        _task_and_settings(nb, bad, rule)
    _rest(nb, bad, num, whole)


def _task_and_settings(nb: Notebook, bad: Callable[[str, str], None], rule: Callable[..., None]) -> None:
    if isinstance(nb.task.entry, str) and ":" not in nb.task.entry:
        bad(
            "task.entry",
            f"is {nb.task.entry!r}; write 'package.module:attribute' or 'path/to/file.py:attribute'",
        )

    # [training] and [batch]: every field by its rule (None: left out, where that is allowed)
    optional = {"dataset_size", "updates", "epochs", "examples", "eval_microbatch", "grad_clip", "loss_scale_init"}
    for section, cls in (("batch", BatchSpec), ("training", TrainingSpec)):
        obj = getattr(nb, section)
        for name in _field_names(cls):
            rule(f"{section}.{name}", getattr(obj, name), PARAM_RULES[name], optional=name in optional)
    b = nb.batch
    budgets = [k for k in ("updates", "epochs", "examples") if getattr(b, k) is not None]
    if len(budgets) != 1:
        bad(
            "batch",
            "give exactly one budget: updates, epochs or examples"
            + (f" (found {', '.join(budgets)})" if budgets else ""),
        )

    # [task.params]: JSON-like values, finite numbers, and none of the names of [training] and [batch] (RESERVED):
    # the task receives one flat mapping, so such a key would silently replace the notebook's own setting
    for key, val in nb.task.params.items():
        path = f"task.params.{key}"
        why = _plain(val)
        if key in RESERVED:
            section = _section(key)
            own = getattr(getattr(nb, section), key, None)
            effect = f"replace [{section}] {key} = {_show(own)}" if own is not None else f"set [{section}] {key}"
            budget = [k for k in BUDGETS if k != key and getattr(nb.batch, k) is not None]
            if key in BUDGETS and budget:
                effect += f" beside [batch] {budget[0]} = {_show(getattr(nb.batch, budget[0]))} (a second budget)"
            bad(
                path,
                f"= {_show(val)} collides with [{section}] {key}: the task receives both in one flat `params`, "
                f"so it would {effect}. The keys of [training] and [batch] are reserved: rename the task's key "
                f"(e.g. n_{key}) in campaign.toml and in the task, or set [{section}] {key} (a variant's `set` "
                "changes it for one variant)",
            )
        elif why:
            bad(path, why)

    _variants(nb, bad)


def _rest(nb: Notebook, bad: Callable[[str, str], None], num: Callable[..., None], whole: Callable[..., None]) -> None:
    s = nb.stop
    num("stop.divergence_factor", s.divergence_factor, 1, 1e6, lo_open=True)
    whole("stop.patience", s.patience, 1, 1_000_000)
    num("stop.wall_clock_minutes", s.wall_clock_minutes, 0, 1e7, lo_open=True)
    whole("validation.every_updates", nb.validation.every_updates, 1, 10**10)
    p = nb.pilot
    whole("pilot.updates_after_resume", p.updates_after_resume, 1, 1_000)
    whole("pilot.overfit_examples", p.overfit_examples, 1, 10_000)
    whole("pilot.overfit_steps", p.overfit_steps, 1, 100_000)
    num("pilot.overfit_loss_ratio", p.overfit_loss_ratio, 0, 1, lo_open=True)
    num("pilot.overfit_lr", p.overfit_lr, 0, 1_000, lo_open=True)
    num("pilot.grad_tolerance", p.grad_tolerance, 0, 1, lo_open=True)
    num("pilot.headroom", p.headroom, 0, 10)
    num("pilot.overfit_accuracy", p.overfit_accuracy, 0, 1)
    whole("pilot.timed_updates", p.timed_updates, 1, 1_000)
    if nb.probe is not None:
        _probe(nb, bad, whole)
    if nb.cluster is not None:
        addr = nb.cluster.ray
        if not isinstance(addr, str) or any(c.isspace() for c in addr) or len(addr) > 300:
            bad("cluster.ray", f"is {_show(addr)}; give the head's address (HOST:PORT or ray://HOST:PORT) or auto")
        st = nb.cluster.storage
        if not isinstance(st, str) or len(st) > 4096 or (st and not st.startswith(("/", "~"))):
            bad(
                "cluster.storage",
                "give an absolute folder path the head and every node reach at that same path (a shared volume, "
                "NFS), or leave it empty to stream checkpoints back to the head",
            )
    ck = nb.checkpoints
    whole("checkpoints.every_updates", ck.every_updates, 0, 10**10)
    num("checkpoints.every_minutes", ck.every_minutes, 0, 1e7)
    whole("checkpoints.keep", ck.keep, 1, 1_000)

    run_ids = _runs(nb, bad, num)
    for i, d in enumerate(nb.decisions):
        if d is None:
            continue
        if d.kind not in DECISION_KINDS:
            bad(f"decisions[{i}].kind", f"is {d.kind!r}; use one of {', '.join(DECISION_KINDS)}")
        for rid in d.runs:
            if rid not in run_ids:
                bad(f"decisions[{i}].runs", f"names unknown run {_show(rid)}")
    whole("rental.days", nb.rental.days, 1, 3_650)
    num("rental.reserve_hours", nb.rental.reserve_hours, 0, 100_000)
    sel = nb.selection
    num("selection.memory_per_gpu_mib", sel.memory_per_gpu_mib, 0, 1e12)
    whole("selection.microbatch", sel.microbatch, 1, 1_000_000)
    whole("selection.accumulation", sel.accumulation, 1, 1_000_000)
    if sel.strategy and sel.strategy not in STRATEGIES:
        bad("selection.strategy", f"is {sel.strategy!r}; use one of {', '.join(STRATEGIES)}")


def _variants(nb: Notebook, bad: Callable[[str, str], None]) -> None:
    if not nb.variants:
        bad("variants", "declare at least one [[variants]] (the reference)")
    seen: set[str] = set()
    task_params = nb.task.params
    settable = set(PARAM_RULES) | set(task_params)
    for i, v in enumerate(nb.variants):
        if v is None:
            continue
        if not v.id:
            bad(f"variants[{i}].id", "is empty; give every variant a short id such as 'lr2e-4'")
        elif isinstance(v.id, str) and (len(v.id) > MAX_ID or _CONTROL.search(v.id)):
            bad(f"variants[{i}].id", f"is {_show(v.id)}; keep ids short (at most {MAX_ID} characters), one line")
        if v.id in seen:
            bad(
                f"variants[{i}].id",
                f"duplicate variant id {v.id!r}; every variant needs its own id",
            )
        seen.add(v.id)
        if v.kind not in ("quality", "memory"):
            bad(f"variants[{i}].kind", f"is {v.kind!r}; use quality or memory")
        for key, val in v.set.items():
            path = f"variants[{i}].set.{key}"
            if key not in settable:
                bad(path, "is not a key of [training], [batch] or [task.params]" + suggest(key, settable))
                continue
            why = _plain(val)
            if why:
                bad(path, why)
            elif key in PARAM_RULES:
                r = PARAM_RULES[key]
                if r.problem(val) is not None:
                    bad(path, f"is {_show(val)}; {r.problem(val)}")
            elif _kind(val) != _kind(task_params[key]):
                bad(
                    path,
                    f"is {_show(val)} ({_kind(val)}), but [task.params] {key} is {_show(task_params[key])} "
                    f"({_kind(task_params[key])}); give a value of the same type",
                )
    refs = [v.id for v in nb.variants if v is not None and v.reference]
    if len(refs) > 1:
        bad("variants", f"more than one reference variant ({', '.join(refs)}); mark exactly one")


def _runs(nb: Notebook, bad: Callable[[str, str], None], num: Callable[..., None]) -> set[str]:
    variants = {v.id for v in nb.variants if v is not None}
    run_ids: set[str] = set()
    for i, r in enumerate(nb.runs):
        if r is None:
            continue
        if not r.id:
            bad(f"runs[{i}].id", "is empty; every run needs an id")
        elif not isinstance(r.id, str) or not RUN_ID.match(r.id):
            bad(
                f"runs[{i}].id",
                f"is {_show(r.id)}; run ids are made by Cockpit: the letter r and 4 to 9 digits, such as r0001 "
                "(an id is also a folder name under runs/, so nothing else is accepted)",
            )
        if r.id in run_ids:
            bad(f"runs[{i}].id", f"duplicate run id {r.id!r}; run ids are never reused")
        run_ids.add(r.id)
        if r.variant not in variants:
            bad(
                f"runs[{i}].variant",
                f"run {r.id!r} names unknown variant {r.variant!r}; variants are {', '.join(sorted(variants))}",
            )
        if r.kind not in RUN_KINDS:
            bad(f"runs[{i}].kind", f"is {r.kind!r}; use one of {', '.join(RUN_KINDS)}")
        if isinstance(r.status, str) and r.status not in RUN_STATUSES:
            bad(f"runs[{i}].status", f"is {_show(r.status)}; use one of {', '.join(RUN_STATUSES)}")
        if _int(r.seed) and not 0 <= r.seed <= MAX_SEED:
            bad(f"runs[{i}].seed", f"is {r.seed}; a seed is a whole number from 0 to {MAX_SEED}")
        num(f"runs[{i}].peak_mib", r.peak_mib, 0, 1e12)
        num(f"runs[{i}].duration_s", r.duration_s, 0, 1e10)
    for i, r in enumerate(nb.runs):
        if r is not None and r.follows and r.follows not in run_ids:
            bad(f"runs[{i}].follows", f"names unknown run {_show(r.follows)}")
    return run_ids


ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_ARGV = 1_000  # arguments of a probed command
MAX_ARG = 8_192  # characters of one argument or environment value


def _probe(nb: Notebook, bad: Callable[[str, str], None], whole: Callable[..., None]) -> None:
    """[probe]: the command and its environment reach a process as they are, so every string is checked."""
    p = nb.probe
    assert p is not None
    for key in ("command", "resume"):
        argv = getattr(p, key)
        if not isinstance(argv, list):
            continue
        if len(argv) > MAX_ARGV:
            bad(f"probe.{key}", f"has {len(argv):,} arguments; at most {MAX_ARGV:,}")
        for j, arg in enumerate(argv[:MAX_ARGV]):
            if not isinstance(arg, str) or not arg or "\0" in arg or len(arg) > MAX_ARG:
                bad(
                    f"probe.{key}[{j}]",
                    f"is {_show(arg)}; each argument is a non-empty string (at most {MAX_ARG:,} characters, no NUL), "
                    'as in command = ["python", "train.py", "--lr", "3e-4"]',
                )
    for name, value in (p.env or {}).items():
        if not ENV_NAME.match(str(name)):
            bad(f"probe.env.{name}", "is not an environment variable name (letters, digits and _, not first a digit)")
        elif not isinstance(value, str) or "\0" in value or len(value) > MAX_ARG:
            bad(
                f"probe.env.{name}",
                f'is {_show(value)}; environment values are strings (quote numbers: {name} = "1")',
            )
    whole("probe.steps", p.steps, 2, 100_000)
    whole("probe.save_within", p.save_within, 0, 10**9)
    whole("probe.compare_steps", p.compare_steps, 1, 1_000)
    if not isinstance(p.to_end, bool):
        bad("probe.to_end", f"is {_show(p.to_end)}; it must be true or false")


def _section(key: str) -> str:
    return "batch" if key in _field_names(BatchSpec) else "training"


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "true or false"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "a table"
    return type(v).__name__


def _plain(v: Any, depth: int = 0) -> str:
    """Why a parameter value cannot reach a run as JSON (a date, a non-finite number), else ""."""
    if depth > 8:
        return "is nested too deeply for a parameter (at most 8 levels)"
    if isinstance(v, (bool, int, str)):
        return ""
    if isinstance(v, float):
        return "" if math.isfinite(v) else f"is {v}; parameters must be finite numbers"
    if isinstance(v, list):
        return next((w for x in v if (w := _plain(x, depth + 1))), "")
    if isinstance(v, dict):
        return next((w for x in v.values() if (w := _plain(x, depth + 1))), "")
    return f"is a {type(v).__name__} ({v}); parameters are numbers, strings, true/false, arrays or tables"


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
