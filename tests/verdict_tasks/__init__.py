"""Tiny tasks that each hold one kind of objective or one user mistake the verdicts must name (tests/test_verdicts.py)."""
