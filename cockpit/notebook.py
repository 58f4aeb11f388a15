"""The campaign notebook: ``campaigns/<name>/campaign.toml``, read and written only here.

Load: ``tomllib`` into typed dataclasses, with every problem collected and
reported in one message naming the file, the TOML line or the key path, and
what to do. Save: one function, under an advisory lock, through a temporary
file in the same folder, fsync and ``os.replace``, refusing to overwrite a
file that changed on disk since it was read. Comments are not kept when
Cockpit saves the file: use the ``notes`` fields instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import sys
import tempfile
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CockpitError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import tomli_w

NOTEBOOK_FILE = "campaign.toml"
LOCK_FILE = ".campaign.lock"
HELD = ("updates", "epochs", "examples")
PRECISIONS = ("fp32", "bf16", "fp16")
STRATEGIES = ("one GPU", "DDP", "FSDP")
RUN_KINDS = ("pilot", "train")
DECISION_KINDS = ("decision", "observation")


class NotebookError(CockpitError):
    """A notebook that cannot be used as it is. The message is for the user."""


class ConflictError(NotebookError):
    """The file changed on disk since it was read: saving would lose that change."""


# --------------------------------------------------------------------------- model


@dataclass
class CampaignInfo:
    name: str
    question: str = ""
    held_constant: str = "updates"  # updates | epochs | examples
    quality_metric: str = "val_loss"
    quality_target: float | None = None
    higher_is_better: bool = False
    notes: str = ""


@dataclass
class TaskSpec:
    entry: str  # "package.module:attribute" or "path/to/file.py:attribute"
    params: dict[str, Any] = field(default_factory=dict)
    extensions: list[str] = field(default_factory=list)  # modules the stack check imports


@dataclass
class BatchSpec:
    microbatch: int
    accumulation: int = 1
    data_replicas: int = 1
    model_parallel: int = 1
    dataset_size: int | None = None  # None: taken from the task's training split
    updates: int | None = None  # the budget: exactly one of updates, epochs, examples
    epochs: float | None = None
    examples: int | None = None
    drop_last: bool = True
    eval_microbatch: int | None = None


@dataclass
class TrainingSpec:
    lr: float
    optimizer: str = "adamw"  # adamw | sgd
    weight_decay: float = 0.0
    momentum: float = 0.0
    schedule: str = "constant"  # constant | cosine | linear
    warmup_updates: int = 0
    grad_clip: float | None = None
    precision: str = "fp32"  # fp32 | bf16 | fp16
    loss_scale_init: float | None = None  # fp16 grad scaler's initial scale (torch default 65536)
    activation_checkpointing: bool = False
    device: str = "auto"  # auto | cpu | cuda


@dataclass
class Variant:
    id: str
    reference: bool = False
    set: dict[str, Any] = field(default_factory=dict)  # overrides of training, batch or task params
    differs: str = ""  # what differs from the reference, in words
    why: str = ""
    kind: str = "quality"  # quality | memory


@dataclass
class StopRules:
    nonfinite: bool = True
    divergence_factor: float | None = 4.0  # stop when loss > factor x its starting value
    patience: int | None = None  # evaluations without improvement
    wall_clock_minutes: float | None = None
    notes: str = ""


@dataclass
class ValidationSpec:
    every_updates: int = 50
    notes: str = ""


@dataclass
class PilotSpec:
    updates_after_resume: int = 2
    overfit_examples: int = 16
    overfit_steps: int = 60
    overfit_loss_ratio: float = 0.1  # must fall below this share of its starting value
    overfit_lr: float | None = None  # default: the training lr, raised to at least 3e-3
    grad_tolerance: float = 1e-4  # relative, accumulated vs single-batch gradient
    headroom: float = 0.1


@dataclass
class RunRow:
    id: str
    variant: str
    seed: int = 0
    kind: str = "pilot"  # pilot | train
    status: str = "created"
    stop_reason: str = ""
    phase: str = ""
    started: str = ""
    ended: str = ""
    peak_mib: float | None = None
    duration_s: float | None = None
    follows: str = ""  # the run this one restarts or continues
    verdict: str = ""  # the user's verdict, free text
    notes: str = ""


@dataclass
class Decision:
    date: str
    text: str
    kind: str = "decision"  # decision | observation
    runs: list[str] = field(default_factory=list)


@dataclass
class Selection:
    memory_per_gpu_mib: float | None = None
    max_dimensions: str = ""
    precision: str = ""
    microbatch: int | None = None
    accumulation: int | None = None
    strategy: str = ""
    gpu: str = ""
    expected_result: str = ""
    notes: str = ""


@dataclass
class Rental:
    days: int | None = None  # 3, 7 or 30
    reserve_hours: float = 0.0  # kept for evaluation and export
    plan: str = ""
    notes: str = ""


@dataclass
class Conclusion:
    text: str = ""
    chosen_variant: str = ""
    date: str = ""


@dataclass
class Notebook:
    campaign: CampaignInfo
    task: TaskSpec
    batch: BatchSpec
    training: TrainingSpec
    variants: list[Variant] = field(default_factory=list)
    stop: StopRules = field(default_factory=StopRules)
    validation: ValidationSpec = field(default_factory=ValidationSpec)
    pilot: PilotSpec = field(default_factory=PilotSpec)
    runs: list[RunRow] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    selection: Selection = field(default_factory=Selection)
    rental: Rental = field(default_factory=Rental)
    conclusion: Conclusion = field(default_factory=Conclusion)
    # Where it came from and what it was when read: not part of the file.
    path: Path | None = field(default=None, compare=False, repr=False)
    digest: str | None = field(default=None, compare=False, repr=False)

    # ---- queries

    @property
    def directory(self) -> Path:
        if self.path is None:
            raise NotebookError("this notebook was not loaded from a file")
        return self.path.parent

    def variant(self, vid: str) -> Variant:
        for v in self.variants:
            if v.id == vid:
                return v
        known = ", ".join(v.id for v in self.variants) or "none"
        raise NotebookError(f"{self._where()}: no variant {vid!r} (variants: {known}).")

    @property
    def reference(self) -> Variant:
        for v in self.variants:
            if v.reference:
                return v
        return self.variants[0]

    def run(self, rid: str) -> RunRow:
        for r in self.runs:
            if r.id == rid:
                return r
        raise NotebookError(f"{self._where()}: no run {rid!r} in [[runs]].")

    def params(self, vid: str | None = None) -> dict[str, Any]:
        """The effective parameters of a variant: training, batch and task
        parameters, with the variant's overrides applied. Flat keys."""
        out: dict[str, Any] = {}
        out.update(dataclasses.asdict(self.training))
        out.update(dataclasses.asdict(self.batch))
        out.update(self.task.params)
        variant = self.variant(vid) if vid else self.reference
        out.update(variant.set)
        return out

    def _where(self) -> str:
        return str(self.path) if self.path else NOTEBOOK_FILE


