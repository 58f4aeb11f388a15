"""Issue 36, item 6: every CLI table readable at 80 columns.

Each command renders on the recorded campaign (tests/tui/fixtures/demo, made without torch) with ``COLUMNS=80``:
no line is wider than 80 cells, and every run id, variant id and number the records hold appears whole (Rich on its
own cut run ids to ``r00…``, broke ``0.008669`` across lines and cut headers to ``se…``); what did not fit is a
column left out and named in a footer, never a cut word.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from cockpit import compare, runs, termout
from cockpit import notebook as nbm
from cockpit.cli import main
from cockpit.commands.series import print_results
from cockpit.estimate import report as est
from tests.tui.support import FIXTURE

WIDTH = 80


@pytest.fixture
def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    dest = tmp_path / "demo"
    shutil.copytree(FIXTURE, dest)
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.chdir(tmp_path)  # paths printed relative: a path is one word, which no width can wrap
    return dest


def printed(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def fits(text: str) -> None:
    wide = [ln for ln in text.splitlines() if cell_len(ln) > WIDTH]
    assert not wide, "\n".join(f"[{cell_len(ln)}] {ln}" for ln in wide)


def words(text: str) -> set[str]:
    """Every whitespace-separated word, with the table borders and the punctuation around it taken off."""
    return {w.strip("│┃|,;:()[]") for w in re.split(r"[\s│┃]+", text)}


def whole(text: str, *values: str) -> None:
    seen = words(text)
    missing = [v for v in values if v and v not in seen]
    assert not missing, f"not whole: {missing}\n{text}"


def test_runs(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(capsys, "runs", "demo")
    fits(out)
    rows = runs.view(nbm.load(demo))
    whole(out, *(r.id for r in rows), *(r.variant for r in rows), *(r.status for r in rows))
    whole(out, *(f"{r.peak_mib:,.0f}" for r in rows if r.peak_mib is not None))
    assert "se…" not in out and "…" not in out
    if "columns left out" in out:
        assert "widen the terminal or use --json" in out


def test_compare(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(capsys, "compare", "demo")
    fits(out)
    data = compare.collect(demo)
    whole(out, *(g["variant"] for g in data["quality"]), *(r["id"] for r in data["not_completed"]))
    whole(out, *(f"{g['stats']['mean']:.4g}" for g in data["quality"] if g["stats"]["mean"] is not None))
    whole(out, *(f"{g['stats']['std']:.4g}" for g in data["quality"] if g["stats"]["std"] is not None))
    whole(out, *(m["run"] for m in data["memory"].values() if m["run"]))
    assert "…" not in out


@pytest.mark.parametrize("command", ["sheet", "plan", "check", "batch"])
def test_prose_commands_wrap(command: str, demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(capsys, command, "demo")
    fits(out)
    if command in ("sheet", "plan"):
        whole(out, "r0001", "lr1e-4")
    if command == "check":
        whole(out, *(v.id for v in nbm.load(demo).variants))


def test_report_print(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(capsys, "report", "demo", "--print")
    fits(out)
    whole(out, *(r.id for r in runs.view(nbm.load(demo))))
    target = demo / "report" / "report.md"
    assert max(len(ln) for ln in target.read_text().splitlines()) > WIDTH  # the file keeps every column


def test_series_summary(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [r for r in runs.view(nbm.load(demo)) if r.kind == "train"]
    results = [
        {
            "run": r.id,
            "variant": r.variant,
            "seed": r.seed,
            "follows": "r0003" if i == 0 else "",
            "status": r.status,
            "stop_reason": r.stop_reason,
            "updates": 200,
            "planned_updates": 200,
            "final_val_loss": 3.8403 + i / 1000,
            "step_time_s": 0.008669,
            "duration_s": r.duration_s,
        }
        for i, r in enumerate(rows)
    ]
    print_results(results, 812.0, demo / "campaign.toml")
    out = capsys.readouterr().out
    fits(out)
    whole(out, *(r.id for r in rows), *(r.variant for r in rows), "0.009", "200/200")
    whole(out, *(f"{x['final_val_loss']:.4f}" for x in results))
    assert "r00…" not in out


def test_estimate() -> None:
    rows = [
        est.PhaseRow(name, f"{m} examples, longest {n} tokens", 31_204.0 + i, 33_000.0 + i, 34_382.0 + i, 30_000.0)
        for i, (name, m, n) in enumerate([("forward", 8, 1024), ("update_second", 8, 1024), ("validation", 64, 1024)])
    ]
    fit_rows = est.fits(*_traces(), 0.1)
    e = est.Estimate("demo", "lr1e-4", 8, 4, "bf16", 124_000_000, 124_000_000, "adamw", rows, "validation", 1, 0.1,
                     fit_rows, ["a model of the CUDA caching allocator " * 5])  # fmt: skip
    out_file = Console(width=WIDTH, record=True, file=open("/dev/null", "w"))  # noqa: SIM115 - the record is read
    termout.print_lines(out_file, est.blocks(e))
    out = out_file.export_text()
    fits(out)
    whole(out, *(f"{r.allocated_mib:,.0f}" for r in rows), *(f"{r.reserved_mib:,.0f}" for r in rows))
    whole(out, *(f.gpu.split()[0] for f in fit_rows), *(f"{f.largest_microbatch:,}" for f in fit_rows))


def _traces() -> tuple[object, object]:
    from cockpit.estimate import trace

    def t(m: int, mib: float) -> trace.Trace:
        ph = trace.PhaseMemory("update_second", "", int(mib * 2**20), int(mib * 2**20), 0)
        return trace.Trace(m, True, True, [ph], 1, 1, 0.0)

    return t(8, 10_000), t(4, 6_000)


def test_the_fitter_leaves_columns_out_in_order_and_never_cuts_a_word() -> None:
    t = Table(title="t")
    for h in ("run", "variant", "a long header", "notes", "follows"):
        t.add_column(h)
    for i in range(3):
        t.add_row(f"r000{i}", "variant-with-a-long-id", "123,456,789", "words " * 12, "r0001")
    con = Console(width=40, record=True, file=open("/dev/null", "w"))  # noqa: SIM115 - the record is read
    dropped = termout.print_table(con, t, drop=["follows", "notes", "a long header"])
    out = con.export_text()
    assert dropped[0] == "follows"
    fits_in = [ln for ln in out.splitlines() if cell_len(ln) > 40]
    assert not fits_in
    whole(out, "r0000", "r0001", "r0002", "variant-with-a-long-id")
    assert "columns left out at 40 columns: " + ", ".join(dropped) in " ".join(out.split())
    json.dumps(dropped)  # plain names, as --json users would look them up
