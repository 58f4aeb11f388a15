"""Issue 36: ``cockpit new`` names the reference variant "reference", and check, compare, the report and the TUI
printed "reference reference". One formatter (``notebook.reference_words`` and ``role_words``) names it once."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from cockpit import compare
from cockpit import notebook as nbm
from cockpit import report as rp
from cockpit.cli import main
from cockpit.commands.check import summary
from cockpit.tui.comparetables import tables
from cockpit.tui.screens.notebookview import variants
from tests.fake_runs import series_run

TWICE = re.compile(r"\breference[ :(),]+reference\b", re.IGNORECASE)  # in words, not across a table's cells


@pytest.fixture
def mine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    assert main(["new", "mine"]) == 0
    camp = tmp_path / "campaigns" / "mine"
    assert nbm.load(camp).reference.id == "reference"  # as the template names it
    for seed in (0, 1):
        series_run(camp, "reference", seed, 3.0 + seed / 10)
        series_run(camp, "lr-half", seed, 3.2 + seed / 10)
    return camp


def test_the_formatter() -> None:
    assert nbm.reference_words("lr1e-4") == "reference lr1e-4"
    assert nbm.reference_words("reference") == nbm.reference_words("Reference ") == "reference"
    ref = nbm.Variant("reference", reference=True, differs="reference")
    assert nbm.role_words(ref) == ""
    assert nbm.role_words(nbm.Variant("lr1e-4", reference=True, differs="reference")) == "reference"
    assert nbm.role_words(nbm.Variant("lr-half", differs="learning rate halved")) == "learning rate halved"


def test_check_compare_report_and_the_tui_name_the_reference_once(mine: Path) -> None:
    nb = nbm.load(mine)
    shown = {"check": "\n".join(summary(nb))}
    data = compare.summarize(nb)
    out = io.StringIO()
    compare.render(data, Console(file=out, width=300))
    shown["compare"] = out.getvalue()
    shown["report"] = rp.build(mine)
    tui = io.StringIO()
    Console(file=tui, width=300).print(variants(nb), *tables(data, width=300))
    shown["tui"] = tui.getvalue()
    for where, text in shown.items():
        assert not TWICE.search(text), f"{where}: {TWICE.search(text)}"
    assert "Batch arithmetic (reference):" in shown["check"]
    assert "; reference)" in shown["compare"]