SECTIONS: dict[str, Any] = {
    "campaign": CampaignInfo,
    "task": TaskSpec,
    "batch": BatchSpec,
    "training": TrainingSpec,
    "variants": list[Variant],
    "stop": StopRules,
    "validation": ValidationSpec,
    "pilot": PilotSpec,
    "runs": list[RunRow],
    "decisions": list[Decision],
    "selection": Selection,
    "rental": Rental,
    "conclusion": Conclusion,
}
REQUIRED_SECTIONS = ("campaign", "task", "batch", "training", "variants")


# --------------------------------------------------------------------------- loading


def find(path: Path | str) -> Path:
    """Accept a campaign folder or its campaign.toml."""
    p = Path(path)
    if p.is_dir():
        p = p / NOTEBOOK_FILE
    if not p.exists():
        raise NotebookError(
            f"{p}: no campaign notebook here. Give a campaign folder holding {NOTEBOOK_FILE} "
            f"(for example campaigns/demo), or create one with `cockpit new NAME`."
        )
    return p


def load(path: Path | str) -> Notebook:
    p = find(path)
    raw = p.read_bytes()
    nb = parse(raw, p)
    nb.path = p
    nb.digest = hashlib.sha256(raw).hexdigest()
    return nb


def parse(raw: bytes | str, where: Path | str = NOTEBOOK_FILE) -> Notebook:
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise NotebookError(_syntax_message(where, text, exc)) from None
    problems: list[str] = []
    nb = _build_notebook(data, problems)
    if nb is not None:
        typed = not problems
        try:
            _check_values(nb, problems)
        except (TypeError, AttributeError):
            # A value of the wrong type, already reported, stopped the value checks.
            if typed:
                raise
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise NotebookError(
            f"{where}: the campaign notebook has {len(problems)} problem"
            f"{'s' if len(problems) > 1 else ''}:\n{lines}\n"
            f"Fix them in the file, then run `cockpit check {Path(where).parent}`."
        )
    assert nb is not None
    return nb


