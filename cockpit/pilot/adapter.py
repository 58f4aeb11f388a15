"""An adapter over a frozen base model: which parameters are the adapter's, and the base's identity.

A model is taken as *an adapter over a base* when the base is frozen and what
trains is small beside it:

- a PEFT model (LoRA and the rest: it has ``peft_config`` and ``get_base_model``)
  declares its adapter itself: the parameters whose dotted name holds one of its
  adapter names (``...q_proj.lora_A.default.weight``, ``...modules_to_save.default...``);
  every other parameter belongs to the base and must not change in training;
- any other model whose frozen parameters (``requires_grad`` False) hold at least
  ``SMALL`` of its values: a head trained over a frozen encoder, an adapter written by hand.

For such a model the evaluation artifact holds the trainable tensors only, and
the base is recorded by its *identity*: a SHA-256 over every frozen tensor (name,
dtype, shape, bytes; names as the base model itself has them, without PEFT's
wrapping), with the base's configuration (its hash, ``name_or_path`` and the
hub revision when it came from one). Reloading rebuilds the base with the task's
``build_model``, checks that its identity is the recorded one, then loads the
adapter. No PEFT or transformers import here: the model is read by duck typing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ..schema import JSON, BaseIdentity

SMALL = 0.9  # a frozen base holding at least this share of the values makes the trainable rest "an adapter"


@dataclass
class Adapter:
    kind: str  # "peft" or "frozen base"
    adapter_names: set[str] = field(default_factory=set)  # parameters of the adapter itself (PEFT's declaration)
    base_names: set[str] = field(default_factory=set)  # parameters of the base model
    adapters: list[str] = field(default_factory=list)  # PEFT adapter names ("default")
    trainable_values: int = 0
    total_values: int = 0

    @property
    def share(self) -> float:
        return self.trainable_values / max(self.total_values, 1)

    def describe(self) -> str:
        what = f"PEFT adapter {', '.join(self.adapters)}" if self.kind == "peft" else "trainable parameters"
        return (
            f"{what}: {self.trainable_values:,} of {self.total_values:,} parameter values "
            f"({100 * self.share:.2g}%) over a frozen base"
        )


def is_peft(model: Any) -> bool:
    return isinstance(getattr(model, "peft_config", None), dict) and callable(getattr(model, "get_base_model", None))


def _peft_adapter_names(model: Any) -> list[str]:
    return [str(k) for k in model.peft_config]


def detect(model: torch.nn.Module, trainable: set[str]) -> Adapter | None:
    """The adapter in ``model``, or None when the model trains as a whole (or nothing is frozen)."""
    named = list(model.named_parameters())
    total = sum(p.numel() for _, p in named)
    train_values = sum(p.numel() for n, p in named if n in trainable)
    if is_peft(model):
        names = set(_peft_adapter_names(model))
        own = {n for n, _ in named if names & set(n.split("."))}
        return Adapter(
            "peft",
            adapter_names=own,
            base_names={n for n, _ in named} - own,
            adapters=sorted(names),
            trainable_values=train_values,
            total_values=total,
        )
    frozen = {n for n, _ in named if n not in trainable}
    if not frozen or not trainable or total == 0 or (total - train_values) < SMALL * total:
        return None
    return Adapter(
        "frozen base",
        adapter_names=set(trainable),
        base_names=frozen,
        trainable_values=train_values,
        total_values=total,
    )


# --------------------------------------------------------------------------- the base's identity


def base_key(model: Any, key: str) -> str:
    """A state-dict key as the base model itself names it: PEFT's wrapping taken off."""
    if is_peft(model) and key.startswith("base_model.model."):
        key = key[len("base_model.model.") :]
    return key.replace(".base_layer.", ".").replace(".original_module.", ".")


def _jsonable(v: object) -> JSON:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set)):
        items = [_jsonable(x) for x in v]
        return sorted(items, key=str) if isinstance(v, set) else items
    return str(v)


def base_identity(model: Any, frozen_keys: set[str]) -> BaseIdentity:
    """The frozen base's identity: a SHA-256 over its tensors, its configuration and revision when known."""
    state = model.state_dict()
    h = hashlib.sha256()
    values = nbytes = 0
    keys = sorted((base_key(model, k), k) for k in frozen_keys if k in state)
    for name, k in keys:
        t = state[k].detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        if t.numel():
            h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
        values += t.numel()
        nbytes += t.numel() * t.element_size()
    base = model.get_base_model() if is_peft(model) else model
    out: BaseIdentity = {
        "sha256": h.hexdigest(),
        "tensors": len(keys),
        "values": values,
        "bytes": nbytes,
        "class": type(base).__name__,
    }
    cfg = getattr(base, "config", None)
    if cfg is not None and callable(getattr(cfg, "to_dict", None)):
        try:
            as_dict = cfg.to_dict()
        except Exception:  # noqa: BLE001 - a config that cannot be read is simply not recorded
            as_dict = None
        if isinstance(as_dict, dict):
            as_dict = {
                k: v for k, v in as_dict.items() if k not in ("_name_or_path", "_commit_hash", "transformers_version")
            }
            text = json.dumps(_jsonable(as_dict), sort_keys=True)
            out["config_sha256"] = hashlib.sha256(text.encode()).hexdigest()
        out["name_or_path"] = str(getattr(cfg, "_name_or_path", "") or getattr(cfg, "name_or_path", "") or "")
        out["model_type"] = getattr(cfg, "model_type", None)
        revision = getattr(cfg, "_commit_hash", None)
        if revision:
            out["revision"] = str(revision)
    if is_peft(model):
        adapters: dict[str, dict[str, JSON]] = {}
        for name, pc in model.peft_config.items():
            d = pc.to_dict() if callable(getattr(pc, "to_dict", None)) else {}
            adapters[str(name)] = {
                k: _jsonable(d.get(k))
                for k in (
                    "peft_type",
                    "task_type",
                    "base_model_name_or_path",
                    "revision",
                    "r",
                    "lora_alpha",
                    "target_modules",
                )
                if d.get(k) is not None
            }
        out["peft"] = adapters
    return out


def same_base(recorded: Mapping[str, object], rebuilt: BaseIdentity) -> tuple[bool, str]:
    """Whether the base build_model made now is the one the adapter was trained on, in words."""
    if recorded.get("sha256") == rebuilt.get("sha256"):
        return True, f"base identical (SHA-256 {str(recorded['sha256'])[:12]}… over {recorded.get('tensors')} tensors)"
    where = recorded.get("name_or_path") or recorded.get("class") or "the base"
    return False, (
        f"the base model build_model made is not the one the adapter was trained on: its frozen tensors hash to "
        f"{str(rebuilt.get('sha256'))[:12]}…, the artifact records {str(recorded.get('sha256'))[:12]}… ({where}"
        + (f", revision {recorded['revision']}" if recorded.get("revision") else "")
        + "); load the same base weights (path, revision, dtype) before the adapter"
    )
