"""The real ``cockpit tui`` in a real terminal (tmux): open, navigate, quit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]


class Tmux:
    def __init__(self, cmd: list[str], cwd: Path) -> None:
        self.socket = f"cockpit-test-{uuid.uuid4().hex[:8]}"  # a private server: never touch the user's
        self.session = "cockpit"
        env = dict(os.environ, TERM="xterm-256color")
        self._run(
            "new-session", "-d", "-x", "100", "-y", "30", "-s", self.session, "-c", str(cwd), " ".join(cmd), env=env
        )

    def _run(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, env=env, timeout=10)

    def screen(self) -> str:
        return self._run("capture-pane", "-p", "-t", self.session).stdout

    def keys(self, *keys: str) -> None:
        self._run("send-keys", "-t", self.session, *keys)

    def wait_for(self, text: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.1)
        raise AssertionError(f"{text!r} never appeared; the screen was:\n{screen}")

    def alive(self) -> bool:
        return self._run("has-session", "-t", self.session).returncode == 0

    def kill(self) -> None:
        self._run("kill-server")


def test_cockpit_in_tmux(recorded: Path):
    term = Tmux([sys.executable, "-m", "cockpit", "tui", str(recorded)], cwd=recorded.parent)
    try:
        screen = term.wait_for("Which learning rate")
        assert "Pilot" in screen and "Help" in screen  # footer keys
        term.wait_for("crashed")  # r0002, derived from its folder
        term.keys("Enter")
        screen = term.wait_for("14/14 gates")
        assert "worst_case" in screen and "GPU memory" in screen
        term.keys("Escape")
        term.wait_for("Which learning rate")
        term.keys("C")  # shift+c in a real terminal: the compare screen
        term.wait_for("val_loss across seeds")
        term.keys("l")
        term.wait_for("update 200")
        term.keys("Escape")
        term.wait_for("Which learning rate")
        term.keys("?")
        term.wait_for("start a pilot")
        term.keys("Escape")
        term.wait_for("Which learning rate")
        term.keys("q")
        deadline = time.monotonic() + 10
        while term.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not term.alive(), "cockpit did not quit on q"
    finally:
        term.kill()
