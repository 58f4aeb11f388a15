"""What the compare screen shows, read from the campaign's files. No textual, no torch.

The figures are ``cockpit compare``'s: :func:`collect` builds the very
dictionary :func:`cockpit.compare.summarize` builds, from the same functions
(``train_runs``, ``group_runs``, ``pilot_memory``, ``flags``), but

- read-only: ``compare.collect`` reconciles the notebook (a write), which the
  TUI leaves to its own edits and to the series it drives;
- from the app's cache of run folders (a finished run is read once) and, for
  a running run, from its one incremental reader: opening compare on a
  campaign of a thousand runs reads only what changed.

:func:`tables` lays the figures out for the width at hand, as Rich tables of
plain text (a variant's description is never markup): at 80 columns the
quality table drops the column of every seed's value (listed under it,
shortened when there are many), long lists of runs are cut with a count, and
the memory table is the CLI's.

Curves: each chosen train run's ``curve.csv`` (loss per update) and
``evals.csv`` (validation points), non-finite values left out. Each variant has
a colour and each of its runs a marker; a variant with more than
``BAND_FROM`` chosen seeds is drawn as its mean with a min-max band. The
default choice is capped: the counted runs of at most ``MAX_VARIANTS``
variants (the reference, then the best), the running ones and a few that
ended badly.
"""

from __future__ import annotations

import csv
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from .. import compare, runs
from .. import events as ev
from .. import notebook as nbm
from . import style as sty
from .plain import clean_line, one_line, plain
from .runcache import RunCache

VARIANT_STYLES = (
    "bright_green",
    "bright_cyan",
    "bright_magenta",
    "yellow",
    "dodger_blue1",
    "orange1",
    "orchid",
    "white",
)
MARKERS = ("\u25cf", "\u25b2", "\u25a0", "\u25c6", "\u25bc", "\u25cb", "\u25b3", "\u25a1", "\u25c7")
RUN_STYLES = (
    "bright_green",
    "bright_cyan",
    "bright_magenta",
    "yellow",
    "dodger_blue1",
    "orange1",
    "orchid",
    "white",
    "spring_green1",
    "light_slate_blue",
    "gold1",
    "deep_pink2",
    "turquoise2",
    "tan",
)
MAX_VARIANTS = 6  # variants chosen by default on the curves
MAX_BAD = 6  # runs that ended badly chosen by default
BAND_FROM = 4  # a variant with this many chosen seeds or more is drawn as mean and min-max band
WIDE = 110  # from this width the quality table has a column of every seed's value
LIST_ROWS = 12  # rows of a list (runs that did not complete) shown before "... and N more"
BAD = frozenset(
    {
        ev.Status.DIVERGED.value,
        ev.Status.FAILED.value,
        ev.Status.OOM.value,
        ev.Status.ERROR.value,
        ev.Status.CRASHED.value,
    }
)


# --------------------------------------------------------------------------- the figures


def all_runs(campaign_dir: Path, cache: RunCache, live: dict[str, runs.RunFiles] | None = None) -> list[runs.RunFiles]:
    """Every run of the campaign, oldest first: the live ones as given, the others from the cache."""
    live = live or {}
    out: list[runs.RunFiles] = []
    for p in runs.run_dirs(campaign_dir):
        r = live.get(p.name) or cache.read(p)
        if r is not None:
            out.append(r)
    return out


def collect(
    nb: nbm.Notebook, cache: RunCache | None = None, live: dict[str, runs.RunFiles] | None = None
) -> dict[str, Any]:
    """The same dictionary as ``compare.summarize``, without reconciling (no write), from cached runs."""
    rs = all_runs(nb.directory, cache or RunCache(), live)
    trs = compare.train_runs(nb, rs)
    groups = compare.group_runs(nb, trs)
    mem = {v.id: compare.pilot_memory(nb, v.id, rs) for v in nb.variants}
    c = nb.campaign
    return {
        "campaign": c.name,
        "question": c.question,
        "metric": c.quality_metric,
        "higher_is_better": c.higher_is_better,
        "quality_target": c.quality_target,
        "held_constant": c.held_constant,
        "reference": nb.reference.id,
        "quality": [{**asdict(g), "stats": {**asdict(g.stats), "spread": g.stats.spread}} for g in groups],
        "not_completed": [asdict(r) for r in trs if r.status != ev.Status.COMPLETED.value],
        "superseded": [asdict(r) for r in trs if r.superseded_by],
        "memory": {vid: _mem_dict(m) for vid, m in mem.items()},
        "flags": {v.id: compare.flags(nb, v.id, mem, groups) for v in nb.variants},
        "kinds": {v.id: v.kind for v in nb.variants},
        "method": compare.METHOD,
        "train_runs": [asdict(r) for r in trs],
    }


def _mem_dict(m: compare.PilotMem) -> dict[str, Any]:
    d = asdict(m)
    d["phases"] = {k: asdict(v) for k, v in m.phases.items()}
    return d


