"""Text from files, shown as text: never markup, never terminal control.

Everything the TUI shows from ``campaign.toml``, ``events.jsonl``,
``inspect.json``, ``metrics.json`` or an exception message goes through
:func:`plain` (or :func:`one_line`) and reaches widgets as a Rich ``Text``,
never as a string a widget would parse as markup: ``[/x]`` in a variant's
description is four characters, not a closing tag. Control characters (an
escape sequence in a log line, a NUL, a lone surrogate from a JSON escape)
are replaced by visible placeholders, so a file can neither garble the
terminal nor make the output unencodable.
"""

from __future__ import annotations

import re

from rich.text import Text

# C0 controls except newline and tab, DEL, C1 controls, lone surrogates, and the bidirectional
# overrides that would reorder the rest of a line on screen.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u202a-\u202e\u2066-\u2069]")
LINE_LIMIT = 2000  # characters of one single-line value shown (a 1 MB stop reason stays cheap to draw)


def _visible(match: re.Match[str]) -> str:
    ch = match.group()
    code = ord(ch)
    if code < 0x20 or code == 0x7F:
        return chr(0x2400 + (code if code < 0x20 else 0x21))  # the Control Pictures block: ␛ ␀ ␡
    return "\ufffd"


def clean(value: object) -> str:
    """``value`` as a string with control characters made visible; newlines and tabs kept."""
    text = value if isinstance(value, str) else str(value)
    return _CONTROL.sub(_visible, text)


def clean_line(value: object, limit: int = LINE_LIMIT) -> str:
    """One line: newlines and tabs as spaces, cut at ``limit`` characters with an ellipsis."""
    raw = value if isinstance(value, str) else str(value)
    text = clean(raw.replace("\r\n", " ").replace("\n", " ").replace("\r", " ").replace("\t", " "))
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def plain(value: object, style: str = "") -> Text:
    """A Text that shows ``value`` literally (newlines kept)."""
    return Text(clean(value).replace("\t", "    "), style=style)


def one_line(value: object, style: str = "", limit: int = LINE_LIMIT) -> Text:
    """A Text that shows ``value`` literally on one line."""
    return Text(clean_line(value, limit), style=style)
