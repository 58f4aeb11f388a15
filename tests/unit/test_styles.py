"""One table of status, verdict and check colours (cockpit/styles.py), read by the CLI and the TUI alike."""

from __future__ import annotations

import ast
from pathlib import Path

from cockpit import gatetable, styles
from cockpit.commands import runs as runs_command
from cockpit.tui import style as tui_style

ROOT = Path(__file__).resolve().parents[2]
WORDS = set(styles.STATUS_STYLE) | set(styles.VERDICT_STYLE) | set(styles.CHECK_STYLE)
COLOURS = ("red", "green", "yellow", "cyan", "magenta", "dim")


def _text(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def test_the_cli_and_the_tui_colour_a_crashed_run_and_each_verdict_alike() -> None:
    assert runs_command.STATUS_STYLE["crashed"] == tui_style.STATUS_STYLE["crashed"]
    assert runs_command.STATUS_STYLE == tui_style.STATUS_STYLE
    assert gatetable.VERDICT_STYLE == tui_style.VERDICT_STYLE


def test_no_other_module_writes_its_own_map_from_status_or_verdict_words_to_colours() -> None:
    found = []
    for path in sorted((ROOT / "cockpit").rglob("*.py")):
        if path == ROOT / "cockpit" / "styles.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Dict):
                continue
            pairs = [(k.value, v.value) for k, v in zip(node.keys, node.values, strict=True) if _text(k) and _text(v)]
            if len([k for k, v in pairs if k in WORDS and any(c in str(v) for c in COLOURS)]) >= 3:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == [], found
