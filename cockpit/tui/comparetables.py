"""``cockpit compare``'s tables for the compare screen, laid out for the width at hand. No textual.

The figures are :func:`cockpit.tui.comparison.collect`'s (the very dictionary
``cockpit compare --json`` prints); here they become Rich tables of plain
text (a variant's description is never markup): below ``WIDE`` columns the
quality table drops the column of every seed's value (listed under it,
shortened when there are many), long lists of runs are cut with a count, and
the memory table is the CLI's.
"""

from __future__ import annotations

import io

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from .. import events as ev
from .. import notebook as nbm
from .. import runs
from ..compare.memory import unmeasured_lines
from ..compare.quality import GroupRow, TrainRunRow
from . import style as sty
from .comparedata import Comparison
from .plain import clean_line, one_line, plain

WIDE = 110  # from this width the quality table has a column of every seed's value
LIST_ROWS = 12  # rows of a list (runs that did not complete) shown before "... and N more"


def _f(x: object, digits: int = 4) -> str:
    return f"{x:.{digits}g}" if isinstance(x, (int, float)) and not isinstance(x, bool) else ""


def _mib(b: object) -> str:
    return f"{b / 2**20:,.0f}" if isinstance(b, (int, float)) else "absent"


def _t(value: object, style: str = "", limit: int = 200) -> Text:
    return one_line("" if value is None else value, style=style, limit=limit)


def tables(data: Comparison, width: int = 80) -> list[RenderableType]:
    """``cockpit compare``'s tables for a screen ``width`` columns wide, as plain text."""
    out: list[RenderableType] = []
    wide = width >= WIDE
    metric = clean_line(data["metric"], 40)
    way = "higher is better" if data["higher_is_better"] else "lower is better"
    head = Text()
    head.append_text(_t(data["campaign"], "bold", 80))
    head.append(": ")
    head.append_text(plain(data["question"]))
    out.append(head)
    if not data["quality"]:
        out.append(
            Text("no train runs yet: S on the campaign screen starts a series of variants x seeds", style="yellow")
        )
    else:
        out.append(quality_table(data, metric, way, wide))
        if not wide:
            out.extend(seed_lines(data))
        for g in data["quality"]:
            if g["target"]:
                line = _t(
                    f"{g['variant']}{' (' + g['tag'] + ')' if g['tag'] else ''}: target {metric} "
                    f"{'>=' if data['higher_is_better'] else '<='} {_f(data['quality_target'])}: {g['target']}",
                    "" if g["target_reached"] else "yellow",
                    400,
                )
                out.append(line)
    if data["not_completed"]:
        out.append(not_completed_table(data["not_completed"], wide))
    sup = data["superseded"]
    for r in sup[:LIST_ROWS]:
        out.append(
            _t(
                f"{r['id']} ({r['variant']} seed {r['seed']}, {metric} {_f(r['value'])}) is superseded by "
                f"{r['superseded_by']} of the same seed: only the later run counts",
                "dim",
                400,
            )
        )
    if len(sup) > LIST_ROWS:
        out.append(Text(f"... and {len(sup) - LIST_ROWS} more superseded runs", style="dim"))
    out.extend(memory_parts(data))
    out.append(_t(data["method"], "dim", 2000))
    return out


def quality_table(data: Comparison, metric: str, way: str, wide: bool) -> Table:
    q = Table(
        title=f"{metric} across seeds ({way}; {nbm.reference_words(clean_line(data['reference'], 40))})",
        title_justify="left",
        expand=False,
    )
    q.add_column("variant", overflow="fold", max_width=24 if wide else 14)
    for col in ("n", "mean", "std", "min", "max"):
        q.add_column(col, justify="right", no_wrap=True)
    if wide:
        q.add_column("each seed", overflow="fold", max_width=40)
    q.add_column("vs reference", overflow="fold")
    for g in data["quality"]:
        s = g["stats"]
        name = _t(g["variant"], limit=60)
        if g["tag"]:
            name.append_text(_t(f" ({g['tag']})", "dim", 80))
        verdict = str(g["verdict"])
        if g["diff"] is not None:
            verdict += f" ({g['diff']:+.3g}" + (
                f"; spread {g['spread']:.3g})" if g["spread"] is not None else "; no spread)"
            )
        style = {"better": "green", "worse": "red", "not distinguishable": "yellow"}.get(g["verdict"], "")
        cells: list[Text] = [
            name,
            Text(str(s["n"])),
            Text(_f(s["mean"])),
            Text(_f(s["std"])),
            Text(_f(s["min"])),
            Text(_f(s["max"])),
        ]
        if wide:
            cells.append(Text(seed_values(g, limit=24)))
        cells.append(_t(verdict, style, 200))
        q.add_row(*cells)
    return q


def seed_values(g: GroupRow, limit: int = 8) -> str:
    """Every seed's value (the first ``limit``, then how many more), then the runs that did not complete."""
    items = list(g["seeds"].items())
    text = ", ".join(f"s{k}={v:.4g}" for k, v in items[:limit])
    if len(items) > limit:
        text += f", ... {len(items) - limit} more seeds"
    if g["not_completed"]:
        text += ("; " if text else "") + ", ".join(f"{n} {st}" for st, n in g["not_completed"].items())
    return clean_line(text, 600)


def seed_lines(data: Comparison) -> list[Text]:
    """Narrow screens: every seed's value under the table, one line per variant."""
    out: list[Text] = []
    for g in data["quality"]:
        values = seed_values(g)
        if values:
            line = _t(g["variant"], "bold", 40)
            line.append(" ")
            line.append(values)
            out.append(line)
    return out


