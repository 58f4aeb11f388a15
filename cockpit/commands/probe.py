"""``cockpit probe CAMPAIGN -- python train.py ARGS...``: measure an unmodified training script, phase by phase.

The command goes into the notebook's ``[probe]`` (with ``--steps``, ``--resume``, ``--to-end`` and
``--env``), so ``cockpit probe CAMPAIGN`` alone runs it again; the run starts detached, as a pilot
does, and this command follows its gates and prints the table.

``cockpit probe -- python train.py ARGS`` without a campaign makes one for the script: ``campaigns/train``,
a *probe campaign* (``[campaign] kind = "probe"``) that holds the command and no task, template variants or
settings. Every probe run records the script's own command-line settings (``--lr 3e-4`` is ``lr = 0.0003``),
never a variant's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

from .. import launch
from .. import notebook as nbm
from ..errors import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "campaign",
        nargs="?",
        help="campaign folder or campaign.toml (default: a probe campaign for the script, campaigns/<script name>)",
    )
    p.add_argument("--variant", help="the variant this probe measures (default: the reference)")
    p.add_argument("--steps", type=int, help="optimizer steps to watch (default 5): the first, then the later ones")
    p.add_argument(
        "--resume",
        metavar="COMMAND",
        help="the command that resumes the script from its own checkpoint, as one string "
        "(e.g. --resume 'python train.py --resume'): run after the probe, compared with it",
    )
    p.add_argument("--to-end", action="store_true", help="watch the script to its end instead of stopping it")
    p.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="an environment variable for the script"
    )
    p.add_argument(
        "--batch-dim",
        type=int,
        metavar="N",
        help="the dimension of the model's input that is the batch, where the probe cannot read it (recorded in "
        "[probe] env as COCKPIT_PROBE_BATCH_DIM)",
    )
    p.add_argument("--detach", action="store_true", help="start and return at once (follow later with `cockpit runs`)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "script",
        nargs="*",
        metavar="-- COMMAND",
        help="after --, the command that runs the script as you would run it (default: [probe] command)",
    )


def spec_from(args: argparse.Namespace, nb: nbm.Notebook) -> tuple[nbm.ProbeSpec, bool]:
    """The [probe] this run uses: the notebook's, with what the command line gives; and whether it changed."""
    old = nb.probe
    spec = dataclasses.replace(old) if old is not None else nbm.ProbeSpec()
    command = list(args.script or [])
    if command and command[0] == "--":
        command = command[1:]
    if command:
        if command != spec.command and args.resume is None and spec.resume:
            # a resume command belongs to the script it resumes: a new script leaves the old one out
            print(f"[probe] resume dropped: it resumed `{shlex.join(spec.resume)}`'s checkpoint", file=sys.stderr)
            spec.resume = []
        spec.command = command
    if args.steps is not None:
        if not 2 <= args.steps <= 100_000:
            raise UsageError(f"--steps {args.steps}: watch 2 to 100,000 optimizer steps (the first, then later ones)")
        spec.steps = args.steps
    if args.resume is not None:
        try:
            spec.resume = shlex.split(args.resume)  # --resume "" drops it
        except ValueError as exc:
            raise UsageError(f"--resume {args.resume!r}: {exc}; give the command as one quoted string") from None
    if args.to_end:
        spec.to_end = True
    if args.env:
        env = dict(spec.env)
        for item in args.env:
            name, eq, value = item.partition("=")
            if not eq or not name:
                raise UsageError(f"--env {item!r}: expected NAME=VALUE, e.g. --env CUDA_VISIBLE_DEVICES=0")
            env[name] = value
        spec.env = env
    if getattr(args, "batch_dim", None) is not None:
        if not 0 <= args.batch_dim <= 8:
            raise UsageError(f"--batch-dim {args.batch_dim}: give the input's batch dimension, 0 to 8")
        spec.env = {**spec.env, "COCKPIT_PROBE_BATCH_DIM": str(args.batch_dim)}
    if not spec.command:
        where = nb.path or nbm.find(args.campaign)
        raise UsageError(
            f"no command to probe: give one after --, e.g. `cockpit probe {where.parent} -- python train.py`, "
            f"or set command in the [probe] table of {where}."
        )
    return spec, spec != old


def check_program(argv: list[str], what: str) -> None:
    prog = argv[0]
    found = shutil.which(prog) if os.sep not in prog else (prog if os.access(prog, os.X_OK) else None)
    if not found:
        raise UsageError(
            f"{what}: the program {prog!r} was not found"
            + (" on PATH" if os.sep not in prog else " or is not executable")
            + f" (from {os.getcwd()}); give the interpreter that has torch and Cockpit installed, "
            f"e.g. {sys.executable} train.py"
        )


