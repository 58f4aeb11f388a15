"""A footer that drops keys it has no room for, instead of cutting them in the middle.

Textual's footer lays every shown key out in one row; in a narrow terminal the
last ones are cut off mid-word or squeezed into each other. This one keeps the
keys in the order the screen declares them (most important first) and leaves
out whole keys from the end until the rest fits, with the palette key last;
``?`` lists every key anyway. It lays itself out again when the terminal is
resized.
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from ..editing import offered

PALETTE_WIDTH = 12  # "^p palette" and its margin
ALWAYS = frozenset({"back", "help", "quit"})  # binding ids shown at any width


class FittingFooter(Footer):
    """Lays its keys out again only when what it would show changed.

    Bindings change on every focus move and on many refreshes: laying the keys out each time
    (a dozen widgets styled anew) made opening the compare screen mount a hundred FooterKeys.
    Requests are coalesced into one after the next refresh, and skipped when the keys and the
    width are what is already shown.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shown_plan: tuple[Any, ...] | None = None
        self._relayout_due = False

    def plan(self) -> tuple[Any, ...]:
        """What would be shown: (width, each kept key's fields, the palette key's)."""
        width = self.app.size.width  # the footer spans the screen (its own size is 0 before the first layout)
        active = self.screen.active_bindings
        palette = None
        if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE:
            palette = active.get(self.app.COMMAND_PALETTE_BINDING)
        room = width - (PALETTE_WIDTH if palette is not None else 0)
        seen: set[str] = set()
        shown = []
        for _node, binding, enabled, tooltip in active.values():
            if not binding.show or binding.action in seen or not offered(self.app, binding.action):
                continue  # hidden, said already, or needing a notebook that cannot be read now
            seen.add(binding.action)
            display = self.app.get_key_display(binding)
            need = len(display) + len(binding.description) + (2 if self.compact else 3)
            shown.append((binding, enabled, tooltip, display, need))
        # Back, help and quit are kept whatever the width; then the others in the screen's order.
        kept = {id(b) for b, *_ in shown if b.id in ALWAYS}
        room -= sum(need for b, *_, need in shown if id(b) in kept)
        for b, *_, need in shown:
            if id(b) in kept:
                continue
            if need > room:
                break  # this key and every later (less important) one: ? shows them all
            room -= need
            kept.add(id(b))
        keys = tuple(
            (binding.key, display, binding.description, binding.action, enabled, tooltip)
            for binding, enabled, tooltip, display, _ in shown
            if id(binding) in kept
        )
        last = None
        if palette is not None:
            _node, binding, enabled, _tooltip = palette
            last = (
                binding.key,
                self.app.get_key_display(binding),
                binding.description,
                binding.action,
                enabled,
                binding.tooltip or binding.description,
            )
        return width, self.compact, keys, last

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        plan = self.plan()
        self._shown_plan = plan
        _width, _compact, keys, palette = plan
        self.styles.grid_size_columns = len(keys)
        for key, display, description, action, enabled, tooltip in keys:
            yield FooterKey(key, display, description, action, disabled=not enabled, tooltip=tooltip).data_bind(
                compact=Footer.compact
            )
        if palette is not None:
            key, display, description, action, enabled, tooltip = palette
            yield FooterKey(
                key, display, description, action, classes="-command-palette", disabled=not enabled, tooltip=tooltip
            )

    def bindings_changed(self, screen: Screen) -> None:
        # Textual's footer waits for the terminal's focus before it lays out again; this one does not,
        # so the first frame in a terminal that never reports focus (tmux) has every key that fits.
        self._bindings_ready = True
        if self.is_attached and screen is self.screen:
            self._relayout()

    def on_resize(self, event: events.Resize) -> None:
        self._relayout()

    def _relayout(self) -> None:
        if self._relayout_due:
            return
        self._relayout_due = True
        self.call_after_refresh(self._relayout_now)

    async def _relayout_now(self) -> None:
        self._relayout_due = False
        if not self.is_attached or not self._bindings_ready:
            return
        if self.plan() != self._shown_plan:
            await self.recompose()
