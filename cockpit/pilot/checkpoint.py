"""Resume checkpoints, the exported evaluation artifact, and safe loading.

Everything Cockpit loads goes through :func:`safe_load`, which uses
``torch.load(weights_only=True)``: tensors, numbers, strings, lists and dicts
only. A pickle that would construct arbitrary objects (and so could run code)
is refused with :class:`UnsafeArtifact`, never unpickled.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypedDict, cast

import torch

from .. import fsutil
from ..contract import Example, Params
from ..fsutil import sha256  # one hashing function for exports and archives
from ..schema import JSON
from .microsteps import ControlOutputs

MODEL_FILE = "model.pt"
CONTROL_FILE = "control.pt"
MANIFEST = "manifest.json"


class UnsafeArtifact(Exception):
    """The file holds objects that safe loading refuses to construct."""


def atomic_save(obj: Any, path: Path) -> int:
    """torch.save through a temporary file, fsync and rename; returns the size in bytes."""
    path = Path(path)
    with fsutil.atomic_writer(path) as fh:
        torch.save(obj, fh)
    return path.stat().st_size


def safe_load(path: Path | str | IO[bytes], map_location: str | torch.device = "cpu") -> Any:
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UnsafeArtifact(
            f"{path}: refused to load: the file contains objects that are not plain tensors, numbers, "
            f"strings, lists or dicts, and unpickling them could run arbitrary code ({str(exc).splitlines()[0]}). "
            "Re-export it as a state_dict of tensors (or safetensors) from code you trust."
        ) from exc


if TYPE_CHECKING:  # typing.NotRequired is Python 3.11; annotations here are never evaluated
    from typing import NotRequired

    from ..schema import BaseIdentity


class Recorded(ControlOutputs):
    """``control.pt``: the control outputs an export must reproduce, the control inputs' ids, and the inputs
    themselves when they are not JSON (a dataset's tensors)."""

    ids: list[JSON]
    inputs: NotRequired[list[Example]]


class FileEntry(TypedDict):
    sha256: str
    bytes: int


class ExportMeta(TypedDict, total=False):
    """What an export records of the run it came from (the pilot's export phase, a training run's end)."""

    run: str
    entry: str  # the task's entry point
    params: Params
    step: int
    seed: int
    data_revision: dict[str, JSON]
    task_code: str | None  # the task code's SHA-256 at the run's start


class AdapterRecord(TypedDict):
    kind: str
    adapters: list[str]
    tensors: int
    values: int
    describe: str


class Manifest(ExportMeta, total=False):
    """An export's ``manifest.json``: the run it came from, its files and their hashes, what its weights are and
    how to load them, and its control inputs (here when they are JSON, else in control.pt)."""

    files: dict[str, FileEntry]
    weights: str  # "whole model" or "adapter"
    adapter: AdapterRecord
    base: BaseIdentity  # an adapter's base, by identity (cockpit.pilot.adapter.base_identity)
    load: str  # the code that loads it
    controls: list[Example]
    controls_in: str  # the file holding the control inputs when they are not JSON


def export_artifact(model: torch.nn.Module, out_dir: Path, meta: ExportMeta) -> Manifest:
    """Write the evaluation artifact: weights only (a state_dict on CPU) and a manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu").clone() for k, v in model.state_dict().items()}
    size = atomic_save(state, out_dir / MODEL_FILE)
    manifest: Manifest = {
        **meta,
        "files": {MODEL_FILE: {"sha256": sha256(out_dir / MODEL_FILE), "bytes": size}},
        "load": "state = torch.load('model.pt', weights_only=True); model = build_model(params); model.load_state_dict(state)",
    }
    return manifest


def export_trained(tr: Any, out_dir: Path, meta: ExportMeta, controls: list[Example]) -> Manifest:
    """Export a trainer's model with its control outputs, and write the manifest.

    An adapter over a frozen base (``cockpit.pilot.adapter``) is exported as its
    trainable tensors only, with the base's identity recorded; any other model as
    its whole state_dict. The control inputs' outputs (loss, predictions, and the
    generated text when the task generates) are what a reload must reproduce.
    """
    from . import adapter as adapter_

    out_dir.mkdir(parents=True, exist_ok=True)
    ad = tr.adapter
    frozen = tr.frozen_keys() if ad is not None else set()
    state = {k: v.detach().to("cpu").clone() for k, v in tr.model.state_dict().items() if k not in frozen}
    size = atomic_save(state, out_dir / MODEL_FILE)
    manifest: Manifest = {**meta, "files": {MODEL_FILE: {"sha256": sha256(out_dir / MODEL_FILE), "bytes": size}}}
    if ad is not None:
        manifest["weights"] = "adapter"
        manifest["adapter"] = {
            "kind": ad.kind,
            "adapters": ad.adapters,
            "tensors": len(state),
            "values": sum(int(t.numel()) for t in state.values()),
            "describe": ad.describe(),
        }
        manifest["base"] = adapter_.base_identity(tr.model, frozen)
        manifest["load"] = (
            "model = build_model(params)  # the base: its identity must equal manifest['base']; then "
            "model.load_state_dict(torch.load('model.pt', weights_only=True), strict=False)"
        )
    else:
        manifest["weights"] = "whole model"
        manifest["load"] = (
            "state = torch.load('model.pt', weights_only=True); model = build_model(params); model.load_state_dict(state)"
        )
    controls = [_python_scalars(c) for c in controls]  # numpy ids and labels (pandas rows): safe to load back
    outputs = tr.control_outputs(controls)
    recorded: Recorded = {
        "ids": [c.get("id") if isinstance(c, dict) else None for c in controls],
        "loss": outputs["loss"],
        "predictions": outputs["predictions"],
    }
    if "generated" in outputs:
        recorded["generated"] = outputs["generated"]
    try:
        json.dumps(controls)
        manifest["controls"] = controls
    except (TypeError, ValueError):  # examples holding tensors (a Lightning dataset): kept in control.pt
        recorded["inputs"] = controls
        manifest["controls_in"] = CONTROL_FILE
    csize = atomic_save(recorded, out_dir / CONTROL_FILE)
    manifest["files"][CONTROL_FILE] = {"sha256": sha256(out_dir / CONTROL_FILE), "bytes": csize}
    write_manifest(out_dir, manifest)
    return manifest


def _python_scalars(obj: Any) -> Any:
    """Numpy scalars (a row from pandas) as Python numbers, inside dicts and lists: control.pt loads back with
    ``weights_only=True``, which refuses numpy objects."""
    if isinstance(obj, dict):
        return {k: _python_scalars(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_python_scalars(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_python_scalars(v) for v in obj)
    if type(obj).__module__ == "numpy" and getattr(obj, "ndim", None) == 0:
        return obj.item()
    return obj


def controls_of(manifest: Mapping[str, object], recorded: Mapping[str, object]) -> list[Example]:
    """The control inputs an export recorded: in its manifest (JSON), or in control.pt when they hold tensors."""
    controls = manifest.get("controls")
    if controls is None:
        controls = recorded.get("inputs")
    if not isinstance(controls, list):
        raise UnsafeArtifact("the export records no control inputs (neither in its manifest nor in control.pt)")
    return controls


def load_exported(tr: Any, state: dict[str, torch.Tensor], manifest: Manifest) -> tuple[bool, str]:
    """Load exported weights into the model ``build_model`` made; an adapter only over the recorded base.

    Returns (loaded, what was checked, in words).
    """
    from . import adapter as adapter_

    if manifest.get("weights") != "adapter":
        tr.model.load_state_dict(state)
        return True, "whole model loaded"
    frozen = tr.frozen_keys()
    recorded: Mapping[str, object] = manifest.get("base") or {}
    same, said = adapter_.same_base(recorded, adapter_.base_identity(tr.model, frozen))
    if not same:
        return False, said
    got = tr.model.load_state_dict(state, strict=False)
    missing = sorted(set(got.missing_keys) - frozen)
    if missing or got.unexpected_keys:
        return False, (
            "the adapter does not fit the model build_model made: "
            + (f"missing {missing[:4]}" if missing else "")
            + (f" unexpected {list(got.unexpected_keys)[:4]}" if got.unexpected_keys else "")
        )
    return True, f"{said}; adapter loaded ({len(state)} tensors)"


def compare_controls(got: ControlOutputs, recorded: Recorded, n: int, exact: bool) -> tuple[bool, str]:
    """Whether replayed control outputs reproduce the recorded ones: bit-identical (CPU) or within 1e-5 (GPU)."""
    same_pred = bool(torch.equal(got["predictions"], recorded["predictions"]))
    a, b = float(got["loss"]), float(recorded["loss"])
    same_loss = a == b if exact else abs(a - b) <= 1e-5 * max(1.0, abs(b))
    how = "bit-identical" if exact else "predictions identical, loss within 1e-5"
    gen_a, gen_b = got.get("generated"), recorded.get("generated")
    same_gen = gen_a == gen_b
    gen_note = f", {len(gen_b)} generated texts identical" if gen_b is not None and same_gen else ""
    if same_pred and same_loss and same_gen:
        return True, f"{n} control inputs, {how}: loss {a:.6f} vs {b:.6f}{gen_note}"
    parts = [f"replayed loss {a:.6f} vs recorded {b:.6f}", f"predictions {'equal' if same_pred else 'differ'}"]
    if not same_gen:
        rows = [i for i, (x, y) in enumerate(zip(gen_a or [], gen_b or [], strict=False)) if x != y]
        first = rows[0] if rows else 0
        parts.append(
            f"generated text differs (row {first}: {(gen_a or [''])[first]!r} vs recorded {(gen_b or [''])[first]!r})"
            if rows
            else "generated text missing on one side"
        )
    return False, "; ".join(parts)


def write_manifest(out_dir: Path, manifest: Manifest) -> None:
    fsutil.write_text(out_dir / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True))


def verify_manifest(out_dir: Path) -> Manifest:
    manifest = cast(Manifest, json.loads((out_dir / MANIFEST).read_text()))
    for name, info in manifest.get("files", {}).items():
        got = sha256(out_dir / name)
        if got != info["sha256"]:
            raise UnsafeArtifact(
                f"{out_dir / name}: SHA-256 {got[:12]}… does not match the manifest's {info['sha256'][:12]}…"
            )
    return manifest