def _syntax_message(where: Path | str, text: str, exc: Exception) -> str:
    import re

    lineno = getattr(exc, "lineno", None)
    msg = str(getattr(exc, "msg", exc))
    if lineno is None:  # before Python 3.14 the position is only in the text
        m = re.search(r"line (\d+)", msg)
        lineno = int(m.group(1)) if m else None
    msg = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", msg).rstrip(".")
    shown = ""
    if lineno:
        lines = text.splitlines()
        if 0 < lineno <= len(lines):
            shown = f" The line reads: {lines[lineno - 1].strip()!r}."
    at = f" at line {lineno}" if lineno else ""
    if not lineno and "end of document" in str(getattr(exc, "msg", exc)):
        at = " at the end of the file"
    folder = Path(where).parent
    return (
        f"{where}: this is not valid TOML{at}: {msg}.{shown} "
        f"Fix the syntax there (strings need quotes, tables [name], arrays of tables [[name]]), "
        f"then run `cockpit check {folder}`."
    )


def _build_notebook(data: dict[str, Any], problems: list[str]) -> Notebook | None:
    for key in data:
        if key not in SECTIONS:
            problems.append(
                f"unknown section [{key}]: the sections are {', '.join(SECTIONS)}"
                + _suggest(key, SECTIONS)
            )
    for key in REQUIRED_SECTIONS:
        if key not in data:
            problems.append(f"missing section [{key}]")
    built: dict[str, Any] = {}
    for key, typ in SECTIONS.items():
        if key not in data:
            continue
        built[key] = _convert(data[key], typ, key, problems)
    if any(k not in built or built[k] is None for k in REQUIRED_SECTIONS):
        return None
    try:
        return Notebook(**built)
    except TypeError as exc:  # pragma: no cover - _convert reports before this
        problems.append(str(exc))
        return None