def not_completed_table(rows: list[TrainRunRow], wide: bool) -> Table:
    t = Table(title="runs that did not complete (kept, not averaged in)", title_justify="left")
    columns = (
        ("run", "variant", "seed", "status", "updates", "follows", "stop reason")
        if wide
        else ("run", "variant", "seed", "status", "stop reason")
    )
    for col in columns:
        t.add_column(col, overflow="fold" if col == "stop reason" else "ellipsis", no_wrap=col != "stop reason")
    for r in rows[:LIST_ROWS]:
        upd = (
            ""
            if r["updates"] is None
            else str(r["updates"]) + (f"/{r['planned_updates']}" if r["planned_updates"] else "")
        )
        cells = {
            "run": _t(r["id"]),
            "variant": _t(r["variant"], limit=30),
            "seed": _t(r["seed"]),
            "status": sty.status_text(clean_line(r["status"], 20)),
            "updates": Text(upd),
            "follows": _t(r["follows"]),
            "stop reason": _t(r["stop_reason"], limit=300 if wide else 120),
        }
        t.add_row(*(cells[c] for c in columns))
    if len(rows) > LIST_ROWS:
        counts: dict[str, int] = {}
        for r in rows[LIST_ROWS:]:
            counts[str(r["status"])] = counts.get(str(r["status"]), 0) + 1
        more = ", ".join(f"{n} {clean_line(st, 20)}" for st, n in counts.items())
        t.caption = f"... and {len(rows) - LIST_ROWS} more ({more})"
        t.caption_justify = "left"
    return t


def memory_parts(data: Comparison) -> list[RenderableType]:
    """Memory and time per phase of the reference and the memory variants, as ``cockpit compare`` prints them."""
    out: list[RenderableType] = []
    mem = data["memory"]
    ref = data["reference"]
    vids = [ref] + [v for v in mem if v != ref and (mem[v]["run"] or data["kinds"].get(v) == "memory")]
    measured = [v for v in vids if v in mem and mem[v]["run"]]
    counters = {mem[v]["counter"] for v in measured}
    counter = " / ".join(sorted(counters)) or "no measurement"
    t = Table()
    t.add_column("phase", no_wrap=True)
    for v in vids:
        head = _t(v + (" (ref)" if v == ref else ""), limit=30)
        if data["kinds"].get(v) == "memory":
            head.append("\nmemory")
        head.append("\n")
        head.append_text(_t(mem[v]["run"] or "no passed pilot", limit=30))
        t.add_column(head, justify="right", overflow="fold")
    phases = [p for p in ev.PHASES if any(p in mem[v]["phases"] for v in vids)]
    for p in phases:
        cells = []
        for v in vids:
            pm = mem[v]["phases"].get(p)
            cells.append(Text("" if pm is None else f"{_mib(pm['peak'])} · {_f(pm['duration_s'], 3)}"))
        t.add_row(Text(p), *cells)
    rpeak, rstep = mem[ref]["peak"], mem[ref]["step_time_s"]
    t.add_row(
        Text("peak", style="bold"),
        *[
            Text(_mib(peak) + (f" ({peak / rpeak:.2f}x)" if peak and rpeak and v != ref else ""))
            for v in vids
            for peak in [mem[v]["peak"]]
        ],
    )
    t.add_row(
        Text("s per step", style="bold"),
        *[
            Text(_f(step, 3) + (f" ({step / rstep:.2f}x)" if step and rstep and v != ref else ""))
            for v in vids
            for step in [mem[v]["step_time_s"]]
        ],
    )
    if measured:
        out.append(
            Text(
                f"memory (MiB, {counter}) · time (s) per phase, from the latest passed pilot of each variant",
                style="italic",
            )
        )
        out.append(t)
        if runs.HOST_PEAK in counters:
            out.append(
                Text(
                    "on a CPU the peak is the pilot process's RSS, which includes the Python and torch runtime; "
                    "GPU counters are absent here, not zero",
                    style="dim",
                )
            )
    else:
        out.append(
            Text(
                "no passed pilot yet: run `cockpit pilot CAMPAIGN --variant ID` for memory and time per phase",
                style="yellow",
            )
        )
    out += [_t(line, "dim", 600) for line in unmeasured_lines(mem, vids)]
    for v in mem:
        fl = [f for f in data["flags"].get(v) or [] if f["flag"] != "quality target not reached"]  # shown above
        note = mem[v].get("params_note")
        for f in fl:
            line = _t(v, "bold red", 40)
            line.append_text(_t(f": {f['flag']}: {f['detail']}", limit=600))
            out.append(line)
        if note:
            line = _t(v, "yellow", 40)
            line.append_text(_t(f": {note}", limit=600))
            out.append(line)
    return out


def laid_out(items: list[RenderableType], width: int) -> Text:
    """The tables laid out once at ``width`` columns, as styled text that needs no more layout.

    Handed to Textual as Rich tables, the quality table (its seeds' column wraps) was measured and
    laid out several times over (its width, its height, then again once the scroll bar came): most
    of the time compare took to open with a thousand runs. Rendered here once, Textual only shows
    the lines. Pure Rich, no textual: a worker thread may call it.
    """
    console = Console(
        width=max(20, width), file=io.StringIO(), color_system="truecolor", legacy_windows=False, force_terminal=True
    )
    lines = console.render_lines(Group(*items), console.options, pad=False)
    out = Text(no_wrap=True, overflow="crop")
    for i, line in enumerate(lines):
        if i:
            out.append("\n")
        for seg in line:
            if not seg.control:
                out.append(seg.text, seg.style)
    return out
