"""The command palette's main actions (ctrl+p), with the campaign's runs to open.

Cockpit's own actions come first: with nothing typed they are listed before
Textual's (theme, keys, screenshot), and a search ranks them above an equally
good match of Textual's. Run ids, variants and verdicts come from files: the
palette parses help text as markup, so they are escaped.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from rich.text import Text
from textual.command import Hit, Hits, Provider
from textual.markup import escape

from .api import app_of
from .plain import clean_line

OWN_FIRST = 0.05  # added to a search score: Cockpit's action before Textual's equally matching one


class CockpitCommands(Provider):
    def _actions(self) -> list[tuple[str, Callable[[], object], str]]:
        app = app_of(self)
        out: list[tuple[str, Callable[[], object], str]] = [
            ("Start a pilot", app.action_start_pilot, "pick a variant and a seed, then watch it live"),
            ("Start a series", app.action_start_series, "variants x seeds, each a full training run"),
            (
                "Resume stopped runs",
                app.action_resume_runs,
                "stopped or crashed training runs go on from their newest checkpoint",
            ),
            ("Stop the series", app.action_stop_series, app.series.status() or "no series running"),
            ("Compare variants", partial(app.action_compare, "tables"), "quality across seeds, memory per phase"),
            ("Compare loss curves", partial(app.action_compare, "curves"), "chosen runs overlaid"),
            ("Add a decision", partial(app.action_note, "decision"), "saved to campaign.toml at once"),
            ("Add an observation", partial(app.action_note, "observation"), "saved to campaign.toml at once"),
            ("Edit the conclusion", app.action_conclusion, "text and chosen variant"),
            ("Edit the selection sheet", app.action_selection, "memory, precision, batch, GPU ..."),
            ("Show GPUs", app.action_device, "NVML memory, utilisation, power, processes"),
            ("Reload the campaign", partial(app.reload_notebook, False), "read campaign.toml again"),
            ("Help", app.action_help, "keys and what each screen shows"),
        ]
        for row in app.notebook.runs:
            out.append(
                (f"Open run {row.id}", partial(app.open_run, row.id), f"{row.variant} seed {row.seed}: {row.status}")
            )
            out.append((f"Data of run {row.id}", partial(app.open_data, row.id), "inspected examples"))
            out.append(
                (f"Set verdict of run {row.id}", partial(app.set_verdict, row.id), row.verdict or "no verdict yet")
            )
        return out

    async def discover(self) -> Hits:
        # Hits with a score (Textual's own discovery hits score 0): ours are listed first, in this order.
        for i, (name, action, help_text) in enumerate(self._actions()):
            yield Hit(1.0 - i * 1e-6, Text(clean_line(name, 80)), action, help=_help(help_text))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, action, help_text in self._actions():
            shown = clean_line(name, 80)
            score = matcher.match(shown)
            if score > 0:
                yield Hit(min(1.0, score + OWN_FIRST), matcher.highlight(shown), action, help=_help(help_text))


def _help(text: str) -> str:
    return escape(clean_line(text, 200))
