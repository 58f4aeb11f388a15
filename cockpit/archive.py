"""Archive a run for safekeeping, and load it back safely.

``gather`` copies what someone needs to trust and reuse a run without the
campaign folder: the evaluation artifact (weights as a state_dict, the
control outputs), the frozen run.toml and the notebook variant's
configuration, the revisions (git commit of the task code, package
versions), the raw metrics, a README with reload instructions, and a
``manifest.json`` with the SHA-256 of every file. It writes into a temporary
folder and renames it at the end, so a half-written archive never looks
complete.

``load``/``verify`` check every hash first (a changed, missing or added file
is refused before anything is unpickled), then load the weights with
``cockpit.pilot.checkpoint.safe_load`` (``torch.load(weights_only=True)``),
which refuses a pickled object. Only these functions import torch, lazily.
"""

from __future__ import annotations

import datetime as _dt
import importlib.machinery
import importlib.util
import json
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from . import events as ev
from . import notebook as nbm
from . import runs
from .errors import CockpitError
from .fsutil import sha256

FORMAT = "cockpit-archive/1"
MANIFEST = "manifest.json"
MODEL = "model/model.pt"
CONTROL = "model/control.pt"
CHECKPOINT = "model/checkpoint.pt"  # series runs: the final training checkpoint
METRIC_SUFFIXES = (".jsonl", ".csv")
METRIC_JSON = ("metrics.json", "replay.json", "resume.json")


class ArchiveError(CockpitError):
    """An archive that cannot be written, or one that fails verification."""

    exit_code = 1


# --------------------------------------------------------------------------- revisions


