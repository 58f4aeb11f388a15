"""The campaign's notebook as text for the campaign screen: summary, variants, decisions, sheet, conclusion.

Only a title is bold and underlined, never what follows it; every value from
the notebook is plain text (``plain``).
"""

from __future__ import annotations

from rich.text import Text

from ... import arithmetic
from ... import notebook as nbm
from .. import style as sty
from ..plain import clean_line, one_line, plain

DECISIONS_SHOWN = 20


def empty_hint(broken: bool = False) -> Text:
    out = Text()
    out.append("No run yet. ", style="bold")
    if broken:  # no key below would work: the notebook comes first
        out.append("campaign.toml cannot be read (what is wrong is above): fix it first; the view reloads by itself")
        out.append(" and then offers a pilot, a series and the edits.")
        return out
    out.append("First press ")
    out.append("p", style="bold cyan")
    out.append(
        " to start a pilot: every phase of training once, on the worst case the campaign can produce, "
        "gated and measured (a few minutes). It says what fails before you pay for hours. Then "
    )
    out.append("S", style="bold cyan")
    out.append(" runs the series (variants x seeds) and ")
    out.append("C", style="bold cyan")
    out.append(" compares them; ")
    out.append("?", style="bold cyan")
    out.append(" lists every key.")
    return out


def summary(nb: nbm.Notebook, error: str = "", partial: bool = False) -> Text:
    out = Text()
    if error:
        out.append("campaign.toml cannot be read: ", style="bold red")
        out.append_text(plain(error))
        out.append(
            "\nFix the file; the view reloads by itself. The runs below are read from their folders.", style="dim"
        )
        return out
    c = nb.campaign
    out.append("Question ", style="bold")
    out.append_text(one_line(c.question or "(none written: say what this campaign decides)", limit=300))
    if nb.is_probe:  # no task, budget or batch of Cockpit's: the script's own, from its command line
        out.append("\nScript ", style="bold")
        out.append_text(one_line(" ".join(nb.probe.command) if nb.probe else "?", limit=300))
        out.append("\na probe campaign: ", style="bold")
        folder = nb.path.parent if nb.path else "CAMPAIGN"
        out.append(f"its settings are the script's own; `cockpit probe {folder}` probes it again", style="dim")
        if partial:
            out.append("\nreading the rest of campaign.toml in the background", style="yellow")
        return out
    out.append("\nHeld constant ", style="bold")
    out.append_text(one_line(c.held_constant, limit=20))
    budget = nb.batch.updates or nb.batch.epochs or nb.batch.examples
    out.append(f" ({budget} {clean_line(c.held_constant, 20)})")
    out.append("  quality ", style="bold")
    out.append_text(one_line(f"{c.quality_metric} ({'higher' if c.higher_is_better else 'lower'} is better)", limit=80))
    b = nb.batch
    try:
        plan = arithmetic.BatchPlan(
            b.microbatch, b.accumulation, b.data_replicas, b.model_parallel, b.dataset_size, b.drop_last
        )
        for name, value in arithmetic.describe(plan)[:2]:
            out.append(f"\n{name.capitalize()} ", style="bold")
            out.append(value)
    except (ValueError, TypeError, ZeroDivisionError) as exc:
        out.append("\n")
        out.append_text(one_line(f"Batch arithmetic: {exc}", style="red"))
    if partial:
        out.append("\nreading the rest of campaign.toml in the background; edits wait until it is read", style="yellow")
    return out


def heading(title: str) -> Text:
    """A section title in the notes panel: only the title is bold and underlined, not what follows."""
    out = Text()
    out.append(title, style="bold underline")
    return out


def variants(nb: nbm.Notebook) -> Text:
    out = heading("Variants")
    for v in nb.variants:
        out.append("\n")
        out.append_text(one_line(f" {v.id:<10}", style="bold", limit=60))
        # never "reference reference": the id, the tag or differs says it once (nbm.role_words' rule)
        tag = v.reference and not nbm.names_reference(v.id)
        differs = "" if v.reference and nbm.names_reference(v.differs) else v.differs
        out.append(" reference" if tag else " ", style="cyan")
        overrides = ", ".join(f"{k}={val}" for k, val in v.set.items())
        said = " ".join(w for w in (differs, f"({overrides})" if overrides else "") if w)
        if said:
            out.append_text(one_line(f" {said}", limit=400))
        if v.why:
            out.append_text(one_line(f": {v.why}", style="dim", limit=400))
    return out


def decisions(nb: nbm.Notebook, total: int | None = None) -> Text:
    """The latest decisions (all of them would be too many to draw with thousands)."""
    count = total if total is not None else len(nb.decisions)
    out = heading(f"Decisions and observations ({count:,})")
    if not nb.decisions:
        out.append("\n none yet: d adds a decision, o an observation", style="dim")
    shown = nb.decisions[-DECISIONS_SHOWN:]
    if count > len(shown):
        out.append(
            f"\n ... {count - len(shown):,} earlier ones are in campaign.toml; the latest {len(shown)}:", style="dim"
        )
    for d in shown:
        out.append("\n")
        out.append_text(one_line(f" {d.date} ", style="dim", limit=40))
        out.append_text(one_line(d.kind, style=sty.NOTE_KIND_STYLE.get(d.kind, "bold"), limit=20))
        if d.runs:
            out.append_text(one_line(f" [{', '.join(d.runs)}]", style="cyan", limit=120))
        out.append(" ")
        out.append_text(one_line(d.text, limit=1000))
    return out


def sheet(nb: nbm.Notebook) -> Text:
    out = heading("Selection sheet")
    out.append("  (s edits)", style="dim")
    s = nb.selection
    filled = [(k, v) for k, v in vars(s).items() if v not in (None, "")]
    if not filled:
        out.append("\n not filled yet", style="dim")
    for k, v in filled:
        out.append(f"\n {k.replace('_', ' ')}: ", style="bold")
        out.append_text(one_line(v, limit=400))
    out.append("\n")
    out.append_text(heading("Conclusion"))
    out.append("  (c edits)", style="dim")
    c = nb.conclusion
    if c.text or c.chosen_variant:
        if c.chosen_variant:
            out.append("\n")
            out.append_text(one_line(f" chosen: {c.chosen_variant}", style="bold green", limit=80))
        if c.text:
            out.append("\n ")
            out.append_text(plain(c.text))
        if c.date:
            out.append("\n")
            out.append_text(one_line(f" {c.date}", style="dim", limit=40))
    else:
        out.append("\n not written yet", style="dim")
    return out
