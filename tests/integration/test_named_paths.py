"""Every repository file a comment, a docstring or a config names exists (text drifts when files move): the tests that
start processes or load models (the rest: tests/unit/test_named_paths.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_named_paths import EXAMPLES, PATH, ROOT, _comments_and_docstrings


def _texts() -> list[tuple[str, int, str]]:
    texts = [
        (str(p.relative_to(ROOT)), line, text)
        for folder in ("cockpit", "tools")
        for p in sorted((ROOT / folder).rglob("*.py"))
        for line, text in _comments_and_docstrings(p)
    ]
    for name in ("pyproject.toml", ".ci/run"):
        for i, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1):
            texts.append((name, i, line))
    return texts


def named_paths() -> list[tuple[str, int, str]]:
    """(file, line, path) for every repository path named in the scanned texts."""
    return [
        (where, line, m.group(1).rstrip("."))
        for where, line, text in _texts()
        for m in PATH.finditer(text)
        if "*" not in m.group(1)
    ]


def _exists(path: str, named_in: Path) -> bool:
    return any((base / path).exists() for base in (ROOT, ROOT / "cockpit", ROOT / "tests", named_in.parent))


@pytest.mark.slow  # seconds: a model load or a fresh process
def test_every_named_repository_file_exists() -> None:
    named = named_paths()
    assert len(named) > 20, "the scan found almost nothing: the pattern is broken"
    missing = [f"{w}:{n}: {p}" for w, n, p in named if p not in EXAMPLES and not _exists(p, ROOT / w)]
    assert missing == [], "\n".join(missing)