def _git(cwd: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def git_revision(path: Path | None) -> dict[str, Any] | str:
    """The commit holding ``path``, and whether that file has uncommitted changes."""
    if path is None:
        return "source file not found"
    folder = path if path.is_dir() else path.parent
    top = _git(folder, "rev-parse", "--show-toplevel")
    commit = _git(folder, "rev-parse", "HEAD") if top else None
    if not top or not commit:
        return "not a git checkout"
    status = _git(Path(top), "status", "--porcelain", "--", str(path)) or ""
    return {"repository": top, "commit": commit, "path": str(path), "uncommitted_changes": bool(status.strip())}


def _module_file(name: str) -> Path | None:
    """The file of a module, found without executing it when the path finder can."""
    path = None
    spec = None
    for i, part in enumerate(name.split(".")):
        spec = importlib.machinery.PathFinder.find_spec(part, path)
        if spec is None:
            break
        path = spec.submodule_search_locations
        if path is None and i < len(name.split(".")) - 1:
            spec = None
            break
    if spec is None:
        try:  # editable installs use their own finder; this imports the parent packages only
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
    return Path(spec.origin) if spec is not None and spec.origin and spec.origin != "built-in" else None


def task_source(entry: str, campaign_dir: Path | None) -> Path | None:
    where = entry.rpartition(":")[0]
    if where.endswith(".py"):
        cands = [Path(where)] if Path(where).is_absolute() else [Path(campaign_dir or ".") / where, Path(where)]
        return next((p.resolve() for p in cands if p.is_file()), None)
    return _module_file(where)


def revisions(frozen: dict[str, Any], run_start: dict[str, Any], campaign_dir: Path | None) -> dict[str, Any]:
    entry = frozen.get("task", {}).get("entry", "")
    src = task_source(entry, campaign_dir)
    stack = run_start.get("stack") or {}
    return {
        "task_entry": entry,
        "task_source": str(src) if src else None,
        "task_code": git_revision(src),
        "cockpit_code": git_revision(Path(__file__).resolve().parent),
        "packages_at_run": frozen.get("stack", {}).get("packages", {}),
        "stack_at_run": {
            k: stack.get(k) for k in ("python", "torch", "build", "cuda", "driver", "gpus", "device") if k in stack
        },
        "packages_at_archive": runs.package_versions(),
        "python_at_archive": platform.python_version(),
    }


# --------------------------------------------------------------------------- gather


def default_out(rdir: Path) -> Path:
    rdir = Path(rdir)
    if rdir.parent.name != runs.RUNS_DIR:
        raise ArchiveError(f"{rdir} is not inside a campaign's runs/ folder: give --out DIR")
    return rdir.parent.parent / "report" / "archive" / rdir.name


def _variant_config(nb: nbm.Notebook | None, variant: str) -> dict[str, Any]:
    if nb is None:
        return {"note": "the campaign notebook was not found; run.toml holds the parameters the run used"}
    v = nb.variant(variant)
    c = nb.campaign
    cfg: dict[str, Any] = {
        "campaign": {
            "name": c.name,
            "question": c.question,
            "held_constant": c.held_constant,
            "quality_metric": c.quality_metric,
            "higher_is_better": c.higher_is_better,
        },
        "variant": {
            "id": v.id,
            "reference": v.reference,
            "differs": v.differs,
            "why": v.why,
            "kind": v.kind,
            "set": dict(v.set),
        },
        "task": {"entry": nb.task.entry, "extensions": list(nb.task.extensions)},
        "params": {k: val for k, val in nb.params(v.id).items() if val is not None},
        "stop": {k: val for k, val in nb.stop.__dict__.items() if val is not None},
        "validation": {k: val for k, val in nb.validation.__dict__.items() if val is not None},
    }
    if c.quality_target is not None:
        cfg["campaign"]["quality_target"] = c.quality_target
    return cfg


def _readme(meta: dict[str, Any], files: list[str]) -> str:
    entry = meta["entry"]
    return f"""# Archive of run {meta["run"]} (campaign {meta["campaign"]}, variant {meta["variant"]}, seed {meta["seed"]})

Written by `cockpit archive` on {meta["created"]}. Status of the run: {meta["status"]} ({meta["stop_reason"]}).

## What is here

- `model/model.pt`: the evaluation artifact, a state_dict of tensors (weights only, on the CPU);
  for a series run without an export, `model/checkpoint.pt` instead: its final checkpoint, with the
  state_dict under the key "model" (`state = torch.load(..., weights_only=True)["model"]`)
- `model/control.pt`: the outputs the model gave on its control inputs when it was exported
  (ids, loss, predictions); the inputs themselves are in `model/artifact_manifest.json` ("controls")
- `model/artifact_manifest.json`: the export's own manifest (task entry, parameters, step, seed)
- `config/run.toml`: the run's frozen configuration (parameters actually used, seed, stack, command line)
- `config/variant.toml`: the notebook's variant and campaign settings at archive time
- `revisions.json`: git commit of the task code and of Cockpit, package versions at run and archive time
- `metrics/`: the raw records (events.jsonl and any CSV / JSON-lines files, output.log)
- `manifest.json`: SHA-256 and size of every file above

## Check it

    cockpit archive --verify <this folder>

or, without Cockpit:

```python
import hashlib, json, pathlib
root = pathlib.Path(".")
manifest = json.loads((root / "manifest.json").read_text())
for name, info in manifest["files"].items():
    assert hashlib.sha256((root / name).read_bytes()).hexdigest() == info["sha256"], name
```

## Reload it (safe loading only)

```python
import tomllib, torch
from cockpit.pilot.task import load_task

params = tomllib.load(open("config/run.toml", "rb"))["params"]
state = torch.load("model/model.pt", map_location="cpu", weights_only=True)  # never weights_only=False
task = load_task("{entry}")  # the task code at the commit in revisions.json
model = task.build_model(params)
model.load_state_dict(state)
model.eval()
```

`weights_only=True` refuses any file that holds pickled objects other than tensors, numbers,
strings, lists and dicts: unpickling those could run arbitrary code. Check the hashes first.

Files: {len(files)} (listed with their hashes in manifest.json).
"""


def gather(rdir: Path | str, out: Path | str | None = None) -> Path:
    """Copy a run's artifact, configuration, revisions and raw metrics into ``out`` with a manifest."""
    rdir = Path(rdir).resolve()
    if not (rdir / runs.RUN_FILE).is_file():
        raise ArchiveError(f"{rdir}: no {runs.RUN_FILE}; give a run folder such as campaigns/demo/runs/r0003")
    adir = rdir / "artifact"
    exported = (adir / "model.pt").is_file()
    if not exported and not (rdir / "checkpoint.pt").is_file():
        raise ArchiveError(
            f"{rdir}: nothing to archive: no exported artifact ({adir / 'model.pt'}) and no checkpoint.pt. "
            f"Archive a pilot whose export gate passed, or a series run that saved its checkpoint."
        )
    src_manifest = adir / "manifest.json"
    if src_manifest.is_file():  # the export's own hashes: never archive an artifact already changed
        for name, info in json.loads(src_manifest.read_text("utf-8")).get("files", {}).items():
            if (adir / name).is_file() and sha256(adir / name) != info.get("sha256"):
                raise ArchiveError(
                    f"{adir / name}: its SHA-256 no longer matches the export's manifest; "
                    "it changed after the run exported it. Not archived."
                )
    target = Path(out) if out else default_out(rdir)
    if target.exists() and any(target.iterdir()):
        raise ArchiveError(
            f"{target}: already exists and is not empty; Cockpit never overwrites an archive. Give another --out."
        )
    frozen = runs.read_run_toml(rdir)
    evs = ev.read_events(rdir / ev.EVENTS_FILE)
    run_start = next(ev.iter_kind(evs, ev.RUN_START), {})
    st = runs.state(rdir)
    campaign_dir = rdir.parent.parent if rdir.parent.name == runs.RUNS_DIR else None
    try:
        nb = nbm.load(campaign_dir) if campaign_dir else None
    except nbm.NotebookError:
        nb = None
    meta = {
        "format": FORMAT,
        "run": frozen["run"]["id"],
        "campaign": frozen["run"].get("campaign", ""),
        "variant": frozen["run"].get("variant", ""),
        "seed": frozen["run"].get("seed", 0),
        "kind": frozen["run"].get("kind", "pilot"),
        "entry": frozen.get("task", {}).get("entry", ""),
        "status": st.status,
        "stop_reason": st.stop_reason,
        "created": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "source": str(rdir),
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.partial"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        (tmp / "model").mkdir(parents=True)
        (tmp / "config").mkdir()
        (tmp / "metrics").mkdir()
        if exported:
            shutil.copy2(adir / "model.pt", tmp / MODEL)
        else:  # a series run: its final checkpoint holds the weights under "model"
            shutil.copy2(rdir / "checkpoint.pt", tmp / CHECKPOINT)
        if (adir / "control.pt").is_file():
            shutil.copy2(adir / "control.pt", tmp / CONTROL)
        if src_manifest.is_file():
            shutil.copy2(src_manifest, tmp / "model" / "artifact_manifest.json")
        shutil.copy2(rdir / runs.RUN_FILE, tmp / "config" / "run.toml")
        variant_cfg = _variant_config(nb, meta["variant"]) if nb else _variant_config(None, "")
        (tmp / "config" / "variant.toml").write_text(tomli_w.dumps(variant_cfg, multiline_strings=True), "utf-8")
        (tmp / "revisions.json").write_text(
            json.dumps(revisions(frozen, run_start, campaign_dir), indent=2, default=str), "utf-8"
        )
        for p in sorted(rdir.iterdir()):
            if p.is_file() and (p.suffix in METRIC_SUFFIXES or p.name in METRIC_JSON or p.name == runs.LOG_FILE):
                shutil.copy2(p, tmp / "metrics" / p.name)
        files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
        (tmp / "README.md").write_text(_readme(meta, files), "utf-8")
        listing = {}
        for p in sorted(tmp.rglob("*")):
            if p.is_file():
                listing[str(p.relative_to(tmp))] = {"sha256": sha256(p), "bytes": p.stat().st_size}
        manifest = {**meta, "files": listing}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True), "utf-8")
        if target.exists():
            target.rmdir()  # empty, checked above
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


