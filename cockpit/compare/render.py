"""``cockpit compare``'s tables, printed with Rich (the TUI prints them into a collector)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import events as ev
from .. import notebook as nbm
from .. import runs
from ..termout import print_table
from .memory import PilotMemRow, unmeasured_lines

if TYPE_CHECKING:
    from .comparison import Comparison


def _f(x: float | None, digits: int = 4) -> str:
    return "" if x is None else f"{x:.{digits}g}"


def _mib(b: float | None) -> str:
    return "absent" if b is None else f"{b / 2**20:,.0f}"


# Flags that make a variant answer another question than the reference: never compared as if it did not.
DIFFERENT = ("shorter max_length truncates targets", "effective batch changed", "not only memory settings")


def _step_cell(mem: dict[str, PilotMemRow], v: str, ref: str) -> str:
    """The median time per update with its spread; a ratio only when the spreads do not overlap."""
    m, r = mem[v], mem[ref]
    step, rstep = m["step_time_s"], r["step_time_s"]
    if step is None:
        return ""
    cell = _f(step, 3)
    if m.get("step_min_s") is not None and m.get("step_n", 0) > 1:
        cell += f" [{_f(m['step_min_s'], 2)}-{_f(m['step_max_s'], 2)}]"
    if m.get("busy"):
        return cell + " (busy machine: no ratio)"
    if v == ref or not rstep:
        return cell
    lo, hi, rlo, rhi = m.get("step_min_s"), m.get("step_max_s"), r.get("step_min_s"), r.get("step_max_s")
    spread = m.get("step_n", 0) > 1 and r.get("step_n", 0) > 1  # one timed update on a side: no spread to judge by
    if spread and lo is not None and hi is not None and rlo is not None and rhi is not None and lo <= rhi and rlo <= hi:
        return cell + " (within spread)"
    return cell + f" ({step / rstep:.2f}x)"


def _t(x: Any, style: str = "") -> str:
    """Text from the notebook, a run folder or a task's exception, escaped: shown as written, never read as
    markup (and highlighted like any other cell)."""
    from rich.markup import escape

    text = escape("" if x is None else str(x))
    return f"[{style}]{text}[/]" if style and text else text


def render(data: Comparison, console: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    metric = data["metric"]
    way = "higher is better" if data["higher_is_better"] else "lower is better"
    console.print(Text.assemble((str(data["campaign"]), "bold"), ": ", str(data["question"])), highlight=False)
    q = Table(
        title=_t(f"{metric} across seeds ({way}; {nbm.reference_words(data['reference'])})"), title_justify="left"
    )
    for col, just in (
        ("variant", "left"),
        ("n", "right"),
        ("mean", "right"),
        ("std", "right"),
        ("min", "right"),
        ("max", "right"),
        ("each seed", "left"),
        ("vs reference", "left"),
    ):
        q.add_column(col, justify="right" if just == "right" else "left")
    other = {vid: [f["flag"] for f in fl if f["flag"] in DIFFERENT] for vid, fl in data["flags"].items()}
    for g in data["quality"]:
        s = g["stats"]
        name = _t(g["variant"]) + (" " + _t(f"({g['tag']})", "dim") if g["tag"] else "")
        if other.get(g["variant"]) and not g["tag"]:
            name += " " + _t(f"(another experiment: {'; '.join(other[g['variant']])})", "yellow")
        seeds = ", ".join(f"s{k}={v:.4g}" for k, v in g["seeds"].items())
        if g["not_completed"]:
            seeds += ("; " if seeds else "") + ", ".join(f"{n} {st}" for st, n in g["not_completed"].items())
        verdict = g["verdict"]
        if g["diff"] is not None:
            verdict += f" ({g['diff']:+.3g}" + (
                f"; spread {g['spread']:.3g})" if g["spread"] is not None else "; no spread)"
            )
        style = {"better": "green", "worse": "red", "not distinguishable": "yellow"}.get(g["verdict"], "")
        q.add_row(
            name,
            str(s["n"]),
            _f(s["mean"]),
            _f(s["std"]),
            _f(s["min"]),
            _f(s["max"]),
            _t(seeds),
            _t(verdict, style),
        )
    if not data["quality"] and data.get("probe_campaign"):
        console.print(
            "no train runs: a probe campaign measures its script's phases, not its result (no series to compare)",
            style="yellow",
        )
    elif not data["quality"]:
        console.print("no train runs yet: run `cockpit series CAMPAIGN` first", style="yellow")
    else:
        # numbers and variant ids stay whole (Rich alone broke 0.008669 across two lines): columns go instead
        print_table(console, q, drop=["min", "max", "n", "each seed"])  # each seed shows min and max
        for g in data["quality"]:
            if g["target"]:
                console.print(
                    _t(
                        f"{g['variant']}{' (' + g['tag'] + ')' if g['tag'] else ''}: target {data['metric']} "
                        f"{'>=' if data['higher_is_better'] else '<='} {data['quality_target']:g}: {g['target']}",
                        "" if g["target_reached"] else "yellow",
                    ),
                    highlight=False,
                )
    if data["not_completed"]:
        t = Table(title="runs that did not complete (kept, not averaged in)", title_justify="left")
        for col in ("run", "variant", "seed", "status", "updates", "follows", "stop reason"):
            t.add_column(col)
        for r in data["not_completed"]:
            upd = (
                ""
                if r["updates"] is None
                else str(r["updates"]) + (f"/{r['planned_updates']}" if r["planned_updates"] else "")
            )
            t.add_row(
                _t(r["id"]),
                _t(r["variant"]),
                _t(r["seed"]),
                _t(r["status"], "red"),
                _t(upd),
                _t(r["follows"]),
                _t(r["stop_reason"]),
            )
        print_table(console, t, drop=["follows", "updates", "seed"])
    for r in data["superseded"]:
        console.print(
            _t(
                f"{r['id']} ({r['variant']} seed {r['seed']}, {metric} {_f(r['value'])}) is superseded by "
                f"{r['superseded_by']} of the same seed: only the later run counts",
                "dim",
            ),
            highlight=False,
        )
    _render_memory(data, console)
    console.print(_t(data["method"], "dim"), highlight=False)


def _render_memory(data: Comparison, console: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    mem = data["memory"]
    ref = data["reference"]
    # the reference, every memory variant, and any other variant with a passed pilot
    vids = [ref] + [v for v in mem if v != ref and (mem[v]["run"] or data["kinds"].get(v) == "memory")]
    measured = [v for v in vids if mem[v]["run"]]
    counters = {mem[v]["counter"] for v in measured}
    counter = " / ".join(sorted(counters)) or "no measurement"
    t = Table()
    t.add_column("phase")
    heads: list[str] = []
    for v in vids:
        head = (
            v
            + (" (ref)" if v == ref else "")
            + (f"\n{data['kinds'].get(v, '')}" if data["kinds"].get(v) == "memory" else "")
        )
        head += f"\n{mem[v]['run'] or 'no passed pilot'}" + (" probe" if mem[v].get("kind") == "probe" else "")
        heads.append(head.replace("\n", " "))
        t.add_column(_t(head), justify="right")
    phases = [p for p in ev.PHASES if any(p in mem[v]["phases"] for v in vids)]
    for p in phases:
        cells = []
        for v in vids:
            pm = mem[v]["phases"].get(p)
            cells.append("" if pm is None else f"{_mib(pm['peak'])} · {_f(pm['duration_s'], 3)}")
        t.add_row(p, *cells)
    rpeak = mem[ref]["peak"]
    t.add_row(
        "[bold]peak[/]",
        *[
            _mib(peak) + (f" ({peak / rpeak:.2f}x)" if peak and rpeak and v != ref else "")
            for v in vids
            for peak in [mem[v]["peak"]]
        ],
    )
    t.add_row("[bold]s per step[/]", *[_step_cell(mem, v, ref) for v in vids])
    if measured:
        probed = any(mem[v].get("kind") == "probe" for v in measured)
        console.print(
            f"[italic]memory (MiB, {counter}) · time (s) per phase, from the latest passed pilot"
            + (" or probe (the script as it ran: its own batches, no worst case)" if probed else "")
            + " of each variant[/]",
            highlight=False,
        )
        # the variants after the reference go first, the last first: each column is one variant whole
        print_table(console, t, drop=list(reversed(heads[1:])))
        if runs.HOST_PEAK in counters:
            console.print(
                f"on a CPU the peak is the {'measured' if probed else 'pilot'} process's RSS, which includes the "
                "Python and torch runtime; "
                "GPU counters are absent here, not zero",
                style="dim",
                highlight=False,
            )
    else:
        console.print(
            "no passed pilot yet: run `cockpit pilot CAMPAIGN --variant ID` for memory and time per phase",
            style="yellow",
        )
    for line in unmeasured_lines(mem, vids):
        console.print(_t(line, "dim"), highlight=False)
    for v in mem:
        fl = [f for f in data["flags"].get(v) or [] if f["flag"] != "quality target not reached"]  # shown above
        note = mem[v].get("params_note")
        for f in fl:
            console.print(Text.assemble((str(v), "bold red"), f": {f['flag']}: {f['detail']}"), highlight=False)
        if note:
            console.print(Text.assemble((str(v), "yellow"), f": {note}"), highlight=False)
