"""The command palette's main actions (ctrl+p), with the campaign's runs to open."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from .api import app_of


class CockpitCommands(Provider):
    def _actions(self) -> list[tuple[str, Callable[[], object], str]]:
        app = app_of(self)
        out: list[tuple[str, Callable[[], object], str]] = [
            ("Start a pilot", app.action_start_pilot, "pick a variant and a seed, then watch it live"),
            ("Start a series", app.action_start_series, "variants x seeds, each a full training run"),
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
        for name, action, help_text in self._actions():
            yield DiscoveryHit(name, action, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, action, help_text in self._actions():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), action, help=help_text)
