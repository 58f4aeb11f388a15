"""The ``cockpit`` entry point.

Every subcommand lives in ``cockpit/commands/<name>.py`` with two functions,
``add_arguments(parser)`` and ``run(args) -> int``, and is imported only when
it is chosen: ``cockpit --help`` must stay instant and import neither torch
nor textual (a test checks ``sys.modules``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys

from . import __version__
from .errors import CockpitError

# name -> one-line description. The order is the order of the help text.
COMMANDS: dict[str, str] = {
    "tui": "open the live cockpit on a campaign (the default with no command)",
    "new": "create a campaign folder from the template",
    "check": "validate a campaign.toml and print its summary",
    "batch": "batch arithmetic: examples per update, updates per epoch, what a change moves",
    "pilot": "run every phase of the campaign once, gated and measured, in a detached process",
    "probe": "measure an unmodified training script phase by phase: cockpit probe [CAMPAIGN] -- python train.py",
    "runs": "list a campaign's runs with status, stop reason, phase and peak memory",
    "stop": "stop a running pilot or series run (SIGTERM, then SIGKILL)",
    "inspect": "show what reaches the loss: the examples a run's data gate recorded",
    "series": "run variants x seeds at the campaign's fixed budget, with its stop rules",
    "protocol": "declare a new protocol revision after the fixed rules changed (dated, with why)",
    "compare": "compare variants across seeds and memory variants side by side",
    "stack": "check this machine's software stack (torch, CUDA, driver, GPUs, extensions)",
    "estimate": "predict GPU memory per pilot phase on any machine, and the largest microbatch per GPU size",
    "sheet": "selection sheet from measured peaks: which GPU memory sizes fit",
    "plan": "rental plan for 3, 7 and 30 days from measured phase times",
    "report": "write the campaign's readable Markdown conclusion",
    "archive": "gather a run's artifact, config, revisions and hashes for safekeeping",
}


class _Help(argparse.RawDescriptionHelpFormatter):
    pass


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    width = max(len(n) for n in COMMANDS)
    listing = "\n".join(f"  {name:<{width}}  {desc}" for name, desc in COMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="cockpit",
        formatter_class=_Help,
        description="Cockpit: pilot a training campaign on a rented GPU box before paying for it.",
        epilog=f"commands:\n{listing}\n\nRun `cockpit COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"cockpit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help="one of the commands below")
    for name, desc in COMMANDS.items():
        # No help= here: argparse would list the commands a second time, wrapped
        # at the terminal width. The epilog lists each on exactly one line.
        p = sub.add_parser(name, description=desc, formatter_class=_Help)
        if name == only:
            _module(name).add_arguments(p)
    return parser


def _module(name: str):
    try:
        return importlib.import_module(f"cockpit.commands.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"cockpit.commands.{name}":
            raise
        raise CockpitError(
            f"the command {name!r} is not part of this install of Cockpit; "
            f"run ./setup.sh again from the repository, or `cockpit --help` for the commands."
        ) from None


def _names_a_campaign(arg: str) -> bool:
    from .notebook.parse import resolve

    p = resolve(arg)
    return p.is_dir() or p.name == "campaign.toml"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Find the chosen command without importing any of them.
    chosen = next((a for a in argv if not a.startswith("-")), None)
    if chosen is None and not any(a in ("-h", "--help", "--version") for a in argv):
        argv = ["tui", *argv]
        chosen = "tui"
    if chosen is not None and chosen not in COMMANDS and _names_a_campaign(chosen):
        argv = ["tui", *argv]  # `cockpit campaigns/x` or `cockpit x`: the TUI on that campaign
        chosen = "tui"
    if chosen is not None and chosen not in COMMANDS:
        build_parser().print_usage(sys.stderr)
        print(
            f"cockpit: unknown command {chosen!r}; run `cockpit --help` for the list.",
            file=sys.stderr,
        )
        return 2
    try:
        parser = build_parser(only=chosen)
    except CockpitError as exc:
        print(f"cockpit {chosen}: {exc}", file=sys.stderr)
        return exc.exit_code
    # `cockpit probe CAMPAIGN -- python train.py --lr 3`: what follows "--" is a command line of its own,
    # handed over whole (argparse would read its options as cockpit's).
    tail: list[str] | None = None
    if "--" in argv:
        cut = argv.index("--")
        argv, tail = argv[:cut], argv[cut + 1 :]
    args = parser.parse_args(argv)
    if tail is not None:
        if not hasattr(args, "script"):
            print(
                f"cockpit {args.command}: takes no command after --; run `cockpit {args.command} --help`.",
                file=sys.stderr,
            )
            return 2
        args.script = tail
    try:
        code = int(_module(args.command).run(args) or 0)
        sys.stdout.flush()  # a reader that went away (`cockpit runs | head`) shows here, not at the exit
        return code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - last line of defence: one paragraph, not a traceback
        if isinstance(exc, BrokenPipeError):
            return reader_gone()
        if isinstance(exc, CockpitError):
            print(f"cockpit {args.command}: {exc}", file=sys.stderr)
            return exc.exit_code
        if isinstance(exc, OSError) and not os.environ.get("COCKPIT_DEBUG"):
            print(f"cockpit {args.command}: {os_error(exc)}", file=sys.stderr)
            return 1
        raise


SIGPIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a Unix tool whose reader closed the pipe


def reader_gone() -> int:
    """Standard output's reader closed it (``cockpit runs | head``): not a disk error, nothing to say. Exit quietly
    as Unix tools do on SIGPIPE; standard output goes to /dev/null so the interpreter's own flush at the exit
    cannot complain about the closed pipe either."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return SIGPIPE_EXIT


def os_error(exc: OSError) -> str:
    """A file the command could not read or write, in one paragraph: which, why, and what to do."""
    from .fsutil import disk_full

    where = exc.filename or "a file"
    if disk_full(exc) is not None:
        return (
            f"disk full: no space left on the device while writing {where}; nothing half-written was kept. "
            "Free space (old checkpoints, artifacts, caches) and run the command again."
        )
    if isinstance(exc, PermissionError):
        return f"{where}: permission denied; make it readable and writable by this user, then run the command again."
    return (
        f"{where}: {exc.strerror or exc}. Check the file and the disk, then run the command again "
        "(COCKPIT_DEBUG=1 shows the traceback)."
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
