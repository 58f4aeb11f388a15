"""The layout holds: no module of the package over 500 lines (a module that grows past it is doing two jobs).

The import cycles are checked by tests/tui/test_structure.py (grimp reads every import, lazy ones included).
"""

from __future__ import annotations

from pathlib import Path

LIMIT = 500


def test_no_module_over_500_lines() -> None:
    root = Path(__file__).resolve().parents[2] / "cockpit"
    long = {
        str(p.relative_to(root)): n
        for p in sorted(root.rglob("*.py"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > LIMIT
    }
    assert long == {}, f"split these modules (lines): {long}"
