"""The names of the task contract's open values: what a task's own functions receive and return.

A task is the user's code (``docs/tasks.md``): its ``datasets`` return examples, its ``collate`` makes a batch of
them, and every function receives the variant's settings as one flat mapping. What those hold is the user's choice
(a batch may carry tensors, strings, lists; a setting is any TOML value), so their values are ``Any`` on purpose,
and they are named here once instead of spelling ``dict[str, Any]`` at every function of the contract. Everything
Cockpit derives from them (gates, events, run records, settings) has its own typed record: :mod:`cockpit.schema`,
:class:`cockpit.notebook.settings.Settings`, :mod:`cockpit.runs`.
"""

from __future__ import annotations

from typing import Any, TypeAlias

Params: TypeAlias = dict[str, Any]
"""The variant's flat settings as a task's functions receive them (``[batch]``, ``[training]``, ``[task.params]``
and the variant's overrides); read them through :class:`~cockpit.notebook.settings.Settings` inside Cockpit."""

Example: TypeAlias = dict[str, Any]
"""One example as the task's ``datasets`` hold it: the task's own fields."""

Batch: TypeAlias = dict[str, Any]
"""What the task's ``collate`` returns and its ``loss`` reads: tensors, and whatever else the task puts there."""

__all__ = ["Batch", "Example", "Params"]
