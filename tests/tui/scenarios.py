"""Campaigns the TUI tests and benchmarks build on the recorded fixture: hundreds of runs, many seeds,
a stopped pilot. Deterministic (fixed times, seeded randomness), written in one notebook save each."""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

from cockpit import events as ev
from cockpit import notebook as nbm

from . import make_fixture as mf

WD = nbm.Variant(id="wd0.1", differs="weight decay 0.1", set={"weight_decay": 0.1}, why="does decay help this short?")


def _iso(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="seconds")


def add_series(campaign: Path, runs: int, seeds: int | None = None, first: int = 12) -> list[str]:
    """``runs`` more series runs (ids from r{first}), each variant over many seeds, written as a series writes them.

    lr2e-4 diverges for one seed in seven; one run in eleven lost its process (crashed, no final event);
    a variant wd0.1 is added. Returns the new run ids.
    """
    nb = nbm.load(campaign)
    if all(v.id != WD.id for v in nb.variants):
        nb.variants.append(WD)
    variants = [v.id for v in nb.variants if v.kind == "quality"]
    seeds = seeds or max(1, -(-runs // len(variants)))
    rows: list[nbm.RunRow] = []
    t = mf.SERIES_T0 + 86400
    made: list[str] = []
    for i in range(runs):
        variant = variants[i % len(variants)]
        seed = (i // len(variants)) % seeds + 3  # seeds 0-2 of the first three variants are the fixture's
        rid = f"r{first + i:04d}"
        rdir = campaign / "runs" / rid
        rdir.mkdir(parents=True)
        mf.run_toml(rdir, rid, variant, seed, nb, kind="train")
        lr = nb.params(variant)["lr"]
        diverge = 83 if variant == "lr2e-4" and seed % 7 == 1 else None
        got = mf.train_run(rdir, nb, rid, variant, seed, lr, diverge, t)
        status, reason = got["status"], got["reason"]
        if i % 11 == 10:  # killed: the file ends without run_end, and there is no metrics.json
            lines = (rdir / ev.EVENTS_FILE).read_text().splitlines(keepends=True)
            (rdir / ev.EVENTS_FILE).write_text("".join(lines[: len(lines) // 2]))
            (rdir / "metrics.json").unlink()
            status, reason = "crashed", "process ended without a final event during phase train"
        rows.append(
            nbm.RunRow(
                id=rid,
                variant=variant,
                seed=seed,
                kind="train",
                status=status,
                stop_reason=reason,
                phase="train",
                started=_iso(got["start"]),
                ended=_iso(got["end"]),
                duration_s=round(got["duration"], 2),
            )
        )
        made.append(rid)
        t = got["end"] + 5.0

    def change(book: nbm.Notebook) -> None:
        if all(v.id != WD.id for v in book.variants):
            book.variants.append(WD)
        book.runs.extend(rows)

    nbm.mutate(campaign, change)
    return made


def add_stopped_pilot(campaign: Path, rid: str = "r0012", phase: str = "worst_case") -> str:
    """A pilot a person stopped (SIGTERM) during ``phase``: the pilot records that phase as a failed gate with
    a failed ``stopped`` check and the phase's failure remedy, and ends ``stopped``."""
    rdir = campaign / "runs" / rid
    rdir.mkdir(parents=True)
    nb = nbm.load(campaign)
    mf.run_toml(rdir, rid, "lr1e-4", 0, nb)
    mf.gpu_run(rdir, rid, "lr1e-4", mf.T0 + 200000)
    kept: list[str] = []
    end_t = mf.T0 + 200000
    for raw in (rdir / ev.EVENTS_FILE).read_text().splitlines(keepends=True):
        e = json.loads(raw)
        if e["kind"] == ev.GATE and e["phase"] == phase:
            e["verdict"] = "fail"
            e["checks"] = [{"name": "stopped", "ok": False, "detail": "stopped by a signal during this phase"}]
            e["remedy"] = "lower the microbatch, enable activation checkpointing or bf16"
            e["message"] = "stopped: stopped by a signal during this phase"
            kept.append(json.dumps(e, separators=(",", ":")) + "\n")
            end_t = e["t"]
            break
        kept.append(raw)
    kept.append(
        mf.line(
            ev.RUN_END,
            end_t + 0.1,
            status="stopped",
            stop_reason=f"stopped by signal SIGTERM during {phase}",
            phase=phase,
            message="",
            exit_code=int(ev.ExitCode.STOPPED),
            duration_s=round(end_t + 0.1 - (mf.T0 + 200000), 3),
        )
    )
    (rdir / ev.EVENTS_FILE).write_text("".join(kept))
    row = nbm.RunRow(
        id=rid,
        variant="lr1e-4",
        seed=0,
        status="stopped",
        stop_reason=f"stopped by signal SIGTERM during {phase}",
        phase=phase,
        peak_mib=1180.0,
        duration_s=10.0,
    )
    nbm.mutate(campaign, lambda book: book.runs.append(row))
    return rid
