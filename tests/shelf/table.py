"""The shelf's table: ``python -m tests.shelf.table [CASE ...] [--parallel N] [--keep DIR] [--json]``.

Pilots every case of the shelf (or the named ones and their families' rows) and prints one row per family:
the healthy case's outcome (its failed and warned checks, by phase) and each broken twin's outcome, the
phase and check that caught it, and whether that is where the shelf expects it. Below the table, the detail of
every check that failed or warned, so a reader sees the message without opening a run folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cockpit import runs
from tests.shelf.campaigns import CASES, family
from tests.shelf.run import run_cases

# Phases whose checks another line of work is recalibrating (accumulation, overfit, validation, the steps and
# updates): a healthy family's *warning* there is reported, not held against the data and leakage checks.
RECALIBRATING = ("forward", "backward", "update_first", "update_second", "accumulation", "overfit", "validation")


@dataclass
class Finding:
    phase: str
    check: str
    verdict: str  # "fail" or "warn"
    detail: str


@dataclass
class Row:
    name: str
    family: str
    status: str
    stop_reason: str
    findings: list[Finding] = field(default_factory=list)
    expected: str = ""  # twins: "gate / check" where the shelf expects the catch
    named: bool = False  # twins: the expected check fails (or warns) at the expected gate, naming the defect
    caught: bool = False  # twins: named, and the run ends as the shelf expects (failed, or passed for a warning)

    @property
    def fails(self) -> list[Finding]:
        return [f for f in self.findings if f.verdict == "fail"]

    @property
    def warns(self) -> list[Finding]:
        return [f for f in self.findings if f.verdict == "warn"]

    def summary(self) -> str:
        if not self.findings:
            return f"{self.status}, clean"
        parts = [f"{len(self.fails)} fail" if self.fails else "", f"{len(self.warns)} warn" if self.warns else ""]
        first = self.fails[0] if self.fails else self.warns[0]
        return f"{self.status}, {' '.join(p for p in parts if p)}: {first.phase} / {first.check}"


def row_of(name: str, st: runs.RunState) -> Row:
    case = CASES[name]
    r = Row(name, family(name), str(st.status), str(st.stop_reason or ""))
    for g in st.gates:
        for c in g.get("checks", []):
            if not c.get("ok", True):
                r.findings.append(
                    Finding(g["phase"], c["name"], "warn" if c.get("warn") else "fail", str(c.get("detail", "")))
                )
    if case.gate:
        r.expected = f"{case.gate} / {case.check} ({case.verdict})"
        gate = next((g for g in st.gates if g["phase"] == case.gate), None)
        check = next((c for c in (gate or {}).get("checks", []) if c["name"] == case.check), None)
        r.named = bool(
            check is not None
            and not check["ok"]
            and bool(check.get("warn")) == (case.verdict == "warn")
            and all(w in check.get("detail", "") for w in case.words)
        )
        r.caught = r.named and r.status == case.expect
    if not r.findings and st.status not in ("passed", "completed"):
        r.findings.append(Finding(st.phase or "?", "outcome", "fail", r.stop_reason))
    return r


def render(rows: dict[str, Row]) -> str:
    fams: dict[str, list[Row]] = {}
    for r in rows.values():
        fams.setdefault(r.family, []).append(r)
    lines = [f"{'family':<14} {'healthy':<62} {'twin':<24} twin caught at (expected)"]
    for fam, members in fams.items():
        healthy = next((r for r in members if not CASES[r.name].gate), None)
        twins = [r for r in members if CASES[r.name].gate]
        h = healthy.summary() if healthy else "(not run)"
        if not twins:
            lines.append(f"{fam:<14} {h[:62]:<62} {'(none)':<24}")
        for i, t in enumerate(twins):
            case = CASES[t.name]
            if t.caught:
                where, mark = f"{t.status}: {case.gate} / {case.check}", "caught as expected"
            elif t.named:
                where = f"{t.status}: {case.gate} / {case.check}"
                mark = f"named, but the run ended {t.status}, not {case.expect} ({t.summary()})"
            else:
                where, mark = t.summary(), f"NOT as expected: {t.expected}"
            lines.append(f"{fam if i == 0 else '':<14} {h[:62] if i == 0 else '':<62} {t.name:<24} {where}; {mark}")
    lines.append("")
    lines.append("details of every failed or warned check:")
    for r in rows.values():
        for f in r.findings:
            lines.append(f"  {r.name}: {f.verdict} at {f.phase} / {f.check}: {f.detail[:400]}")
    healthy_rows = [r for r in rows.values() if not CASES[r.name].gate]
    twin_rows = [r for r in rows.values() if CASES[r.name].gate]
    lines.append("")
    lines.append(
        f"{len({r.family for r in rows.values()})} families; healthy clean {sum(not r.findings for r in healthy_rows)}"
        f"/{len(healthy_rows)}; twins caught as expected {sum(r.caught for r in twin_rows)}/{len(twin_rows)}"
    )
    return "\n".join(lines)


def join_blind() -> None:
    """tests/blind's cases join the shelf's list as ``blind/NAME`` (their files stay in tests/blind)."""
    from tests.blind.campaigns import BLIND
    from tests.blind.campaigns import CASES as BLIND_CASES

    for n, c in BLIND_CASES.items():
        fam = f"blind/{c.family or n.split('_')[0]}" if c.gate else ""
        CASES[f"blind/{n}"] = dataclasses.replace(c, folder=BLIND, family=fam)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.shelf.table", description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", help="cases to run (default: all); a family's name runs its twins too")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--keep", type=Path, help="run the pilots in this folder and keep it")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of the table")
    ap.add_argument("--blind", action="store_true", help="add tests/blind's families and twins (as blind/NAME)")
    args = ap.parse_args(argv)
    if args.blind:
        join_blind()
    names = [n for n in CASES if not args.cases or n in args.cases or family(n) in args.cases]
    if not names:
        ap.error(f"no such case; the shelf has: {', '.join(CASES)}")
    root = args.keep or Path(tempfile.mkdtemp(prefix="cockpit-shelf-"))
    root.mkdir(parents=True, exist_ok=True)

    def progress(name: str, st: runs.RunState) -> None:
        print(f"  {name}: {st.status}", file=sys.stderr, flush=True)

    states = run_cases(root, names, parallel=args.parallel, on_done=progress)
    rows = {n: row_of(n, states[n]) for n in names if n in states}
    if args.json:
        out: dict[str, Any] = {n: {**asdict(r), "caught": r.caught} for n, r in rows.items()}
        print(json.dumps(out, indent=1))
    else:
        print(render(rows))
    print(f"runs kept in {root}", file=sys.stderr)
    healthy_bad = any(r.fails for r in rows.values() if not CASES[r.name].gate)
    twin_missed = any(not r.caught for r in rows.values() if CASES[r.name].gate)
    return 1 if healthy_bad or twin_missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
