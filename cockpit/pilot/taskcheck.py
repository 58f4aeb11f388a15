"""What only importing the task can tell: it imports, its splits exist, and one update fits in the training split.

``cockpit check`` and ``cockpit pilot`` run this in a child process (``python -m cockpit.pilot.taskcheck``), so
the CLI itself never imports torch or the user's code: a task file with a syntax error, an empty training split or
an update larger than the dataset is refused before a run exists, with the file, line or setting to change. The
child prints one JSON object: ``{"problems": [{"where": ..., "what": ...}], "splits": {variant: {split: n}}}``.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Mapping, Sized
from pathlib import Path
from typing import TypedDict

from .. import notebook as nbm
from ..contract import Params
from ..notebook.settings import Settings

NEEDED = ("train", "val")  # the pilot trains on the first and validates on the second


class Problem(TypedDict):
    """One thing to fix before a run: where (a file and line, or the campaign's setting) and what, in words."""

    where: str
    what: str


class TaskCheck(TypedDict):
    """What the child prints: the problems, and each checked variant's split sizes ({variant: {split: n}})."""

    problems: list[Problem]
    splits: dict[str, dict[str, int]]


def task_problem(exc: BaseException, entry: str) -> Problem:
    """An exception raised while importing the task, as the place to fix and what is wrong there."""
    from .task import TaskError

    if isinstance(exc, TaskError):
        return {"where": "task.entry", "what": str(exc)}
    if isinstance(exc, SyntaxError):
        at = f"{exc.filename}:{exc.lineno}" if exc.filename else entry
        return {"where": at, "what": f"the task file does not parse: {exc.msg} (line {exc.lineno}); fix it there"}
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/cockpit/" not in f.filename.replace("\\", "/")]
    at = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else entry
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


def check(path: Path, variants: list[str] | None = None, overrides: Params | None = None) -> TaskCheck:
    from .splits import load as load_splits
    from .task import load_task
    from .usercode import UserCodeError, user

    nb = nbm.load(path)
    problems: list[Problem] = []
    try:
        task = load_task(nb.task.entry, nb.directory)
    except Exception as exc:  # noqa: BLE001 - the user's task: every failure is reported, none is ours
        return {"problems": [task_problem(exc, nb.task.entry)], "splits": {}}
    counted: dict[str, dict[str, int]] = {}
    seen: dict[str, dict[str, int]] = {}
    for vid in variants or [v.id for v in nb.variants]:
        params: Params = {**nb.params(vid), **(overrides or {})}
        key = json.dumps({k: v for k, v in params.items() if k not in ("microbatch", "accumulation")}, default=str)
        if key not in seen:
            try:
                splits = load_splits(user("datasets", task.datasets, params))
            except UserCodeError as exc:
                problems.append({"where": f"{nb.path}: variant {vid}, datasets()", "what": str(exc)})
                continue
            seen[key] = {name: len(s) for name, s in splits.items()}
        lengths = seen[key]
        counted[vid] = lengths
        problems.extend(sizes(nb, vid, params, {k: range(n) for k, n in lengths.items()}))
    return {"problems": merged(problems), "splits": counted}


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