def _suggest(key: str, options: Any) -> str:
    import difflib

    close = difflib.get_close_matches(key, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _convert(value: Any, typ: Any, path: str, problems: list[str]) -> Any:
    origin = typing.get_origin(typ)
    args = typing.get_args(typ)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _convert(value, inner[0], path, problems)
    if dataclasses.is_dataclass(typ):
        if not isinstance(value, dict):
            problems.append(f"{path}: expected a table, got {_tname(value)}")
            return None
        hints = typing.get_type_hints(typ)
        fields = {
            f.name: f
            for f in dataclasses.fields(typ)
            if f.init and f.name not in ("path", "digest")
        }
        kwargs: dict[str, Any] = {}
        for k, v in value.items():
            if k not in fields:
                problems.append(
                    f"{path}.{k}: unknown key; the keys of [{path.split('[')[0]}] are "
                    f"{', '.join(fields)}" + _suggest(k, fields)
                )
                continue
            kwargs[k] = _convert(v, hints[k], f"{path}.{k}", problems)
        missing = [
            n
            for n, f in fields.items()
            if n not in value
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING  # type: ignore[misc]
        ]
        for n in missing:
            problems.append(f"{path}.{n}: required key is missing")
        if missing:
            return None
        return typ(**kwargs)
    if origin is list:
        if not isinstance(value, list):
            problems.append(f"{path}: expected an array, got {_tname(value)}")
            return []
        return [_convert(v, args[0], f"{path}[{i}]", problems) for i, v in enumerate(value)]
    if origin is dict or typ is dict:
        if not isinstance(value, dict):
            problems.append(f"{path}: expected a table, got {_tname(value)}")
            return {}
        return dict(value)
    if typ is bool:
        if not isinstance(value, bool):
            problems.append(f"{path}: expected true or false, got {_tname(value)} {value!r}")
        return value
    if typ is int:
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{path}: expected a whole number, got {_tname(value)} {value!r}")
        return value
    if typ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.append(f"{path}: expected a number, got {_tname(value)} {value!r}")
            return value
        return float(value)
    if typ is str:
        if not isinstance(value, str):
            problems.append(f"{path}: expected a string, got {_tname(value)} {value!r}")
        return value
    return value  # pragma: no cover


def _tname(value: Any) -> str:
    return {
        bool: "a boolean",
        int: "a whole number",
        float: "a number",
        str: "a string",
        list: "an array",
        dict: "a table",
    }.get(type(value), type(value).__name__)


def _check_values(nb: Notebook, problems: list[str]) -> None:
    def bad(path: str, msg: str) -> None:
        problems.append(f"{path}: {msg}")

    def num(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    c = nb.campaign
    if isinstance(c.name, str) and not c.name.strip():
        bad("campaign.name", "must not be empty")
    if c.held_constant not in HELD:
        bad("campaign.held_constant", f"is {c.held_constant!r}; use one of {', '.join(HELD)}")
    if isinstance(nb.task.entry, str) and ":" not in nb.task.entry:
        bad(
            "task.entry",
            f"is {nb.task.entry!r}; write 'package.module:attribute' or 'path/to/file.py:attribute'",
        )

    b = nb.batch
    for name in ("microbatch", "accumulation", "data_replicas", "model_parallel"):
        v = getattr(b, name)
        if isinstance(v, int) and v < 1:
            bad(f"batch.{name}", f"is {v}; it must be a whole number >= 1")
    if isinstance(b.eval_microbatch, int) and b.eval_microbatch < 1:
        bad("batch.eval_microbatch", f"is {b.eval_microbatch}; it must be >= 1")
    budgets = [k for k in ("updates", "epochs", "examples") if getattr(b, k) is not None]
    if len(budgets) != 1:
        bad(
            "batch",
            "give exactly one budget: updates, epochs or examples"
            + (f" (found {', '.join(budgets)})" if budgets else ""),
        )
    for k in ("updates", "epochs", "examples", "dataset_size"):
        v = getattr(b, k)
        if num(v) and v <= 0:
            bad(f"batch.{k}", f"is {v}; it must be > 0")

    t = nb.training
    if num(t.lr) and not (t.lr > 0 and math.isfinite(t.lr)):
        bad("training.lr", f"is {t.lr}; a learning rate must be a positive number")
    if num(t.weight_decay) and t.weight_decay < 0:
        bad("training.weight_decay", f"is {t.weight_decay}; it must be >= 0")
    if t.optimizer not in ("adamw", "sgd"):
        bad("training.optimizer", f"is {t.optimizer!r}; use adamw or sgd")
    if t.schedule not in ("constant", "cosine", "linear"):
        bad("training.schedule", f"is {t.schedule!r}; use constant, cosine or linear")
    if t.precision not in PRECISIONS:
        bad("training.precision", f"is {t.precision!r}; use one of {', '.join(PRECISIONS)}")
    if t.device not in ("auto", "cpu", "cuda"):
        bad("training.device", f"is {t.device!r}; use auto, cpu or cuda")
    if num(t.grad_clip) and t.grad_clip <= 0:
        bad("training.grad_clip", f"is {t.grad_clip}; it must be > 0 (or leave it out)")

    if not nb.variants:
        bad("variants", "declare at least one [[variants]] (the reference)")
    seen: set[str] = set()
    settable = set(_field_names(TrainingSpec)) | set(_field_names(BatchSpec)) | set(nb.task.params)
    for i, v in enumerate(nb.variants):
        if v is None:
            continue
        if not v.id:
            bad(f"variants[{i}].id", "is empty; give every variant a short id such as 'lr2e-4'")
        if v.id in seen:
            bad(
                f"variants[{i}].id",
                f"duplicate variant id {v.id!r}; every variant needs its own id",
            )
        seen.add(v.id)
        if v.kind not in ("quality", "memory"):
            bad(f"variants[{i}].kind", f"is {v.kind!r}; use quality or memory")
        for key, val in v.set.items():
            if key not in settable:
                bad(
                    f"variants[{i}].set.{key}",
                    "is not a key of [training], [batch] or [task.params]"
                    + _suggest(key, settable),
                )
            elif key == "lr" and num(val) and val <= 0:
                bad(f"variants[{i}].set.lr", f"is {val}; a learning rate must be positive")
            elif key in ("microbatch", "accumulation", "data_replicas") and (
                not isinstance(val, int) or isinstance(val, bool) or val < 1
            ):
                bad(f"variants[{i}].set.{key}", f"is {val!r}; it must be a whole number >= 1")
            elif key == "precision" and val not in PRECISIONS:
                bad(
                    f"variants[{i}].set.precision",
                    f"is {val!r}; use one of {', '.join(PRECISIONS)}",
                )
    refs = [v.id for v in nb.variants if v is not None and v.reference]
    if len(refs) > 1:
        bad("variants", f"more than one reference variant ({', '.join(refs)}); mark exactly one")

    s = nb.stop
    if num(s.divergence_factor) and s.divergence_factor <= 1:
        bad("stop.divergence_factor", f"is {s.divergence_factor}; it must be > 1")
    if isinstance(s.patience, int) and s.patience < 1:
        bad("stop.patience", f"is {s.patience}; it must be >= 1")
    if num(s.wall_clock_minutes) and s.wall_clock_minutes <= 0:
        bad("stop.wall_clock_minutes", f"is {s.wall_clock_minutes}; it must be > 0")
    if isinstance(nb.validation.every_updates, int) and nb.validation.every_updates < 1:
        bad("validation.every_updates", f"is {nb.validation.every_updates}; it must be >= 1")
    p = nb.pilot
    if isinstance(p.overfit_examples, int) and p.overfit_examples < 1:
        bad("pilot.overfit_examples", "must be >= 1")
    if isinstance(p.updates_after_resume, int) and p.updates_after_resume < 1:
        bad("pilot.updates_after_resume", "must be >= 1")

    run_ids: set[str] = set()
    for i, r in enumerate(nb.runs):
        if r is None:
            continue
        if not r.id:
            bad(f"runs[{i}].id", "is empty; every run needs an id")
        if r.id in run_ids:
            bad(f"runs[{i}].id", f"duplicate run id {r.id!r}; run ids are never reused")
        run_ids.add(r.id)
        if r.variant not in seen:
            bad(
                f"runs[{i}].variant",
                f"run {r.id!r} names unknown variant {r.variant!r}; variants are {', '.join(sorted(seen))}",
            )
        if r.kind not in RUN_KINDS:
            bad(f"runs[{i}].kind", f"is {r.kind!r}; use pilot or train")
    for i, r in enumerate(nb.runs):
        if r is not None and r.follows and r.follows not in run_ids:
            bad(f"runs[{i}].follows", f"names unknown run {r.follows!r}")
    for i, d in enumerate(nb.decisions):
        if d is None:
            continue
        if d.kind not in DECISION_KINDS:
            bad(f"decisions[{i}].kind", f"is {d.kind!r}; use decision or observation")
        for rid in d.runs:
            if rid not in run_ids:
                bad(f"decisions[{i}].runs", f"names unknown run {rid!r}")
    if isinstance(nb.rental.days, int) and nb.rental.days < 1:
        bad("rental.days", f"is {nb.rental.days}; it must be >= 1")
    if nb.selection.strategy and nb.selection.strategy not in STRATEGIES:
        bad(
            "selection.strategy",
            f"is {nb.selection.strategy!r}; use one of {', '.join(STRATEGIES)}",
        )


def _field_names(cls: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def validate(nb: Notebook) -> None:
    """Re-check an in-memory notebook (after an edit) before it is saved."""
    parse(dumps(nb), nb.path or NOTEBOOK_FILE)


# --------------------------------------------------------------------------- saving


def to_dict(nb: Notebook) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in SECTIONS:
        value = getattr(nb, key)
        if isinstance(value, list):
            if value:  # an empty array of tables would be written as "runs = []" above every table
                out[key] = [_strip_none(dataclasses.asdict(v)) for v in value]
        else:
            out[key] = _strip_none(dataclasses.asdict(value))
    return out


def _strip_none(d: dict[str, Any]) -> dict[str, Any]:
    # TOML has no null: a key that is None is simply left out, and loads back as None.
    return {k: v for k, v in d.items() if v is not None}


def dumps(nb: Notebook) -> str:
    header = (
        "# Cockpit campaign notebook. Cockpit rewrites this file when it saves: comments are not\n"
        "# kept; write free text in the notes fields instead.\n"
    )
    return header + tomli_w.dumps(to_dict(nb), multiline_strings=True)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Advisory lock on the campaign folder, held while reading and replacing the file."""
    import fcntl

    lock_path = path.parent / LOCK_FILE
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _digest_on_disk(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def _sweep_temporaries(path: Path) -> None:
    # Every writer holds the lock, so a temporary file seen under it belongs
    # to a writer that was killed before its os.replace: it is garbage.
    for tmp in path.parent.glob(".campaign.*.tmp"):
        with contextlib.suppress(OSError):
            tmp.unlink()


def _write_atomic(path: Path, text: str) -> None:
    data = text.encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=".campaign.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file private (0600); the notebook keeps its own mode.
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def save(nb: Notebook, path: Path | str | None = None, *, force_new: bool = False) -> None:
    """Write the notebook atomically, under the lock.

    Refuses (ConflictError) when the file on disk is not the one this notebook
    was read from, so two editors never silently lose each other's work.
    ``force_new`` is for creating a file that must not exist yet.
    """
    target = Path(path) if path else nb.path
    if target is None:
        raise NotebookError("save: no path given and the notebook was not loaded from a file")
    text = dumps(nb)
    parse(text, target)  # never write a notebook that would not load back
    with locked(target):
        _save_locked(nb, target, text, force_new)


def _save_locked(nb: Notebook, target: Path, text: str, force_new: bool = False) -> None:
    current = _digest_on_disk(target)
    if force_new:
        if current is not None:
            raise ConflictError(f"{target}: already exists; choose another name.")
    elif current != nb.digest:
        raise ConflictError(
            f"{target}: the file changed on disk since it was read (another editor, the CLI or a "
            f"pilot wrote it). Nothing was saved. Reload it and make the change again."
        )
    _sweep_temporaries(target)
    _write_atomic(target, text)
    nb.path = target
    nb.digest = hashlib.sha256(text.encode("utf-8")).hexdigest()


def create(path: Path | str, text: str) -> Notebook:
    """Write a new notebook from its text as given (a template keeps its layout).

    Refuses (ConflictError) when the file exists already; never writes text
    that does not load.
    """
    target = Path(path)
    nb = parse(text, target)
    with locked(target):
        if target.exists():
            raise ConflictError(f"{target}: already exists; Cockpit never overwrites a notebook.")
        _sweep_temporaries(target)
        _write_atomic(target, text)
    nb.path = target
    nb.digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return nb


def mutate(path: Path | str, change: Callable[[Notebook], Any]) -> Any:
    """Read-modify-write under the lock: load the newest file, apply ``change``, save.

    For writers that must not fail on another editor's change (a pilot
    updating its run row): they merge into whatever is on disk now.
    """
    p = find(path)
    with locked(p):
        nb = load(p)
        result = change(nb)
        text = dumps(nb)
        parse(text, p)
        _save_locked(nb, p, text)
    return result


def template(name: str) -> str:
    from importlib import resources

    text = resources.files("cockpit").joinpath("templates/campaign.toml").read_text("utf-8")
    return text.replace("{name}", name)