# --------------------------------------------------------------------------- the tables


def _f(x: Any, digits: int = 4) -> str:
    return f"{x:.{digits}g}" if isinstance(x, (int, float)) and not isinstance(x, bool) else ""


def _mib(b: Any) -> str:
    return f"{b / 2**20:,.0f}" if isinstance(b, (int, float)) else "absent"


def _t(value: Any, style: str = "", limit: int = 200) -> Text:
    return one_line("" if value is None else value, style=style, limit=limit)


def tables(data: dict[str, Any], width: int = 80) -> list[RenderableType]:
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


def quality_table(data: dict[str, Any], metric: str, way: str, wide: bool) -> Table:
    q = Table(
        title=f"{metric} across seeds ({way}; reference {clean_line(data['reference'], 40)})",
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


def seed_values(g: dict[str, Any], limit: int = 8) -> str:
    """Every seed's value (the first ``limit``, then how many more), then the runs that did not complete."""
    items = list(g["seeds"].items())
    text = ", ".join(f"s{k}={v:.4g}" for k, v in items[:limit])
    if len(items) > limit:
        text += f", ... {len(items) - limit} more seeds"
    if g["not_completed"]:
        text += ("; " if text else "") + ", ".join(f"{n} {st}" for st, n in g["not_completed"].items())
    return clean_line(text, 600)


def seed_lines(data: dict[str, Any]) -> list[Text]:
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


def not_completed_table(rows: list[dict[str, Any]], wide: bool) -> Table:
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


def memory_parts(data: dict[str, Any]) -> list[RenderableType]:
    """Memory and time per phase of the reference and the memory variants, as ``cockpit compare`` prints them."""
    out: list[RenderableType] = []
    mem = data["memory"]
    ref = data["reference"]
    vids = [ref] + [v for v in mem if v != ref and (mem[v]["run"] or data["kinds"].get(v) == "memory")]
    unmeasured = [v for v in mem if v not in vids]
    measured = [v for v in vids if mem.get(v, {}).get("run")]
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
            Text(
                _mib(mem[v]["peak"])
                + (f" ({mem[v]['peak'] / rpeak:.2f}x)" if mem[v]["peak"] and rpeak and v != ref else "")
            )
            for v in vids
        ],
    )
    t.add_row(
        Text("s per step", style="bold"),
        *[
            Text(
                _f(mem[v]["step_time_s"], 3)
                + (f" ({mem[v]['step_time_s'] / rstep:.2f}x)" if mem[v]["step_time_s"] and rstep and v != ref else "")
            )
            for v in vids
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
    if unmeasured:
        out.append(_t(f"no passed pilot (not in the table): {', '.join(unmeasured)}", "dim", 600))
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


# --------------------------------------------------------------------------- curves


@dataclass
class Curve:
    id: str
    variant: str
    seed: int
    status: str
    stop_reason: str
    value: float | None  # the quality metric at the end (completed runs)
    style: str
    marker: str
    steps: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    evals: list[tuple[float, float]] = field(default_factory=list)  # (update, val_loss)
    counted: bool = False  # counted in the quality table (the latest completed run of its seed)
    run_style: str = ""  # a colour of its own, when runs rather than variants are coloured
    loaded: bool = False  # its curve.csv and evals.csv were read

    def look(self, per_run: bool) -> str:
        return self.run_style if per_run and self.run_style else self.style

    def label(self) -> str:
        return f"{self.id} {self.variant} s{self.seed}"


def read_evals(path: Path) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as fh:
            for row in csv.DictReader(fh):
                try:
                    step, loss = float(row.get("step") or "nan"), float(row.get("val_loss") or "nan")
                except (ValueError, TypeError):
                    continue
                if math.isfinite(step) and math.isfinite(loss):
                    out.append((step, loss))
    except (OSError, csv.Error):
        pass
    return out


def styles(nb: nbm.Notebook, train: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """Run id -> (colour, marker): a colour per variant (notebook order), a marker per run of that variant."""
    order = {v.id: i for i, v in enumerate(nb.variants)}
    extra: dict[str, int] = {}
    seen: dict[str, int] = {}
    out: dict[str, tuple[str, str]] = {}
    for r in train:
        vid = r["variant"]
        i = order.get(vid)
        if i is None:
            i = extra.setdefault(vid, len(order) + len(extra))
        n = seen.get(vid, 0)
        seen[vid] = n + 1
        out[r["id"]] = (VARIANT_STYLES[i % len(VARIANT_STYLES)], MARKERS[n % len(MARKERS)])
    return out


def listing(nb: nbm.Notebook, data: dict[str, Any]) -> list[Curve]:
    """Every train run in run order, with its colour and marker; no file read (curves come later)."""
    train = data.get("train_runs") or []
    look = styles(nb, train)
    counted = {rid for g in data["quality"] for rid in g["runs"].values()}
    out: list[Curve] = []
    for r in train:
        style, marker = look[r["id"]]
        out.append(
            Curve(
                r["id"],
                r["variant"],
                int(r["seed"]),
                r["status"],
                r["stop_reason"],
                r["value"],
                style,
                marker,
                counted=r["id"] in counted,
                run_style=RUN_STYLES[len(out) % len(RUN_STYLES)],
            )
        )
    return out


def load(c: Curve, campaign_dir: Path) -> Curve:
    """Read one run's curve.csv and evals.csv into ``c`` (non-finite values left out)."""
    rdir = runs.run_dir(campaign_dir, c.id)
    steps: list[float] = []
    loss: list[float] = []
    for row in runs.read_csv_rows(rdir / runs.CURVE_FILE):
        step, value = row.get("step"), row.get("loss")
        if step is not None and value is not None and math.isfinite(step) and math.isfinite(value):
            steps.append(step)
            loss.append(value)
    c.steps, c.loss, c.evals, c.loaded = steps, loss, read_evals(rdir / runs.EVALS_FILE), True
    return c


def curves(nb: nbm.Notebook, data: dict[str, Any]) -> list[Curve]:
    """Every train run's loss and validation curve, in run order, with its colour and marker."""
    return [load(c, nb.directory) for c in listing(nb, data)]


def default_selection(cs: list[Curve], data: dict[str, Any] | None = None) -> list[str]:
    """The runs chosen on opening: capped so a campaign of hundreds of runs stays readable.

    The counted runs of at most ``MAX_VARIANTS`` variants (the reference first, then the
    best by mean), every running run, and up to ``MAX_BAD`` runs that ended badly (a
    diverged run is shown, not hidden).
    """
    order = _variant_order(cs, data)[:MAX_VARIANTS]
    chosen = [c.id for c in cs if c.variant in order and c.counted]
    chosen += [c.id for c in cs if c.status == ev.Status.RUNNING.value]
    bad = [c.id for c in cs if c.status in BAD]
    in_chosen = [rid for rid in bad if any(c.id == rid and c.variant in order for c in cs)]
    chosen += (in_chosen + [rid for rid in bad if rid not in in_chosen])[:MAX_BAD]
    return list(dict.fromkeys(chosen))


def _variant_order(cs: list[Curve], data: dict[str, Any] | None) -> list[str]:
    variants = list(dict.fromkeys(c.variant for c in cs))
    if not data:
        return variants
    ref = data.get("reference")
    higher = bool(data.get("higher_is_better"))
    means = {g["variant"]: g["stats"]["mean"] for g in data.get("quality", []) if not g["tag"]}

    def key(v: str) -> tuple[int, float]:
        m = means.get(v)
        score = float("inf") if m is None else (-m if higher else m)
        return (0 if v == ref else 1, score)

    return sorted(variants, key=key)


def zoom_top(cs: list[Curve]) -> float | None:
    """A y scale for the runs that did not diverge (a diverged curve then runs off the top)."""
    tops = [max(c.loss) for c in cs if c.loss and c.status != ev.Status.DIVERGED.value]
    tops += [max(y for _, y in c.evals) for c in cs if c.evals and c.status != ev.Status.DIVERGED.value]
    return max(tops) if tops else None


def smooth(values: list[float], weight: float = 0.8) -> list[float]:
    """An exponential moving average, debiased at the start (TensorBoard's smoothing)."""
    out: list[float] = []
    last = 0.0
    for i, v in enumerate(values):
        last = weight * last + (1 - weight) * v
        out.append(last / (1 - weight ** (i + 1)))
    return out


@dataclass
class Band:
    """A variant's chosen runs as one curve: the mean loss per update with its min and max."""

    variant: str
    style: str
    runs: list[str]
    steps: list[float]
    mean: list[float]
    lo: list[float]
    hi: list[float]


def bands(shown: list[Curve]) -> tuple[list[Band], list[Curve]]:
    """Variants with ``BAND_FROM`` or more chosen runs that did not end badly become bands; the rest stay runs."""
    by_variant: dict[str, list[Curve]] = {}
    for c in shown:
        if c.status not in BAD:
            by_variant.setdefault(c.variant, []).append(c)
    out: list[Band] = []
    banded: set[str] = set()
    for vid, members in by_variant.items():
        if len(members) < BAND_FROM:
            continue
        at: dict[float, list[float]] = {}
        for c in members:
            for s, y in zip(c.steps, c.loss, strict=False):
                at.setdefault(s, []).append(y)
        steps = sorted(at)
        out.append(
            Band(
                vid,
                members[0].style,
                [c.id for c in members],
                steps,
                [sum(at[s]) / len(at[s]) for s in steps],
                [min(at[s]) for s in steps],
                [max(at[s]) for s in steps],
            )
        )
        banded |= {c.id for c in members}
    return out, [c for c in shown if c.id not in banded]
