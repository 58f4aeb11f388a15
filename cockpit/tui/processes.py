"""The processes the TUI starts, which outlive it: how they are started and stopped, and what is said of them on quitting.

Pilots and series runs run detached (``cockpit.launch``), so closing the TUI
never stops one. :class:`ProcessLauncher` is the application's launcher
(tests pass a harmless one instead, see ``api.Launcher``), and
:func:`still_running` is the line printed after the app exits, so the user
knows which runs go on and how to reach them again.
"""

from __future__ import annotations

from pathlib import Path

from .. import notebook as nbm
from .. import runs


class ProcessLauncher:
    """Checks, starts and stops real pilots and series runs, detached (cockpit.launch)."""

    def check(self, campaign: Path, variant: str) -> None:
        """The CLI's pre-start checks of a pilot (:func:`cockpit.prestart.before_pilot`), the same function."""
        from .. import prestart

        prestart.before_pilot(campaign, variant)

    def start(self, rdir: Path, nproc: int = 1, env: dict[str, str] | None = None, resume: bool = False) -> int:
        from .. import launch

        return launch.start(rdir, nproc=nproc, env=env, resume=resume)

    def stop(self, rdir: Path) -> str:
        from .. import launch

        return launch.stop(rdir)


def still_running(campaign_dir: Path, nb: nbm.Notebook) -> str:
    """One line for the terminal after quitting: the campaign's runs whose process still lives."""
    kinds = {r.id: (r.kind, r.variant, r.seed) for r in nb.runs}
    alive = []
    for rdir in runs.run_dirs(campaign_dir):
        try:
            if runs.is_alive(rdir):
                kind, variant, seed = kinds.get(rdir.name, ("run", "?", "?"))
                alive.append(f"{rdir.name} ({kind} {variant} seed {seed})")
        except OSError:
            continue
    if not alive:
        return "Cockpit closed; no run of this campaign is running."
    return (
        f"Cockpit closed; still running, detached: {', '.join(alive)}. "
        f"`cockpit` reattaches; `cockpit stop {campaign_dir} RUN` stops one."
    )
