"""The TUI's pilot goes through the CLI's pre-start checks (cockpit.prestart.before_pilot; issue 36, item 5): a task
that does not parse is refused before a run exists, naming the task file's line (not importlib's frame), and a
task that can run starts its pilot as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit import prestart, runs
from cockpit.tui.processes import ProcessLauncher
from cockpit.tui.screens.run import RunScreen
from tests.tui.conftest import SleepLauncher
from tests.tui.test_screens import SIZE, shows, until

pytestmark = pytest.mark.slow  # the pre-start check imports the task in a child process, as `cockpit pilot` does


@pytest.fixture
def launcher():
    """The tests' harmless launcher, but with the application's real pre-start checks."""

    class Checked(SleepLauncher):
        check = ProcessLauncher.check

    fake = Checked()
    yield fake
    fake.close()


def test_the_apps_launcher_checks_with_the_clis_function(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[Path, str]] = []
    monkeypatch.setattr(prestart, "before_pilot", lambda campaign, variant: asked.append((campaign, variant)))
    ProcessLauncher().check(Path("c"), "v")
    assert asked == [(Path("c"), "v")]


def broken(camp: Path) -> int:
    """The campaign's task made a file with a syntax error; the line that does not parse."""
    (camp / "task.py").write_text("import torch\n\n\ndef collate(examples, params)\n    return {}\n")
    toml = camp / "campaign.toml"
    toml.write_text(toml.read_text().replace('"cockpit.tasks.tinylm:task"', '"task.py:task"'))
    return 4


async def test_a_task_that_does_not_parse_is_refused_before_a_run_exists(make_app, recorded: Path, launcher):
    line = broken(recorded)
    before = set(runs.run_dirs(recorded))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        await until(pilot, shows(app, "Start a pilot"))
        await pilot.press("enter", "enter")
        await until(pilot, lambda: any("pilot not started" in a for a in app.asked), timeout=120, what="the refusal")
        said = next(a for a in app.asked if "pilot not started" in a)
        assert f"task.py:{line}" in said and "does not parse" in said, said
        assert "frozen importlib" not in said and "nothing was started" in said, said
        assert not isinstance(app.screen, RunScreen)
    assert set(runs.run_dirs(recorded)) == before and not launcher.started  # no run folder, no process


async def test_a_task_that_can_run_starts_its_pilot_after_the_checks(make_app, launcher):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        await until(pilot, shows(app, "Start a pilot"))
        await pilot.press("enter", "enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen), timeout=120, what="the new run's screen")
        assert len(launcher.started) == 1
        await until(pilot, shows(app, "running"), what="the new run's status")
        assert any("checking the task before the pilot" in a for a in app.asked)
