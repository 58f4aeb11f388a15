"""``cockpit new NAME``: create ``campaigns/NAME/campaign.toml`` from the template.

``--from-training-args FILE.json`` fills ``[batch]``, ``[training]``, ``[validation]`` and ``[checkpoints]``
from a Hugging Face ``TrainingArguments`` JSON, so the pilot tests what the user would have run;
``--task ENTRY`` names the task.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from .. import fsutil, notebook
from ..errors import UsageError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="campaign name: letters, digits, '.', '_' or '-'")
    parser.add_argument(
        "--dir",
        default="campaigns",
        type=Path,
        help="folder that holds the campaigns (default: campaigns)",
    )
    parser.add_argument(
        "--from-training-args",
        metavar="FILE.json",
        type=Path,
        default=None,
        help="take [batch] and [training] from a Hugging Face TrainingArguments JSON (training_args.to_json_string())",
    )
    parser.add_argument(
        "--dataset-size",
        type=int,
        default=None,
        help="with --from-training-args: training examples per epoch (turns a warm-up ratio or epoch evaluation "
        "into updates)",
    )
    parser.add_argument(
        "--task",
        default=None,
        help="your task entry, e.g. train_task.py:task (default: write task.py, a runnable task to fill in)",
    )
    parser.add_argument(
        "--example",
        choices=["demo"],
        default=None,
        help="the built-in demo campaign (a tiny language model and a learning-rate question) instead of a new one",
    )


def run(args: argparse.Namespace) -> int:
    name: str = args.name
    if not _NAME.match(name):
        raise UsageError(
            f"{name!r} is not a usable campaign name: it becomes a folder and the notebook's "
            f"campaign.name, so use letters, digits, '.', '_' or '-' (at most 64, starting with "
            f"a letter or digit), for example `cockpit new lr-sweep`."
        )
    folder: Path = args.dir / name
    target = folder / notebook.NOTEBOOK_FILE
    if target.exists():
        raise UsageError(
            f"{target} already exists; Cockpit never overwrites a notebook. Choose another name, "
            f"or check the existing one with `cockpit check {folder}`."
        )
    example = getattr(args, "example", None)
    if example and (args.task or args.from_training_args is not None):
        raise UsageError("--example makes the built-in demo as it is: leave out --task and --from-training-args")
    text = notebook.template(name, example or "campaign")
    notes: list[str] = []
    if args.from_training_args is not None or args.task:
        text, notes = _filled(text, args)
    task_file = folder / "task.py"
    write_task = not example and not args.task
    if write_task and task_file.exists():
        raise UsageError(
            f"{task_file} already exists; Cockpit never overwrites it. Give it with --task task.py:task, "
            "or choose another name."
        )
    folder.mkdir(parents=True, exist_ok=True)
    try:
        notebook.create(target, text)
    except notebook.ConflictError:
        raise UsageError(f"{target} appeared while it was being created; nothing was overwritten.") from None
    except notebook.NotebookError as exc:
        raise UsageError(f"{target}: the settings do not make a valid notebook: {exc}") from None
    if write_task:
        fsutil.write_text(task_file, notebook.task_template(name))
    print(f"Created {target}" + (f" and {task_file}, a runnable task to fill in." if write_task else "."))
    if args.from_training_args is not None:
        print(f"[batch], [training], [validation] and [checkpoints] come from {args.from_training_args}.")
    for note in notes:
        print(f"  not carried over: {note}")
    if example:
        print(f"Next: cockpit pilot {folder}")
    elif write_task:
        print(f"Next: cockpit pilot {folder}   (it passes as written; then put your model and data in task.py,")
        print("      one function at a time, and write the question and the variants in campaign.toml)")
    else:
        print("Next: write the question and the variants in it, then run")
        print(f"  cockpit check {folder}")
    return 0


def _filled(text: str, args: argparse.Namespace) -> tuple[str, list[str]]:
    """The template with the task and the TrainingArguments' settings in place (comments are not kept)."""
    import tomli_w

    from ..integrations import training_args as ta
    from ..notebook.parse import tomllib  # tomli on Python 3.10

    doc = tomllib.loads(text)
    notes: list[str] = []
    if args.task:
        doc["task"] = {"entry": args.task, "extensions": []}
        doc["task"]["params"] = {}
    if args.from_training_args is not None:
        try:
            c = ta.convert(ta.read(args.from_training_args), str(args.from_training_args), args.dataset_size)
        except ta.TrainingArgsError as exc:
            raise UsageError(str(exc)) from None
        keep = {k: v for k, v in doc["batch"].items() if k in ("data_replicas",)}
        doc["batch"] = {**keep, **c.batch}
        doc["training"] = {"device": doc["training"].get("device", "auto"), **c.training}
        if c.validation:
            doc["validation"] = {**doc.get("validation", {}), **c.validation}
        if c.checkpoints:
            doc["checkpoints"] = {**doc.get("checkpoints", {}), **c.checkpoints}
        lr = float(c.training["lr"])
        doc["variants"] = [
            {
                "id": "as-trained",
                "reference": True,
                "differs": "reference",
                "why": f"the settings of {args.from_training_args.name}, as the user would have run them",
            },
            {
                "id": "lr-half",
                "set": {"lr": lr / 2},
                "differs": "learning rate halved",
                "why": "is the rate too aggressive for this budget?",
            },
            {
                "id": "lr-double",
                "set": {"lr": lr * 2},
                "differs": "learning rate doubled",
                "why": "does this budget reward a larger step?",
            },
        ]
        notes = list(c.notes)
        said = f"[batch] and [training] converted from {args.from_training_args.name}"
        if c.seed is not None:
            said += f" (its seed {c.seed}: give it to the series, `--seeds {c.seed}`)"
        if notes:
            said += ". Not carried over: " + " ".join(notes)
        doc["campaign"]["notes"] = said
    return tomli_w.dumps(doc), notes
