"""What a probe watches: the notebook's [probe] as frozen in the run's run.toml, and the child's environment. No torch."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, cast

from . import channel

if TYPE_CHECKING:
    from ..runs import RunToml, TomlValue

BOOT_DIR = Path(__file__).resolve().parent / "boot"  # holds the sitecustomize the script's interpreter runs


class ProbeToml(TypedDict, total=False):
    """run.toml's ``[extra.probe]``, as :meth:`ProbeConfig.frozen` wrote it: one key per field."""

    command: list[str]
    env: dict[str, str]
    steps: int
    resume: list[str]
    to_end: bool
    save_within: int
    compare_steps: int
    cwd: str


class ChildConfig(TypedDict):
    """What the instrumentation reads from its environment (:meth:`ProbeConfig.child`)."""

    mode: str
    steps: int
    to_end: bool
    save_within: int
    compare_steps: int
    resume: bool  # a resume command is given: the probe waits for steps after a save to compare
    runner: int  # the run process's pid


@dataclass
class ProbeConfig:
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    steps: int = 5
    resume: list[str] = field(default_factory=list)
    to_end: bool = False
    save_within: int = 1000
    compare_steps: int = 3
    cwd: str = ""

    @classmethod
    def from_frozen(cls, frozen: RunToml) -> ProbeConfig:
        """From a run.toml: ``[extra.probe]``, written by ``cockpit probe`` when it created the run."""
        raw = (frozen.get("extra") or {}).get("probe") or {}
        if not isinstance(raw, dict) or not raw.get("command"):
            raise ValueError("run.toml has no [extra.probe] command: create probes with `cockpit probe`")
        names = {f for f in cls.__dataclass_fields__}
        return cls(**cast(ProbeToml, {k: v for k, v in raw.items() if k in names}))  # the table frozen() wrote

    def frozen(self) -> dict[str, TomlValue]:
        """The ``[extra.probe]`` table of the run's run.toml (:class:`ProbeToml`)."""
        return {
            "command": list(self.command),
            "env": dict(self.env),
            "steps": self.steps,
            "resume": list(self.resume),
            "to_end": self.to_end,
            "save_within": self.save_within,
            "compare_steps": self.compare_steps,
            "cwd": self.cwd,
        }

    def child(self, mode: str, runner_pid: int) -> str:
        """The JSON the instrumentation reads from its environment."""
        cfg: ChildConfig = {
            "mode": mode,
            "steps": self.steps,
            "to_end": self.to_end,
            "save_within": self.save_within,
            "compare_steps": self.compare_steps,
            "resume": bool(self.resume),
            "runner": runner_pid,
        }
        return json.dumps(cfg)

    def environment(self, mode: str, fd: int, base: dict[str, str] | None = None) -> dict[str, str]:
        """The script's environment: the run process's, [probe] env, and the instrumentation on PYTHONPATH."""
        env = dict(os.environ if base is None else base)
        env.update(self.env)
        paths = [str(BOOT_DIR)]
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env["PYTHONUNBUFFERED"] = "1"
        env[channel.FD_ENV] = str(fd)
        env[channel.CONFIG_ENV] = self.child(mode, os.getpid())
        env.pop(channel.CLAIM_ENV, None)
        return env


def shown(argv: list[str], limit: int = 120) -> str:
    """A command line as one readable string (shell quoting), shortened for tables and stop reasons."""
    import shlex

    text = shlex.join(argv)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def script_name(argv: list[str]) -> str:
    """The script a command runs (``train.py`` of ``python train.py --lr 3``), else its program."""
    prog = Path(argv[0]).name if argv else "?"
    if prog.startswith("python") or prog == Path(sys.executable).name:
        rest = argv[1:]
        i = 0
        while i < len(rest):
            a = rest[i]
            if a == "-m" and i + 1 < len(rest):
                return rest[i + 1]
            if a in ("-c",):
                return "python -c"
            if a in ("-W", "-X") and i + 1 < len(rest):
                i += 2
                continue
            if not a.startswith("-"):
                return Path(a).name
            i += 1
    return prog
