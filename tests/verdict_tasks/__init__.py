"""Tiny tasks that each hold one kind of objective or one user mistake the verdicts must name (tests/gates/test_verdicts.py, tests/integration/test_verdicts.py)."""
