"""Write a run's archive: the files someone needs to trust and reuse the run without the campaign folder.

Only the run's own regular files are copied: a symbolic link in the run
folder is never followed (a linked artifact refuses the archive, a linked
metrics file is left out and named in the manifest), an artifact whose
SHA-256 no longer matches the export's manifest is refused, and the archive is
written into a temporary folder renamed at the end, so a half-written archive
never looks complete. The revisions (git commits, task code hash, package
versions, data revision) are recorded beside it. Torch only in
``_model_from_checkpoint``, lazily.
"""

from __future__ import annotations

import datetime as _dt
import importlib.machinery
import importlib.util
import json
import os
import platform
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import tomli_w

from .. import events as ev
from .. import fsutil, runs
from .. import notebook as nbm
from ..contract import Params
from ..fsutil import sha256
from ..gitinfo import FileRevision
from ..gitinfo import file_revision as git_revision
from ..schema import JSON, JSONObject
from .layout import CONTROL, FORMAT, MANIFEST, METRIC_JSON, METRIC_SUFFIXES, MODEL, ArchiveError

if TYPE_CHECKING:  # typing.NotRequired is Python 3.11; annotations here are never evaluated
    from typing import NotRequired

# --------------------------------------------------------------------------- revisions


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


class Revisions(TypedDict):
    """``revisions.json``: what code, data and packages made the archived run."""

    task_entry: str
    task_source: str | None
    task_code: FileRevision | str
    task_code_sha256: object  # as run.toml froze it
    data_revision: object  # the export's (or the pilot's) data revision, or why there is none
    cockpit_code: FileRevision | str
    packages_at_run: object
    stack_at_run: dict[str, object]
    packages_at_archive: dict[str, str]
    python_at_archive: str


class _MetaRequired(TypedDict):
    format: str  # layout.FORMAT
    run: str
    campaign: str
    variant: str
    seed: int
    kind: str
    entry: str
    status: str
    stop_reason: str
    created: str
    source: str


class ArchiveMeta(_MetaRequired, total=False):
    """The run's identity in the archive's manifest (and README)."""

    weights: str  # what model/model.pt holds, in words
    base: object  # an adapter's base model, by identity
    weights_from: str


