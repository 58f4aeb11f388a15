"""Real text for the character-level models, read from the Python standard library (nothing downloaded)."""

from __future__ import annotations

import inspect
import json.decoder
import textwrap


def corpus() -> str:
    """About 20,000 characters of Python source: the same on every machine with the same Python."""
    return inspect.getsource(json.decoder) + inspect.getsource(textwrap)


def vocabulary(text: str) -> list[str]:
    return sorted(set(text))
