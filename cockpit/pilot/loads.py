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

The weights a load placed must also still be there when ``build_model`` returns: ``model.apply(init_weights)``
meant for a new head but run over the whole model, a ``reset_parameters()`` or ``post_init()`` after the load,
re-initialise the pretrained body in place, and the run trains from scratch just the same. Measured: right after
each load, a strided sample (at most :data:`SAMPLE` values) of every floating parameter it filled is kept with the
tensor itself; when ``build_model`` returns, each tensor still of that size is sampled again. Tensors the code
replaced (a new head, tied weights) are not compared, nor constant ones (zeros, ones: a re-initialisation gives them
back); a cast to bf16 or fp16 moves a value by less than :data:`MOVED` of the tensor's largest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .. import blame

NAME = "weights loaded where they belong"
WRAPPERS = ("module.", "_orig_mod.", "model.")  # DDP's, torch.compile's, a Lightning module's attribute
FEW = 0.5  # a non-strict load that fills less than this share of the model's keys is named
SAMPLE = 256  # values of each loaded tensor compared when build_model returns
MOVED = 1e-2  # a sampled value that moved by more than this share of the tensor's largest was overwritten


@dataclass(frozen=True)
class Load:
    """One ``load_state_dict`` call and what it returned."""

    module: str  # the class it was called on
    strict: bool
    keys: int  # keys in the state dict handed to it
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]
    site: str = ""  # the user's line that called it, "file.py:LINE in function", or ""
    compared: int = 0  # loaded tensors compared when build_model returned (floating, not constant, same size)
    overwritten: tuple[str, ...] = ()  # those whose values had changed since the load
    overwritten_by: str = ""  # the user's line behind most of those changes, "file.py:LINE in function", or ""

    @property
    def filled(self) -> int:
        return self.keys - len(self.unexpected)

    @property
    def share(self) -> float:
        return self.filled / max(self.filled + len(self.missing), 1)


@contextmanager
def recorded() -> Iterator[list[Load]]:
    """Every ``Module.load_state_dict`` call made inside, with its result (the method is wrapped, then restored),
    and whether what each placed was overwritten before the block ended (and by which line of the user's)."""
    original = torch.nn.Module.load_state_dict
    got: list[Load] = []
    kept: list[list[tuple[str, torch.Tensor, torch.Tensor]]] = []  # per load: (name, tensor, its sample then)
    writes = _Writes()

    @functools.wraps(original)
    def load_state_dict(self: torch.nn.Module, state_dict: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, state_dict, *args, **kwargs)
        strict = bool(kwargs.get("strict", args[0] if args else True))
        missing = tuple(getattr(result, "missing_keys", ()))
        unexpected = tuple(getattr(result, "unexpected_keys", ()))
        got.append(Load(type(self).__name__, strict, len(state_dict), missing, unexpected, _site()))
        kept.append(_sampled(self, state_dict))
        writes.watch(len(kept) - 1, kept[-1])
        return result

    torch.nn.Module.load_state_dict = load_state_dict  # type: ignore[method-assign]
    try:
        yield got
    finally:
        torch.nn.Module.load_state_dict = original  # type: ignore[method-assign]
        writes.stop()
        for i, samples in enumerate(kept):
            moved = [(name, _moved(t, then)) for name, t, then in samples]
            compared = [name for name, m in moved if m is not None]
            changed = tuple(name for name, m in moved if m)
            sites = Counter(writes.at[(i, name)] for name in changed if (i, name) in writes.at)
            by = sites.most_common(1)[0][0] if sites else ""
            got[i] = dataclasses.replace(got[i], compared=len(compared), overwritten=changed, overwritten_by=by)
        kept.clear()


