"""Issue 14, items 6 to 8: rows settle, writers never share a temporary, the notebook at scale: the tests that start
processes or load models (the rest: tests/unit/test_hostile_rows.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cockpit import events as ev
from cockpit import launch, runs
from cockpit import notebook as nbm
from tests.fake_runs import make_campaign


def _big(camp: Path, n: int) -> None:
    text = (camp / "campaign.toml").read_text()
    rows = "".join(
        f'\n[[decisions]]\ndate = "2024-01-{1 + i % 28:02d}"\ntext = "observation {i}"\nkind = "observation"\n'
        for i in range(n)
    )
    (camp / "campaign.toml").write_text(text + rows)


@pytest.mark.slow  # a pilot's start and end over a notebook of 20,000 runs: 4.5 s
def test_a_pilot_reads_and_writes_the_notebook_a_bounded_number_of_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    camp = make_campaign(tmp_path)
    _big(camp, 20_000)
    parse_mod = sys.modules["cockpit.notebook.parse"]
    store = sys.modules["cockpit.notebook.store"]
    counts = {"toml": 0, "convert": 0, "write": 0}
    real_loads, real_from, real_write = parse_mod.tomllib.loads, parse_mod.from_data, store._write_atomic

    def loads(text: str) -> object:
        counts["toml"] += 1
        return real_loads(text)

    def from_data(data: object, where: object = "") -> object:
        counts["convert"] += 1
        return real_from(data, where)

    def write(path: Path, text: str) -> None:
        counts["write"] += 1
        real_write(path, text)

    monkeypatch.setattr(parse_mod.tomllib, "loads", loads)
    monkeypatch.setattr(parse_mod, "from_data", from_data)
    monkeypatch.setattr(store, "from_data", from_data)
    monkeypatch.setattr(store, "_write_atomic", write)

    # what `cockpit pilot` does before the process starts
    rid, rdir = launch.new_run(camp, None, 0, starter=lambda *a, **k: 0)
    assert counts == {"toml": 1, "convert": 2, "write": 1}, counts  # one parse, one validation, one write
    # what the run process does at its end
    w = ev.EventWriter(rdir / ev.EVENTS_FILE)
    w.emit(ev.RUN_START, run_id=rid, world=1)
    w.emit(ev.RUN_END, status="passed", stop_reason="every gate passed", exit_code=0)
    w.close()
    runs.finish_run(camp, rdir)
    assert counts["write"] == 2 and counts["convert"] == 4, counts
    assert counts["toml"] == 1, counts  # the save left a JSON copy of its values: no second TOML parse
    # and the follower does not read it again for a run that wrote its own end
    from cockpit.commands.pilot import follow

    follow(rdir, quiet=True)
    assert counts["write"] == 2 and counts["convert"] == 4, counts
    assert nbm.load(camp).run(rid).status == "passed"


@pytest.mark.slow  # writes and parses a notebook of 20,000 runs: 5 s
def test_a_hand_edited_large_notebook_is_parsed_again(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    _big(camp, 20_000)
    nbm.mutate(camp, lambda nb: setattr(nb.campaign, "question", "before"))
    assert (camp / nbm.store.CACHE_FILE if hasattr(nbm, "store") else camp / ".campaign.cache.json").exists()
    text = (camp / "campaign.toml").read_text().replace('question = "before"', 'question = "after"')
    (camp / "campaign.toml").write_text(text)
    assert nbm.load(camp).campaign.question == "after"
