"""What only importing the task can tell: it imports, its splits exist, one update fits in the training split, the
model builds and one batch collates.

``cockpit check`` and ``cockpit pilot`` run this in a child process (``python -m cockpit.pilot.taskcheck``), so
the CLI itself never imports torch or the user's code: a task file with a syntax error, an empty training split,
an update larger than the dataset, a ``build_model`` or a ``collate`` that raises is refused before a run exists,
with the file, line or setting to change. The model is built on the meta device (no memory) when it can be, and
at its real size on the CPU when it is small (or cannot be built on meta); one microbatch of the training split is
collated. The child prints one JSON object: ``{"problems": [{"where": ..., "what": ...}], "splits": {variant:
{split: n}}, "built": {variant: {"parameters": n, "trainable": n, "device": "meta", "batch": "x (8, 8) ..."}}}``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from .. import blame
from .. import notebook as nbm
from ..contract import Example, Params
from ..notebook.settings import Settings

if TYPE_CHECKING:
    from .task import Task

NEEDED = ("train", "val")  # the pilot trains on the first and validates on the second


class Problem(TypedDict):
    """One thing to fix before a run: where (a file and line, or the campaign's setting) and what, in words."""

    where: str
    what: str


class TaskCheck(TypedDict):
    """What the child prints: the problems, each checked variant's split sizes ({variant: {split: n}}) and what
    building its model and one batch showed ({variant: Built})."""

    problems: list[Problem]
    splits: dict[str, dict[str, int]]
    built: dict[str, Built]


def task_problem(exc: BaseException, entry: str) -> Problem:
    """An exception raised while importing the task, as the place to fix and what is wrong there."""
    from .task import TaskError

    if isinstance(exc, TaskError):
        return {"where": "task.entry", "what": str(exc)}
    if isinstance(exc, SyntaxError):
        at = f"{exc.filename}:{exc.lineno}" if exc.filename else entry
        return {"where": at, "what": f"the task file does not parse: {exc.msg} (line {exc.lineno}); fix it there"}
    at = blame.of(exc).where or entry
    return {
        "where": at,
        "what": f"importing the task raised {type(exc).__name__}: {exc}; fix the task file where it raised",
    }


def sizes(nb: nbm.Notebook, vid: str, params: Params, splits: Mapping[str, Sized]) -> list[Problem]:
    """The splits the pilot needs exist, are not empty, and the training split holds at least one update."""
    out: list[Problem] = []
    where = f"{nb.path}: variant {vid}"
    for name in NEEDED:
        if name not in splits:
            out.append(
                {
                    "where": f"{where}, datasets()",
                    "what": f"datasets() returned no {name!r} split (it has: {', '.join(splits) or 'none'}); "
                    f"return {{'train': ..., 'val': ...}}",
                }
            )
        elif len(splits[name]) == 0:
            out.append({"where": f"{where}, datasets()", "what": f"the {name!r} split is empty"})
    train = splits.get("train")
    s = Settings(params)
    micro, accum, ranks = int(params.get("microbatch") or 1), s.accumulation, s.data_replicas
    per_update = micro * accum * ranks
    if train is not None and 0 < len(train) < per_update:
        out.append(
            {
                "where": f"{where}, [batch]",
                "what": f"one update takes {per_update} examples (microbatch {micro} x accumulation {accum} x "
                f"{ranks} replica(s)) but the training split has {len(train)}: every update would repeat examples "
                "and the pilot cannot form one. Lower microbatch or accumulation, or give the split more examples",
            }
        )
    return out


class Built(TypedDict):
    """What building the model and one batch showed, for one variant."""

    parameters: int
    trainable: int
    device: str  # "meta" (built without memory) or "cpu" (at its real size: small enough)
    batch: str  # the first microbatch's fields, e.g. "x (8, 8) float32, labels (8,) int64"


REAL_SIZE_PARAMETERS = 50_000_000  # a model under this many parameters is built for real (on the CPU) to collate


def build(task: Task, params: Params, examples: Sequence[Example], meta_first: bool = True) -> Built:
    """Build the model as the pilot would and collate one microbatch; what raises is the task's (a UserCodeError,
    which the caller reports at the user's line).

    ``meta_first``: build it on the meta device first (no memory; torch's first use of it costs about as much as
    importing torch), and again at its real size on the CPU only when it is small. Without it (another setting of
    a model already found small) it is built at its real size at once."""
    import torch

    from .usercode import UserCodeError, user

    model: Any = None
    device = "meta"
    if meta_first:
        try:
            with torch.device("meta"):
                model = task.build_model(params)
        except Exception:  # noqa: BLE001 - some models cannot be built without memory: built for real below
            model = None
    if not isinstance(model, torch.nn.Module) or _count(model) < REAL_SIZE_PARAMETERS:
        model, device = user("build_model", task.build_model, params), "cpu"
    if not isinstance(model, torch.nn.Module):
        raise UserCodeError("build_model", TypeError(f"returned a {type(model).__name__}, not a torch.nn.Module"))
    micro = max(1, int(params.get("microbatch") or 1))
    batch = user("collate", task.collate, list(examples[:micro]), params) if len(examples) else {}
    if not isinstance(batch, Mapping):
        raise UserCodeError("collate", TypeError(f"must return a dict of tensors, got {type(batch).__name__}"))
    fields = [
        f"{k} {tuple(v.shape)} {str(v.dtype).removeprefix('torch.')}" if torch.is_tensor(v) else str(k)
        for k, v in batch.items()
    ]
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"parameters": _count(model), "trainable": trainable, "device": device, "batch": ", ".join(fields)}