# --------------------------------------------------------------------------- verify and load


@dataclass
class Verified:
    folder: Path
    manifest: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    state: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def check_hashes(folder: Path) -> tuple[dict[str, Any], list[str]]:
    """Every file listed with the right hash, none missing, none added. No unpickling here."""
    folder = Path(folder)
    mp = folder / MANIFEST
    if not mp.is_file():
        return {}, [f"{mp}: no manifest; this is not a Cockpit archive (or its manifest was removed)"]
    try:
        manifest = json.loads(mp.read_text("utf-8"))
    except ValueError as exc:
        return {}, [f"{mp}: not valid JSON ({exc})"]
    problems = []
    listed = manifest.get("files") or {}
    for name, info in sorted(listed.items()):
        p = folder / name
        if not p.is_file():
            problems.append(f"{name}: missing")
        elif sha256(p) != info.get("sha256"):
            problems.append(
                f"{name}: SHA-256 {sha256(p)[:12]}… does not match the manifest's "
                f"{str(info.get('sha256'))[:12]}…: the file changed after archiving"
            )
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_file() and rel != MANIFEST and rel not in listed:
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
    v.lines.append(f"{len(manifest['files'])} files match their SHA-256 in {MANIFEST}")
    from .pilot.checkpoint import UnsafeArtifact, safe_load  # torch, only now

    for name in (MODEL, CHECKPOINT, CONTROL):
        if name not in manifest["files"]:
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


def verify(folder: Path | str) -> Verified:
    return load(folder)