def revisions(
    frozen: runs.RunToml,
    run_start: ev.Event,
    campaign_dir: Path | None,
    data_revision: object = None,
) -> Revisions:
    entry = frozen.get("task", {}).get("entry", "")
    src = task_source(entry, campaign_dir)
    stack = run_start.get("stack") or {}
    return {
        "task_entry": entry,
        "task_source": str(src) if src else None,
        "task_code": git_revision(src),
        "task_code_sha256": (frozen.get("revisions") or {}).get("task_code"),
        "data_revision": data_revision or "not recorded (the run exported no data revision)",
        "cockpit_code": git_revision(Path(__file__).resolve().parent.parent),  # the cockpit package
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
    report = rdir.parent.parent / "report"
    for folder in (report, report / "archive"):
        if folder.is_symlink():
            raise ArchiveError(
                f"{folder}: a symbolic link; Cockpit never writes through a link out of the campaign folder. "
                "Replace it by a folder, or give --out DIR."
            )
    return report / "archive" / rdir.name


def _plain_name(name: object) -> bool:
    """A file name inside one folder: no separator, not '.' or '..'."""
    return isinstance(name, str) and bool(name) and "/" not in name and "\\" not in name and name not in (".", "..")


def _copy(src: Path, dst: Path) -> None:
    """Copy a regular file of the run; a link or anything but a regular file is refused (never followed)."""
    with fsutil.open_regular(src) as fin, open(dst, "xb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
    shutil.copystat(src, dst, follow_symlinks=False)


class CampaignConfig(TypedDict):
    """variant.toml's ``[campaign]``: the question the archived run answers to."""

    name: str
    question: str
    held_constant: str
    quality_metric: str
    higher_is_better: bool
    quality_target: NotRequired[float]


class VariantTable(TypedDict):
    id: str
    reference: bool
    differs: str
    why: str
    kind: str
    set: dict[str, object]


class TaskConfig(TypedDict):
    entry: str
    extensions: list[str]


class VariantConfig(TypedDict, total=False):
    """An archive's variant file (``variant.toml`` in its ``config`` folder): the variant as the notebook states it
    at archiving (``note`` alone when the notebook was not found)."""

    note: str
    campaign: CampaignConfig
    variant: VariantTable
    task: TaskConfig
    params: Params  # the flat settings the task's functions receive
    stop: dict[str, object]
    validation: dict[str, object]


def _variant_config(nb: nbm.Notebook | None, variant: str) -> VariantConfig:
    if nb is None:
        return {"note": "the campaign notebook was not found; run.toml holds the parameters the run used"}
    v = nb.variant(variant)
    c = nb.campaign
    campaign: CampaignConfig = {
        "name": c.name,
        "question": c.question,
        "held_constant": c.held_constant,
        "quality_metric": c.quality_metric,
        "higher_is_better": c.higher_is_better,
    }
    cfg: VariantConfig = {
        "campaign": campaign,
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
        campaign["quality_target"] = c.quality_target
    return cfg


def _readme(meta: ArchiveMeta, files: list[str]) -> str:
    entry = meta["entry"]
    return f"""# Archive of run {meta["run"]} (campaign {meta["campaign"]}, variant {meta["variant"]}, seed {meta["seed"]})

Written by `cockpit archive` on {meta["created"]}. Status of the run: {meta["status"]} ({meta["stop_reason"]}).

## What is here

- `model/model.pt`: the evaluation artifact, a state_dict of tensors (weights only, on the CPU, never
  the optimizer state). {meta["weights"]}
- `model/control.pt`: the outputs the model gave on its control inputs when it was exported
  (ids, loss, predictions, generated text); the inputs are in `model/artifact_manifest.json` ("controls")
  or, when they hold tensors, in control.pt ("inputs")
- `model/artifact_manifest.json`: the export's own manifest (task entry, parameters, step, seed, data
  revision, task code hash, and for an adapter the base's identity)
- `config/run.toml`: the run's frozen configuration (parameters actually used, seed, stack, command line)
- `config/variant.toml`: the notebook's variant and campaign settings at archive time
- `revisions.json`: git commit and SHA-256 of the task code, git commit of Cockpit, package versions at
  run and archive time, the data revision (a SHA-256 over every example's id and content)
- `metrics/`: the raw records (events.jsonl and any CSV / JSON-lines files, output.log)
- `manifest.json`: SHA-256 and size of every file above

## Check it

    cockpit archive --verify <this folder>

checks every hash, loads the weights safely, then rebuilds the model with the task's code (found
where the run found it) and replays the control inputs against `model/control.pt`.

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
model.load_state_dict(state)  # an adapter: strict=False, over the base manifest.json's "base" names
model.eval()
```

`weights_only=True` refuses any file that holds pickled objects other than tensors, numbers,
strings, lists and dicts: unpickling those could run arbitrary code. Check the hashes first.

Files: {len(files)} (listed with their hashes in manifest.json).
"""


def gather(rdir: Path | str, out: Path | str | None = None) -> Path:
    """Copy a run's artifact, configuration, revisions and raw metrics into ``out`` with a manifest.

    Only the run's own regular files are copied: a symbolic link in the run
    folder (or the run folder itself being one) is never followed; a linked
    artifact refuses the archive, a linked metrics file is left out and listed
    in the manifest under ``links``.
    """
    given = Path(rdir)
    if given.is_symlink():
        raise ArchiveError(
            f"{given}: a symbolic link; give the run folder itself (Cockpit never follows a link out of a campaign)."
        )
    rdir = given.resolve()
    if not fsutil.is_regular(rdir / runs.RUN_FILE):
        raise ArchiveError(f"{rdir}: no {runs.RUN_FILE}; give a run folder such as campaigns/demo/runs/r0003")
    adir = rdir / "artifact"
    if adir.is_symlink():
        raise ArchiveError(f"{adir}: a symbolic link, not the run's own artifact folder; nothing archived.")
    links: dict[str, str] = {}
    for f in (adir / "model.pt", adir / "control.pt", adir / "manifest.json", rdir / "checkpoint.pt"):
        if f.is_symlink():
            raise ArchiveError(
                f"{f}: a symbolic link (to {os.readlink(f)}), not a file the run wrote; the archive would "
                "hold someone else's file under the run's name. Nothing archived."
            )
    exported = fsutil.is_regular(adir / "model.pt")
    if not exported and not fsutil.is_regular(rdir / "checkpoint.pt"):
        raise ArchiveError(
            f"{rdir}: nothing to archive: no exported artifact ({adir / 'model.pt'}) and no checkpoint.pt. "
            f"Archive a pilot whose export gate passed, or a series run that saved its checkpoint."
        )
    src_manifest = adir / "manifest.json"
    if fsutil.is_regular(src_manifest):  # the export's own hashes: never archive an artifact already changed
        try:
            listed = json.loads(fsutil.read_regular(src_manifest, 64 << 20)).get("files", {})
        except (OSError, ValueError, AttributeError, RecursionError) as exc:
            raise ArchiveError(f"{src_manifest}: not the export's manifest ({exc}); nothing archived.") from None
        for name, info in listed.items() if isinstance(listed, dict) else []:
            if not _plain_name(name):
                raise ArchiveError(f"{src_manifest}: lists {name!r}, which is not a file of the artifact folder.")
            if fsutil.is_regular(adir / name) and sha256(adir / name, follow=False) != (info or {}).get("sha256"):
                raise ArchiveError(
                    f"{adir / name}: its SHA-256 no longer matches the export's manifest; "
                    "it changed after the run exported it. Not archived."
                )
    target = Path(out) if out else default_out(rdir)
    if target.is_symlink():
        raise ArchiveError(f"{target}: a symbolic link; give a new folder with --out.")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ArchiveError(
            f"{target}: already exists and is not empty; Cockpit never overwrites an archive. Give another --out."
        )
    frozen = runs.read_run_toml(rdir)
    brief = runs.summary(rdir)
    none: ev.Event = {}  # a run whose process never started
    run_start = next(ev.iter_kind(brief.events, ev.RUN_START), none)
    st = runs.state(rdir)
    campaign_dir = rdir.parent.parent if rdir.parent.name == runs.RUNS_DIR else None
    try:
        nb = nbm.load(campaign_dir) if campaign_dir else None
    except nbm.NotebookError:
        nb = None
    meta: ArchiveMeta = {
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
    export_manifest = _export_manifest(src_manifest)
    meta["weights"] = _weights_said(exported, export_manifest)
    if export_manifest.get("base"):
        meta["base"] = export_manifest["base"]
    data_rev = (
        export_manifest.get("data_revision") or runs.read_metrics(rdir).get("data_revision") or _pilot_data(brief)
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
    try:
        (tmp / "model").mkdir()
        (tmp / "config").mkdir()
        (tmp / "metrics").mkdir()
        if exported:
            _copy(adir / "model.pt", tmp / MODEL)
        else:  # a run without an export: the model state of its final checkpoint, the optimizer state left out
            meta["weights_from"] = _model_from_checkpoint(rdir / runs.CHECKPOINT, tmp / MODEL)
        if fsutil.is_regular(adir / "control.pt"):
            _copy(adir / "control.pt", tmp / CONTROL)
        if fsutil.is_regular(src_manifest):
            _copy(src_manifest, tmp / "model" / "artifact_manifest.json")
        _copy(rdir / runs.RUN_FILE, tmp / "config" / "run.toml")
        variant_cfg = _variant_config(nb, meta["variant"]) if nb else _variant_config(None, "")
        (tmp / "config" / "variant.toml").write_text(tomli_w.dumps(variant_cfg, multiline_strings=True), "utf-8")
        (tmp / "revisions.json").write_text(
            json.dumps(revisions(frozen, run_start, campaign_dir, data_rev), indent=2, default=str), "utf-8"
        )
        for p in sorted(rdir.iterdir()):
            if not (p.suffix in METRIC_SUFFIXES or p.name in METRIC_JSON or p.name == runs.LOG_FILE):
                continue
            if p.is_symlink():
                links[f"metrics/{p.name}"] = f"a symbolic link to {os.readlink(p)}: not archived (never followed)"
            elif fsutil.is_regular(p):
                _copy(p, tmp / "metrics" / p.name)
        files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
        (tmp / "README.md").write_text(_readme(meta, files), "utf-8")
        listing = {}
        for p in sorted(tmp.rglob("*")):
            if p.is_file():
                listing[str(p.relative_to(tmp))] = {"sha256": sha256(p, follow=False), "bytes": p.stat().st_size}
        manifest = {**meta, "files": listing, **({"links": links} if links else {})}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True), "utf-8")
        if target.exists():
            target.rmdir()  # empty, checked above
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _export_manifest(path: Path) -> JSONObject:
    """The export's manifest.json as written (any JSON object; each reader checks its fields), or {}."""
    if not fsutil.is_regular(path):
        return {}
    try:
        doc = json.loads(fsutil.read_regular(path, 64 << 20))
    except (OSError, ValueError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _object(x: JSON) -> JSONObject:
    return x if isinstance(x, Mapping) else {}


def _weights_said(exported: bool, manifest: JSONObject) -> str:
    if not exported:
        return (
            "The run exported no artifact (it did not complete): this is the model state of its final checkpoint, "
            "the optimizer state left out."
        )
    if manifest.get("weights") == "adapter":
        base = _object(manifest.get("base"))
        return (
            f"The adapter's tensors only ({_object(manifest.get('adapter')).get('describe', 'an adapter')}); the base "
            f'model is recorded by its identity in manifest.json ("base": SHA-256 {str(base.get("sha256"))[:12]}… '
            f"over its {base.get('tensors')} frozen tensors, {base.get('name_or_path') or base.get('class')}), "
            "rebuilt by the task's build_model and checked against it before the adapter is loaded."
        )
    return "The whole model's state_dict."


def _pilot_data(brief: runs.Summary) -> dict[str, JSON] | None:
    """The data revision a pilot's data gate recorded (pilots before exports carried it)."""
    for e in ev.iter_kind(brief.events, ev.GATE):
        if e.get("phase") == "data" and isinstance(rev := e.get("data_revision"), dict):
            return dict(rev)
    return None


def _model_from_checkpoint(src: Path, dst: Path) -> str:
    """Write the model state of a training checkpoint (safe loading) as a state_dict; say what it holds."""
    from ..pilot.checkpoint import UnsafeArtifact, atomic_save, safe_load  # torch, only here

    try:
        with fsutil.open_regular(src) as fh:
            state = safe_load(fh)
    except UnsafeArtifact as exc:
        raise ArchiveError(f"{src}: {exc}; nothing archived.") from None
    except Exception as exc:  # noqa: BLE001 - a torn or foreign file: said plainly
        raise ArchiveError(
            f"{src}: cannot be read as a checkpoint ({type(exc).__name__}: {exc}); nothing archived."
        ) from None
    model = state.get("model") if isinstance(state, dict) else None
    if not isinstance(model, dict) or not model:
        raise ArchiveError(f"{src}: holds no model state (no 'model' state_dict); nothing archived.")
    atomic_save(model, dst)
    step = state.get("step")
    part = "trainable parameters only" if state.get("model_trainable_only") else "the whole model"
    return f"final checkpoint at update {step}: {part}; optimizer, scheduler and RNG state left out"
