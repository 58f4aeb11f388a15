"""A footer that drops keys it has no room for, instead of cutting them in the middle.

Textual's footer lays every shown key out in one row; in a narrow terminal the
last ones are cut off mid-word or squeezed into each other. This one keeps the
keys in the order the screen declares them (most important first) and leaves
out whole keys from the end until the rest fits, with the palette key last;
``?`` lists every key anyway. It lays itself out again when the terminal is
resized.
"""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

PALETTE_WIDTH = 12  # "^p palette" and its margin
ALWAYS = frozenset({"back", "help", "quit"})  # binding ids shown at any width


class FittingFooter(Footer):
    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        width = self.app.size.width  # the footer spans the screen (its own size is 0 before the first layout)
        active = self.screen.active_bindings
        palette = None
        if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE:
            palette = active.get(self.app.COMMAND_PALETTE_BINDING)
        room = width - (PALETTE_WIDTH if palette is not None else 0)
        seen: set[str] = set()
        shown = []
        for _node, binding, enabled, tooltip in active.values():
            if not binding.show or binding.action in seen:
                continue
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
        keys = [
            FooterKey(
                binding.key, display, binding.description, binding.action, disabled=not enabled, tooltip=tooltip
            ).data_bind(compact=Footer.compact)
            for binding, enabled, tooltip, display, _ in shown
            if id(binding) in kept
        ]
        self.styles.grid_size_columns = len(keys)
        yield from keys
        if palette is not None:
            _node, binding, enabled, tooltip = palette
            yield FooterKey(
                binding.key,
                self.app.get_key_display(binding),
                binding.description,
                binding.action,
                classes="-command-palette",
                disabled=not enabled,
                tooltip=binding.tooltip or binding.description,
            )

    def bindings_changed(self, screen: Screen) -> None:
        # Textual's footer waits for the terminal's focus before it lays out again; this one does not,
        # so the first frame in a terminal that never reports focus (tmux) has every key that fits.
        self._bindings_ready = True
        if self.is_attached and screen is self.screen:
            self.call_after_refresh(self.recompose)

    def on_resize(self, event: events.Resize) -> None:
        self.call_after_refresh(self.recompose)
