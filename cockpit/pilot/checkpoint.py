"""Resume checkpoints, the exported evaluation artifact, and safe loading.

Everything Cockpit loads goes through :func:`safe_load`, which uses
``torch.load(weights_only=True)``: tensors, numbers, strings, lists and dicts
only. A pickle that would construct arbitrary objects (and so could run code)
is refused with :class:`UnsafeArtifact`, never unpickled.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import torch

from .. import fsutil
from ..fsutil import sha256  # one hashing function for exports and archives

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


def safe_load(path: Path | str, map_location: str | torch.device = "cpu") -> Any:
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UnsafeArtifact(
            f"{path}: refused to load: the file contains objects that are not plain tensors, numbers, "
            f"strings, lists or dicts, and unpickling them could run arbitrary code ({str(exc).splitlines()[0]}). "
            "Re-export it as a state_dict of tensors (or safetensors) from code you trust."
        ) from exc


def export_artifact(model: torch.nn.Module, out_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """Write the evaluation artifact: weights only (a state_dict on CPU) and a manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu").clone() for k, v in model.state_dict().items()}
    size = atomic_save(state, out_dir / MODEL_FILE)
    manifest = {
        **meta,
        "files": {MODEL_FILE: {"sha256": sha256(out_dir / MODEL_FILE), "bytes": size}},
        "load": "state = torch.load('model.pt', weights_only=True); model = build_model(params); model.load_state_dict(state)",
    }
    return manifest


def write_manifest(out_dir: Path, manifest: dict[str, Any]) -> None:
    fsutil.write_text(out_dir / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True))


def verify_manifest(out_dir: Path) -> dict[str, Any]:
    manifest = json.loads((out_dir / MANIFEST).read_text())
    for name, info in manifest.get("files", {}).items():
        got = sha256(out_dir / name)
        if got != info["sha256"]:
            raise UnsafeArtifact(
                f"{out_dir / name}: SHA-256 {got[:12]}… does not match the manifest's {info['sha256'][:12]}…"
            )
    return manifest
