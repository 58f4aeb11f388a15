"""Check an archive (``cockpit archive --verify``): hashes first, then safe loading, then the replay.

``check_hashes`` refuses a changed, missing, added or outside file before
anything is unpickled; ``load`` then reads the weights with
``torch.load(weights_only=True)`` only; ``verify`` rebuilds the model with the
archived task reference and parameters and replays the control inputs against
the recorded outputs. Torch and the task's code are imported only there, lazily.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

from .. import fsutil, runs
from ..fsutil import sha256
from ..schema import JSON, JSONObject
from .layout import ARTIFACT_MANIFEST, CHECKPOINT, CONTROL, MANIFEST, MODEL

if TYPE_CHECKING:
    from ..pilot.checkpoint import Manifest  # torch: the type only


@dataclass
class Verified:
    folder: Path
    manifest: JSONObject  # the archive's manifest.json ({} when it could not be read)
    problems: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    state: dict[str, object] | None = None  # the archived state_dict: parameter name -> tensor

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def files(self) -> Mapping[str, JSON]:
        """The manifest's ``files`` table: archived path -> its sha256 and bytes ({} when there is none)."""
        listed = self.manifest.get("files")
        return listed if isinstance(listed, Mapping) else {}


def _walk(folder: Path) -> tuple[set[str], list[str]]:
    """The archive's regular files (relative paths) and a problem for anything else in it (links never followed)."""
    files: set[str] = set()
    problems: list[str] = []
    for top, dirs, names in os.walk(folder, followlinks=False):
        for name in [*dirs, *names]:
            p = Path(top) / name
            rel = str(p.relative_to(folder))
            if p.is_symlink():
                problems.append(
                    f"{rel}: a symbolic link (to {os.readlink(p)}); an archive holds only its own files, "
                    "so it is not followed"
                )
            elif name in names:
                if fsutil.is_regular(p):
                    files.add(rel)
                else:
                    problems.append(f"{rel}: not a regular file (a FIFO or a device); not read")
        dirs[:] = [d for d in dirs if not (Path(top) / d).is_symlink()]
    return files, problems


def _inside(name: object) -> bool:
    """A relative path that stays inside the archive: no absolute path, no '..', no empty part."""
    if not isinstance(name, str) or not name or name.startswith("/") or "\\" in name or "\0" in name:
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def check_hashes(folder: Path) -> tuple[JSONObject, list[str]]:
    """Every file listed with the right hash, none missing, none added, none outside. No unpickling here."""
    folder = Path(folder)
    mp = folder / MANIFEST
    if not fsutil.is_regular(mp):
        return {}, [f"{mp}: no manifest (or not a regular file); this is not a Cockpit archive"]
    try:
        manifest = json.loads(fsutil.read_regular(mp, 64 << 20))
    except (OSError, ValueError, RecursionError) as exc:
        return {}, [f"{mp}: not valid JSON ({exc})"]
    listed = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(listed, dict):
        return {}, [f"{mp}: has no 'files' table; this is not a Cockpit archive"]
    present, problems = _walk(folder)
    for name, info in sorted(listed.items()):
        if not _inside(name):
            problems.append(f"{name!r}: a path that leaves the archive; refused, nothing outside is read")
            continue
        if name not in present:
            p = folder / name
            problems.append(f"{name}: missing" if not os.path.lexists(p) else f"{name}: not a file of the archive")
            continue
        got = sha256(folder / name, follow=False)
        want = info.get("sha256") if isinstance(info, dict) else None
        if got != want:
            problems.append(
                f"{name}: SHA-256 {got[:12]}… does not match the manifest's "
                f"{str(want)[:12]}…: the file changed after archiving"
            )
    for rel in sorted(present):
        if rel != MANIFEST and rel not in listed:
            problems.append(f"{rel}: not in the manifest (added after archiving)")
    if MODEL not in listed and CHECKPOINT not in listed:
        problems.append(f"{MODEL}: not listed in the manifest")
    return manifest, problems