class _Writes(TorchFunctionMode):
    """After the first load, until the block ends: the user's line behind the last in-place operation on each
    loaded tensor (``nn.init.normal_(m.weight)``, ``p.data.zero_()``: known by the tensor's data pointer)."""

    QUIET = frozenset({"requires_grad_", "share_memory_", "retain_grad", "pin_memory_"})  # the values stay

    def __init__(self) -> None:
        super().__init__()
        self.ptrs: dict[int, tuple[int, str]] = {}
        self.at: dict[tuple[int, str], str] = {}
        self.on = False

    def watch(self, load: int, samples: list[tuple[str, torch.Tensor, torch.Tensor]]) -> None:
        for name, t, _ in samples:
            with contextlib.suppress(Exception):
                self.ptrs[t.data_ptr()] = (load, name)
        if self.ptrs and not self.on:
            self.__enter__()
            self.on = True

    def stop(self) -> None:
        if self.on:
            self.on = False
            self.__exit__(None, None, None)

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        inplace = name.endswith("_") and not name.endswith("__") and name not in self.QUIET
        if inplace and args and isinstance(args[0], torch.Tensor):
            try:
                key = self.ptrs.get(args[0].data_ptr())
            except Exception:  # noqa: BLE001 - a tensor without storage is none of the loaded ones
                key = None
            if key is not None:
                self.at[key] = _site()
        return func(*args, **(kwargs or {}))


def _site() -> str:
    """The deepest line of the user's own code on the stack: the call that loaded."""
    return blame.calling_line(3)


def _sample(t: torch.Tensor) -> torch.Tensor | None:
    """At most SAMPLE values at evenly spaced logical positions, whatever the layout (channels_last, a view), as
    float64 on the CPU; None for what has no values to compare."""
    if t.is_meta or not t.is_floating_point() or t.numel() == 0:
        return None
    d = t.detach()
    if d.dim() == 0:
        return d.reshape(1).to("cpu", torch.float64, copy=True)
    idx = torch.arange(0, d.numel(), max(1, d.numel() // SAMPLE))[:SAMPLE]
    at = tuple(c.to(d.device) for c in torch.unravel_index(idx, d.shape))
    return d[at].to("cpu", torch.float64, copy=True)


def _sampled(module: torch.nn.Module, state_dict: Any) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """The floating, non-constant parameters the load filled, each with a sample of its values as loaded."""
    out: list[tuple[str, torch.Tensor, torch.Tensor]] = []
    try:
        keys = set(state_dict.keys())
        for name, p in module.named_parameters():
            if name in keys:
                s = _sample(p)
                if s is not None and bool((s != s[0]).any()):
                    out.append((name, p, s))
    except Exception:  # noqa: BLE001 - a measurement, never a reason for the user's load to fail
        return []
    return out


def _moved(t: torch.Tensor, then: torch.Tensor) -> bool | None:
    """Whether the tensor's values moved since the load; None when it no longer compares (resized, emptied)."""
    try:
        now = _sample(t)
    except Exception:  # noqa: BLE001 - a tensor some wrapper made unreadable is not compared
        return None
    if now is None or now.shape != then.shape:
        return None
    return bool((now - then).abs().max() > MOVED * then.abs().max())


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
    over = [ld for ld in loads if ld.compared and 2 * len(ld.overwritten) > ld.compared]
    if over and not bad:
        ld = over[0]
        return "fail", (
            f"{len(ld.overwritten)} of the {ld.compared} weights load_state_dict placed in {ld.module}"
            + (f" at {ld.site}" if ld.site else "")
            + f" had other values when build_model returned ({_names(ld.overwritten)}): "
            + (
                f"{ld.overwritten_by} wrote over them after the load"
                if ld.overwritten_by
                else "something after the load wrote over them"
            )
            + " (an initialisation meant for new modules, such as model.apply(init_weights), reset_parameters() or "
            "post_init(), run over the loaded ones), and the run would train from a fresh initialisation while "
            "believed pretrained. "
            "Initialise the new modules only (or before the load), then load"
        )
    if not bad:
        said = "; ".join(
            f"{ld.module}: {ld.filled} of {ld.filled + len(ld.missing)} keys"
            + (f", {len(ld.missing)} of the model's not in the file ({_names(ld.missing)})" if ld.missing else "")
            + (f", {len(ld.unexpected)} of the file's went nowhere ({_names(ld.unexpected)})" if ld.unexpected else "")
            + ("" if ld.strict else " (strict=False)")
            for ld in loads[:3]
        )
        redone = [f"{len(ld.overwritten)} in {ld.module} ({_names(ld.overwritten)})" for ld in loads if ld.overwritten]
        if redone:
            said += "; re-initialised after the load, as a fine-tune may mean to: " + ", ".join(redone)
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
