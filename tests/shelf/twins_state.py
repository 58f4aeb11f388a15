"""Broken twins of the shelf's families for the silent-error classes of state invariants (issue 35)."""

from __future__ import annotations

from tests.shelf.campaigns import Case

CASES: dict[str, Case] = {}
