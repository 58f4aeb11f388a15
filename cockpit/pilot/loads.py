"""The weights ``build_model`` loads land where they belong (silent errors, class 14).

``model.load_state_dict(state, strict=False)`` returns the keys it could not place and goes on: a checkpoint saved
from a DDP or ``torch.compile`` wrapper (every key prefixed ``module.`` or ``_orig_mod.``), or from another version
of the model, loads nothing, and the run trains from a random initialisation it believes pretrained. The loss
still falls; nothing fails until the result is compared with what was expected weeks later. Measured: every
``load_state_dict`` call made while ``build_model`` runs is recorded with what it returned, and the forward gate
judges each non-strict one: weights of the file that went nowhere while less than half of the model's keys were
filled is a checkpoint that does not fit. A strict load raises on its own; a load whose every key lands, however
few of the model's it fills (an adapter over its base, a pretrained body under a new head), is what
``strict=False`` is for.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

NAME = "weights loaded where they belong"
WRAPPERS = ("module.", "_orig_mod.", "model.")  # DDP's, torch.compile's, a Lightning module's attribute
FEW = 0.5  # a non-strict load that fills less than this share of the model's keys is named


@dataclass(frozen=True)
class Load:
    """One ``load_state_dict`` call and what it returned."""

    module: str  # the class it was called on
    strict: bool
    keys: int  # keys in the state dict handed to it
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]

    @property
    def filled(self) -> int:
        return self.keys - len(self.unexpected)

    @property
    def share(self) -> float:
        return self.filled / max(self.filled + len(self.missing), 1)


@contextmanager
def recorded() -> Iterator[list[Load]]:
    """Every ``Module.load_state_dict`` call made inside, with its result (the method is wrapped, then restored)."""
    original = torch.nn.Module.load_state_dict
    got: list[Load] = []

    @functools.wraps(original)
    def load_state_dict(self: torch.nn.Module, state_dict: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, state_dict, *args, **kwargs)
        strict = bool(kwargs.get("strict", args[0] if args else True))
        missing = tuple(getattr(result, "missing_keys", ()))
        unexpected = tuple(getattr(result, "unexpected_keys", ()))
        got.append(Load(type(self).__name__, strict, len(state_dict), missing, unexpected))
        return result

    torch.nn.Module.load_state_dict = load_state_dict  # type: ignore[method-assign]
    try:
        yield got
    finally:
        torch.nn.Module.load_state_dict = original  # type: ignore[method-assign]


def prefix(load: Load) -> tuple[str, bool]:
    """The wrapper prefix that tells the file's keys from the model's, and whether the file's keys carry it (saved
    from a wrapper) rather than the model's (a wrapper loaded with a plain file); ("", False) when none does."""
    missing = set(load.missing)
    for p in WRAPPERS:
        stripped = {k[len(p) :] for k in load.unexpected if k.startswith(p)}
        if load.unexpected and len(stripped) == len(load.unexpected) and stripped & missing:
            return p, True
        if missing and all(k.startswith(p) for k in missing) and {p + k for k in load.unexpected} & missing:
            return p, False
    return "", False


def judge(loads: list[Load]) -> tuple[str, str]:
    """(verdict, words): "na" (no load), "pass", "fail" (a non-strict load that filled nothing, or a wrapper's
    prefix in the way), "warn" (one that filled less than half the model while the file's weights went nowhere)."""
    if not loads:
        return "na", "build_model loaded no state dict"
    loose = [ld for ld in loads if not ld.strict]
    # every key of the file landing (an adapter loaded over its base, a body under a new head) is what strict=False
    # is for, however few of the model's keys it fills; weights of the file going nowhere while most of the model
    # stays random is a checkpoint that does not fit
    bad = [ld for ld in loose if ld.unexpected and ld.share < FEW]
    if not bad:
        said = "; ".join(
            f"{ld.module}: {ld.filled} of {ld.filled + len(ld.missing)} keys"
            + (f", {len(ld.missing)} of the model's not in the file ({_names(ld.missing)})" if ld.missing else "")
            + (f", {len(ld.unexpected)} of the file's went nowhere ({_names(ld.unexpected)})" if ld.unexpected else "")
            + ("" if ld.strict else " (strict=False)")
            for ld in loads[:3]
        )
        return "pass", f"{len(loads)} state dict{'s' if len(loads) > 1 else ''} loaded: {said}"
    ld = bad[0]
    p, in_file = prefix(ld)
    wrapper = "DDP" if p == "module." else "torch.compile" if p == "_orig_mod." else "a wrapper"
    if p and in_file:
        cause = (
            f"the file's keys carry the prefix {p!r} the model's do not (saved from {wrapper}'s state_dict): "
            "strip it before loading, or save the unwrapped model"
        )
    elif p:
        cause = (
            f"the model's keys carry the prefix {p!r} the file's do not (a plain state dict loaded into "
            f"{wrapper}): load it into the unwrapped model ({'model.module' if p == 'module.' else 'model._orig_mod' if p == '_orig_mod.' else 'the inner model'})"
        )
    else:
        cause = (
            f"the file's keys are not the model's ({_names(ld.unexpected)} against {_names(ld.missing)}): a "
            "checkpoint of another model or version"
        )
    nothing = ld.filled == 0 or bool(p)
    return (
        "fail" if nothing else "warn",
        (
            f"load_state_dict(strict=False) on {ld.module} filled {ld.filled} of its {ld.filled + len(ld.missing)} "
            f"keys ({ld.share:.0%}); {len(ld.missing)} stay as built and {len(ld.unexpected)} of the file's weights "
            f"went nowhere: {cause}. "
            + ("The run would train from scratch while believed pretrained; " if nothing else "")
            + "load with strict=True to see the mismatch as an error"
        ),
    )


def _names(keys: tuple[str, ...], k: int = 2) -> str:
    return ", ".join(keys[:k]) + (f" (+{len(keys) - k} more)" if len(keys) > k else "") if keys else "none"