def run(args: argparse.Namespace) -> int:
    from ..probe.config import ProbeConfig, shown
    from .pilot import follow, print_result, summary

    path = nbm.find(args.campaign) if args.campaign else campaign_for(script_command(args))
    nb = nbm.load(path)
    spec, changed = spec_from(args, nb)
    if args.variant:
        nb.variant(args.variant)  # a clear error for an unknown variant, before anything is written
    check_program(spec.command, "[probe] command")
    if spec.resume:
        check_program(spec.resume, "[probe] resume")
    if changed:

        def record(fresh: nbm.Notebook) -> None:
            fresh.probe = spec

        nbm.mutate(path, record, read=nb)
        print(f"recorded in [probe] of {path}: {shown(spec.command)}", file=sys.stderr)
    cfg = ProbeConfig(
        command=list(spec.command),
        env=dict(spec.env),
        steps=spec.steps,
        resume=list(spec.resume),
        to_end=spec.to_end,
        save_within=spec.save_within,
        compare_steps=spec.compare_steps,
        cwd=os.getcwd(),
    )
    rid, rdir = launch.new_run(
        path,
        args.variant,
        0,
        kind="probe",
        nproc=1,
        overrides=script_settings(spec.command),
        extra={"probe": cfg.frozen()},
    )
    if args.detach:
        print(json.dumps({"run": rid, "dir": str(rdir)}) if args.json else f"started {rid} in {rdir}")
        return 0
    print(
        f"probe {rid} of `{shown(spec.command)}` started in {Path(rdir)} (detached: closing this terminal does not "
        "stop it)",
        file=sys.stderr,
    )
    st = follow(rdir, quiet=args.json)
    if args.json:
        print(json.dumps(summary(st), indent=2, default=str))
    else:
        print_result(st, noun="probe", rss_of="the script's process", probe_campaign=nb.is_probe)
    return int(st.exit_code)


def script_command(args: argparse.Namespace) -> list[str]:
    command = list(args.script or [])
    if not command:
        raise UsageError(
            "give the campaign, or the command after --: `cockpit probe -- python train.py` makes a probe "
            "campaign for the script under campaigns/; `cockpit probe CAMPAIGN -- python train.py` files the probe "
            "in an existing one."
        )
    return command


def _script_at(command: list[str]) -> tuple[str, int]:
    """The script a command runs (``train.py``, ``-m pkg.train``) and where its own arguments start."""
    for i, arg in enumerate(command):
        if arg == "-m" and i + 1 < len(command):
            return command[i + 1].rsplit(".", 1)[-1], i + 2
        if arg.endswith(".py"):
            return Path(arg).stem, i + 1
    return Path(command[0]).name, 1


def script_name(command: list[str]) -> str:
    """A campaign name for a command: its script's stem (``train.py``, ``-m pkg.train``), else the program's."""
    slug = re.sub(r"[^a-z0-9_-]+", "-", _script_at(command)[0].lower()).strip("-_")
    return slug or "probe"


def campaign_for(command: list[str], root: Path | None = None) -> Path:
    """The probe campaign of a command: ``campaigns/<script name>`` made for it, or the one made for it before.

    A folder of that name that holds something else (a task campaign, another script's probe) is never
    reused: the next free name (``train-2``) is made instead.
    """
    root = root or Path("campaigns")
    base = script_name(command)
    for n in range(1, 1000):
        folder = root / (base if n == 1 else f"{base}-{n}")
        path = folder / nbm.NOTEBOOK_FILE
        if path.exists():
            try:
                old = nbm.load(path)
            except nbm.NotebookError:
                continue
            if old.is_probe and old.probe is not None and old.probe.command == command:
                return path
            continue
        if folder.exists() and any(folder.iterdir()):
            continue
        nb = nbm.Notebook(
            campaign=nbm.CampaignInfo(
                name=folder.name,
                kind="probe",
                question=f"What does `{shlex.join(command)}` need, phase by phase, before a long rental?",
            ),
            probe=nbm.ProbeSpec(command=list(command)),
            **nbm.probe_campaign_sections(),
        )
        folder.mkdir(parents=True, exist_ok=True)
        nbm.create(path, nbm.dumps(nb))
        print(
            f"made {folder}: a probe campaign for `{shlex.join(command)}` (its settings are the script's own; "
            f"`cockpit probe {folder}` runs it again)",
            file=sys.stderr,
        )
        return path
    raise UsageError(f"no free campaign name for {base!r} under {root}: name one, `cockpit probe CAMPAIGN -- ...`")


_FLAG = re.compile(r"^--?([A-Za-z][A-Za-z0-9_.-]*)(?:=(.*))?$", re.DOTALL)


def script_settings(command: list[str]) -> dict[str, object]:
    """The settings a command line gives its script: ``--lr 3e-4``, ``--batch_size=8``, ``--compile`` (true).

    Only the script's own arguments count (not the interpreter's or a launcher's, such as ``torchrun
    --nproc_per_node``). Numbers become numbers; everything else stays the string the script received.
    Positional arguments (a config file) are not settings. Recorded on the probe's run as what it ran with.
    """
    out: dict[str, object] = {}
    args = command[_script_at(command)[1] :]
    i = 0
    while i < len(args):
        m = _FLAG.match(args[i])
        i += 1
        if m is None:
            continue
        key, value = m.group(1).replace("-", "_"), m.group(2)
        if value is None:
            if i < len(args) and not _FLAG.match(args[i]):
                value = args[i]
                i += 1
            else:
                out[key] = True
                continue
        out[key] = _number(value)
    return out


def _number(text: str) -> object:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