def _count(model: Any) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def check(path: Path, variants: list[str] | None = None, overrides: Params | None = None) -> TaskCheck:
    from .splits import load as load_splits
    from .task import load_task
    from .usercode import UserCodeError, user

    nb = nbm.load(path)
    problems: list[Problem] = []
    try:
        task = load_task(nb.task.entry, nb.directory)
    except Exception as exc:  # noqa: BLE001 - the user's task: every failure is reported, none is ours
        return {"problems": [task_problem(exc, nb.task.entry)], "splits": {}, "built": {}}
    counted: dict[str, dict[str, int]] = {}
    seen: dict[str, dict[str, int]] = {}
    built: dict[str, Built] = {}
    made: dict[str, Built | None] = {}
    for vid in variants or [v.id for v in nb.variants]:
        params: Params = {**nb.params(vid), **(overrides or {})}
        key = json.dumps({k: v for k, v in params.items() if k not in ("microbatch", "accumulation")}, default=str)
        where = f"{nb.path}: variant {vid}"
        splits = None
        if key not in seen:
            try:
                splits = load_splits(user("datasets", task.datasets, params))
            except UserCodeError as exc:
                problems.append(user_problem(f"{where}, datasets()", exc, params))
                continue
            seen[key] = {name: len(s) for name, s in splits.items()}
        lengths = seen[key]
        counted[vid] = lengths
        problems.extend(sizes(nb, vid, params, {k: range(n) for k, n in lengths.items()}))
        # once per setting of the task's own parameters (what build_model reads): the model and a batch
        mkey = json.dumps({k: params.get(k) for k in nb.task.params}, default=str)
        if splits is not None and "train" in splits and mkey not in made:
            small = any(b is not None and b["device"] == "cpu" for b in made.values())
            try:
                made[mkey] = build(task, params, splits["train"], meta_first=not small)
            except UserCodeError as exc:
                made[mkey] = None
                problems.append(user_problem(f"{where}, {exc.where}()", exc, params))
            except Exception as exc:  # noqa: BLE001 - out of memory or a crash building it: said, not raised
                made[mkey] = None
                problems.append({"where": f"{where}, build_model()", "what": f"{type(exc).__name__}: {exc}"})
        got = made.get(mkey)
        if got is not None:
            built[vid] = got
    return {"problems": merged(problems), "splits": counted, "built": built}


def user_problem(where: str, exc: BaseException, params: Params) -> Problem:
    """An exception in the task's code, at the user's file:line (:mod:`cockpit.blame`), with a "did you mean"."""
    from ..blame import UserCodeError

    b = blame.of(exc, params)
    inner = exc.exc if isinstance(exc, UserCodeError) else exc
    at = f" at {b.where}" if b.where else ""
    hint = f"; {b.remedy}" if b.remedy else ""
    name = blame.called(exc.where) if isinstance(exc, UserCodeError) else "the task's code"
    return {
        "where": where,
        "what": f"{name} raised {type(inner).__name__}: {inner}{at}{hint}; the pilot would fail here too",
    }


def merged(problems: list[Problem]) -> list[Problem]:
    """The same problem in several variants, said once with the variants named."""
    by_what: dict[str, list[str]] = {}
    for p in problems:
        by_what.setdefault(p["what"], []).append(p["where"])
    out: list[Problem] = []
    for what, wheres in by_what.items():
        if len(wheres) == 1:
            out.append({"where": wheres[0], "what": what})
            continue
        head, _, _ = wheres[0].partition(": variant ")
        vids = [w.partition(": variant ")[2].partition(",")[0] for w in wheres]
        tail = wheres[0].partition(", ")[2]
        out.append({"where": f"{head}: variants {', '.join(vids)}{', ' + tail if tail else ''}", "what": what})
    return out


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    overrides: Params = {}
    if len(args) >= 2 and args[0] == "--overrides":
        overrides = json.loads(args[1])
        args = args[2:]
    if not args:
        print("usage: python -m cockpit.pilot.taskcheck [--overrides JSON] CAMPAIGN [VARIANT ...]", file=sys.stderr)
        return 2
    out = check(Path(args[0]), args[1:] or None, overrides)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
