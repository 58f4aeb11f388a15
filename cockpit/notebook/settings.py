"""A variant's effective settings, read through one accessor per setting.

The notebook's ``[training]``, ``[batch]`` and ``[task.params]`` with the variant's overrides on top are one flat
mapping (:meth:`Notebook.params`): it is what a run freezes in ``run.toml`` and what the task's functions receive.
:class:`Settings` wraps that mapping once; the pilot, the series, the sheet and the plan ask it for a setting
(``settings.accumulation``) instead of each spelling the setting's default (``int(p.get("accumulation") or 1)``).
The mapping itself is still there, unchanged, as :attr:`Settings.params`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from ..contract import Params
from .model import Notebook

# A TOML value as tomllib returns it (dates aside: Cockpit writes none); read-only, so a table of strings is one.
TomlValue: TypeAlias = "str | int | float | bool | Sequence[TomlValue] | Mapping[str, TomlValue]"
SettingValue: TypeAlias = "TomlValue | None"  # a setting's value, None where it is not set
"""One setting's value as the notebook (a TOML value) or an override gives it; None: unset."""


@dataclass(frozen=True)
class Settings:
    """One variant's effective settings (or a run's, from its frozen ``params``)."""

    params: Mapping[str, Any]  # the flat mapping the task's functions receive, as the notebook or run.toml says

    @classmethod
    def of(cls, nb: Notebook, variant: str | None = None) -> Settings:
        """The variant's settings (the reference's when ``variant`` is None), made from the notebook."""
        return cls(nb.params(variant))

    def with_(self, changes: Mapping[str, SettingValue]) -> Settings:
        """These settings with ``changes`` on top (a value of None unsets the setting)."""
        out = dict(self.params)
        out.update(changes)
        return Settings(out)

    def given(self) -> Settings:
        """The same settings with the unset (None) ones left out, as run.toml freezes them."""
        return Settings({k: v for k, v in self.params.items() if v is not None})

    def values(self, leave_out: frozenset[str] | tuple[str, ...] = ()) -> dict[str, SettingValue]:
        """The set (not None) settings by name, ``leave_out`` left out: what two variants' settings are compared by."""
        return {k: v for k, v in self.params.items() if k not in leave_out and v is not None}

    def flat(self) -> Params:
        """A copy of the flat mapping, for the task's functions and for run.toml."""
        return dict(self.params)

    # ---- batch

    @property
    def microbatch(self) -> int:
        return int(self.params["microbatch"])

    @property
    def accumulation(self) -> int:
        """Microbatches per update (absent or 0: one)."""
        return int(self.params.get("accumulation") or 1)

    @property
    def eval_microbatch(self) -> int:
        """The validation microbatch (absent: the training one)."""
        return int(self.params.get("eval_microbatch") or self.microbatch)

    @property
    def data_replicas(self) -> int:
        return int(self.params.get("data_replicas") or 1)

    @property
    def model_parallel(self) -> int:
        return int(self.params.get("model_parallel") or 1)

    @property
    def gpus(self) -> int:
        """GPUs one run of the variant uses: data replicas times model-parallel ways."""
        return self.data_replicas * self.model_parallel

    @property
    def per_update(self) -> int:
        """Examples per update over every replica."""
        return self.microbatch * self.accumulation * self.data_replicas

    @property
    def dataset_size(self) -> int | None:
        """The training split's size, when the notebook gives it (None: taken from the task's split)."""
        n = self.params.get("dataset_size")
        return int(n) if n is not None else None

    @property
    def drop_last(self) -> bool:
        """Whether the incomplete last update of an epoch is dropped (absent: it is)."""
        return bool(self.params.get("drop_last", True))

    # ---- budget: exactly one of updates, epochs, examples

    @property
    def updates(self) -> int | None:
        u = self.params.get("updates")
        return int(u) if u else None

    @property
    def budget_updates(self) -> int | None:
        """The budget's updates as given (0 stays 0; None: the budget is given otherwise)."""
        u = self.params.get("updates")
        return int(u) if u is not None else None

    @property
    def epochs(self) -> float | None:
        """The budget in epochs, as given (a whole number stays one: the budget's ``amount`` reports it as such)."""
        e = self.params.get("epochs")
        return None if e is None else e if isinstance(e, (int, float)) else float(e)

    @property
    def examples(self) -> int | None:
        e = self.params.get("examples")
        return int(e) if e is not None else None

    # ---- training

    @property
    def precision(self) -> str:
        """fp32, bf16 or fp16 (absent: fp32)."""
        return str(self.params.get("precision") or "fp32")

    @property
    def device(self) -> str | None:
        d = self.params.get("device")
        return str(d) if d is not None else None

    @property
    def optimizer(self) -> str | None:
        o = self.params.get("optimizer")
        return str(o) if o is not None else None

    @property
    def momentum(self) -> float:
        return float(self.params.get("momentum") or 0.0)

    @property
    def grad_clip(self) -> float:
        """The gradient norm clipped to (0, or absent: no clipping)."""
        return float(self.params.get("grad_clip") or 0.0)