def load(folder: Path | str, map_location: str = "cpu") -> Verified:
    """Verify the hashes, then load the weights with safe loading only."""
    folder = Path(folder)
    manifest, problems = check_hashes(folder)
    v = Verified(folder, manifest, problems)
    if problems:
        return v
    v.lines.append(f"{len(v.files)} files match their SHA-256 in {MANIFEST}")
    from ..pilot.checkpoint import UnsafeArtifact, safe_load  # torch, only now

    for name in (MODEL, CHECKPOINT, CONTROL):
        if name not in v.files:
            continue
        try:
            obj = safe_load(folder / name, map_location=map_location)
        except UnsafeArtifact as exc:
            v.problems.append(f"{name}: REFUSED by safe loading: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - a corrupt file is a verification failure, said plainly
            v.problems.append(f"{name}: cannot be read as a torch file: {type(exc).__name__}: {exc}")
            continue
        if name == CHECKPOINT and isinstance(obj, dict):
            obj = obj.get("model")
        if name in (MODEL, CHECKPOINT):
            if not isinstance(obj, dict) or not obj:
                v.problems.append(f"{name}: not a state_dict (a non-empty dict of tensors): got {type(obj).__name__}")
                continue
            import torch

            tensors = {k: t for k, t in obj.items() if isinstance(t, torch.Tensor)}
            numel = sum(t.numel() for t in tensors.values())
            v.lines.append(
                f"{name}: loaded with torch.load(weights_only=True): {len(tensors)} tensors, {numel:,} values"
            )
            v.state = obj
        else:
            v.lines.append(f"{name}: loaded with torch.load(weights_only=True)")
    return v


def verify(folder: Path | str, replay: bool = True) -> Verified:
    """Hashes, safe loading, then (``replay``) the model rebuilt by the task and its control inputs replayed."""
    v = load(folder)
    if v.ok and replay:
        rebuild_and_replay(v)
    return v


def rebuild_and_replay(v: Verified) -> None:
    """Rebuild the model from the archived task reference and parameters, load the weights, replay the controls.

    The task's code runs here (found where the run found it: ``revisions.json`` task_source, else the entry
    beside the run's campaign); a task code whose SHA-256 differs from the run's is said, not refused.
    """
    folder, files = v.folder, v.files
    if MODEL not in files or CONTROL not in files or ARTIFACT_MANIFEST not in files:
        v.lines.append("no control outputs archived (no export): the model was not rebuilt or replayed")
        return
    try:
        frozen = runs.read_run_toml(folder / "config")
        art = cast("Manifest", json.loads(fsutil.read_regular(folder / ARTIFACT_MANIFEST, 64 << 20)))  # enters here
        rev = json.loads(fsutil.read_regular(folder / "revisions.json", 16 << 20))
    except (OSError, ValueError, RecursionError, KeyError) as exc:
        v.problems.append(f"cannot read the run's configuration to rebuild it: {exc}")
        return
    if not isinstance(art, dict) or "controls" not in art and "controls_in" not in art:
        v.lines.append("the export recorded no control inputs: the model was not rebuilt or replayed")
        return
    entry = str(frozen.get("task", {}).get("entry", ""))
    attr = entry.rpartition(":")[2]
    source = rev.get("task_source") if isinstance(rev, dict) else None
    campaign_dir = Path(str(v.manifest.get("source", ""))).parent.parent if v.manifest.get("source") else None
    if entry.rpartition(":")[0].endswith(".py") and source and Path(source).is_file():
        where, base = f"{source}:{attr}", None  # a task file: where the run found it
    else:
        where, base = entry, campaign_dir  # a module: imported as the run imported it
    from ..pilot import checkpoint as ck
    from ..pilot import child, trainer  # torch and the task's code, only now
    from ..pilot.task import TaskError, load_task

    recorded_code = rev.get("task_code_sha256") if isinstance(rev, dict) else None
    now = runs.task_revision(where, base or Path(".")).get("task_code")
    if recorded_code and now and now != recorded_code:
        v.lines.append(
            f"the task code changed since the run (SHA-256 {str(now)[:12]}… now, {str(recorded_code)[:12]}… then): "
            "a replay that differs may come from that"
        )
    params = dict(frozen.get("params") or {})
    seed = int((frozen.get("run") or {}).get("seed", 0))
    try:
        task = load_task(where, base)
        recorded = ck.safe_load(folder / CONTROL)
        controls = ck.controls_of(art, recorded)
        tr = trainer.Trainer(
            task,
            params,
            seed,
            trainer.resolve_device(params.get("device")),
            splits={"train": controls, "val": controls},
        )
        tr.load_data()
        tr.build()
        result = child.replay_into(tr, folder / MODEL, folder / CONTROL, art)
    except (TaskError, trainer.UserCodeError, ck.UnsafeArtifact) as exc:
        v.problems.append(f"rebuilding the model from {where} failed: {exc}")
        return
    except Exception as exc:  # noqa: BLE001 - the task's code raising anything: said plainly, never a traceback
        v.problems.append(f"rebuilding the model from {where} failed: {type(exc).__name__}: {exc}")
        return
    if result["equal"]:
        v.lines.append(f"rebuilt with {where} and replayed: {result['detail']}")
    else:
        v.problems.append(f"rebuilt with {where}, but the replay does not reproduce the archive: {result['detail']}")
