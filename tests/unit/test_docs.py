"""The README is a guide that holds true: its two commands, its size, its picture, its links, and its walk-through
run as written; the reference under docs/ builds as a site with warnings as errors."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def test_the_readme_opens_with_the_two_commands_and_ci_runs_the_second() -> None:
    text = README.read_text()
    block = text.split("```\n", 2)[1]
    assert block.splitlines() == [
        "./setup.sh && .venv/bin/cockpit pilot campaigns/demo",
        "./setup.sh test && .venv/bin/python -m pytest -q",
    ]
    assert text.index("```") < 40  # first thing after the title
    assert "./setup.sh test && .venv/bin/python -m pytest -q" in (ROOT / ".ci" / "run").read_text()


def test_the_readme_is_a_guide_not_a_reference() -> None:
    text = README.read_text()
    assert len(text.encode()) < 15_000
    assert max(len(line) for line in text.splitlines()) < 1_000 or text.count("\n") > 40
    for heading in ("## Install", "## Five minutes with your own model", "## What a passed pilot means"):
        assert heading in text


def test_every_link_in_the_readme_and_docs_names_a_file_that_exists() -> None:
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to {target}, which is missing"


def test_the_picture_is_the_apps_own_rendering() -> None:
    """docs/images/run-passed.svg is the TUI's own SVG of the passed demo pilot, as the snapshot test renders it."""
    snapshot = ROOT / "tests" / "tui" / "__snapshots__" / "test_snapshots" / "test_snapshot[run_passed-120x40].svg"
    assert (ROOT / "docs" / "images" / "run-passed.svg").read_bytes() == snapshot.read_bytes()
    assert "docs/images/run-passed.svg" in README.read_text()


def walkthrough() -> list[list[str]]:
    text = README.read_text()
    block = text.split("<!-- walkthrough:start -->\n```\n", 1)[1].split("```\n<!-- walkthrough:end -->", 1)[0]
    return [shlex.split(line.split("#", 1)[0]) for line in block.splitlines() if line.strip()]


def test_the_walkthrough_is_commands_of_cockpit() -> None:
    lines = walkthrough()
    assert len(lines) >= 8 and all(argv[0] == "cockpit" for argv in lines)
    assert [argv[1] for argv in lines[:2]] == ["new", "pilot"]


def test_setup_and_the_readme_say_how_to_put_cockpit_on_the_path() -> None:
    """The walk-through types plain `cockpit`, which `./setup.sh` leaves in .venv/bin, off the PATH: set-up prints
    how to activate on both of its ways out (installed, up to date), and the README says it before the walk-through."""
    import subprocess

    script = (ROOT / "setup.sh").read_text()
    define = next(ln for ln in script.splitlines() if ln.startswith("say_path()"))
    said = subprocess.run(
        ["bash", "-c", f"VENV=.venv\n{define}\nsay_path"], capture_output=True, text=True, check=True
    ).stdout
    assert "source .venv/bin/activate" in said and ".venv/bin/cockpit" in said
    assert script.count("say_path\n") >= 2  # after "is up to date" and after "ready"
    assert script.rstrip().endswith("say_path")
    text = README.read_text()
    guide = text.split("## Five minutes with your own model", 1)[1].split("<!-- walkthrough:start -->", 1)[0]
    assert "source .venv/bin/activate" in guide and ".venv/bin/cockpit" in guide
    assert "source .venv/bin/activate" in (ROOT / "docs" / "index.md").read_text()
