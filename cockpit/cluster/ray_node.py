"""A series' run as a Ray task on the node Ray picks (:func:`run_on_node`), and what the head asks nodes.

**On the node** (:func:`run_on_node`, a streaming generator task), the run goes
on in a node-local copy of the campaign under the node's Ray session folder
(``<temp-dir>/session_*/cockpit/``), never a path of the head's: the files the
head sent (the run's records; for a resume, its newest checkpoint too, never
the older ones nor the export, or, with a ``[cluster] storage``, copied from
there) and the shipped task files. Cockpit's own run
process (``python -m cockpit.pilot RUN_DIR``) is started there by
:func:`cockpit.launch.start`, as on one box, and every change of its folder is
yielded back, a heartbeat every couple of seconds in between. When the run has
ended, the task sends the digest of every file it holds; once the keeper has
found the head's copy identical, the node-local copy is removed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import ray

from .. import fsutil, launch, runs
from ..runs import stored
from .mirror import Chunk, Mirror

BEAT_S = 2.0  # the node says it is there this often (the keeper refreshes each held run's heartbeat as often)
SCAN_S = 0.5  # the node looks at its run folder this often, the keeper at what came back
PROBE = ".cockpit-probe-"  # + the series' token: the file the head writes into the storage for each node to read
CONFIRM_S = 120.0  # how long a node waits for the keeper to confirm the head's copy before keeping its own


@dataclass(frozen=True)
class NodeSpec:
    """What the head sends with a run's task: the run's files, the notebook as it is, how to start it."""

    rid: str
    campaign: str  # the campaign folder's name (the node-local copy is named after it)
    notebook: bytes
    files: dict[str, bytes]
    nproc: int = 1
    env: dict[str, str] = field(default_factory=dict)
    resume: bool = False
    storage: str = ""  # the run's folder in [cluster] storage: its checkpoints go there, not to the head ("": none)
    fetch: dict[str, str] = field(default_factory=dict)  # a resume's checkpoint in the storage: path in run -> there


@dataclass(frozen=True)
class Placed:
    """The task started on a node: where, and the run folder it uses there."""

    task_id: str
    node_id: str
    hostname: str
    node_ip: str
    node_dir: str
    pid: int


@dataclass(frozen=True)
class Beat:
    """The task is still there (nothing new in the run folder since the last chunk)."""


@dataclass(frozen=True)
class Ended:
    """The run's process ended on the node (its events say how); every file has been sent: their digests."""

    files: dict[str, str] = field(default_factory=dict)  # relative path -> sha256 of the node's copy
    store_error: str = ""  # a checkpoint the node could not copy into the storage (it came to the head instead)


@dataclass(frozen=True)
class Cleaned:
    """What became of the node-local copy once the run ended: removed, or kept and why."""

    removed: bool
    why: str = ""


def node_root() -> Path:
    """Where runs live on this node: its Ray session folder (the task's working_dir is under it), else /tmp."""
    here = Path.cwd()
    for p in (here, *here.parents):
        if p.name.startswith("session_") and (p / "runtime_resources").is_dir():
            return p / "cockpit"
    return Path(tempfile.gettempdir()) / "cockpit-ray"


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)  # the shipped files sit on the same disk: a hard link costs nothing
    except OSError:
        shutil.copy2(src, dst)


def _prepare(spec: NodeSpec) -> Path:
    """The node-local campaign copy for one run; returns its run folder."""
    base = node_root() / f"{spec.campaign}-{spec.rid}-{secrets.token_hex(4)}"
    base.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(
        Path.cwd(),
        base,
        symlinks=True,
        ignore=shutil.ignore_patterns("runs", "campaign.toml"),
        copy_function=_link_or_copy,
    )
    fsutil.write_bytes(base / "campaign.toml", spec.notebook)
    rdir = runs.run_dir(base, spec.rid)
    for rel, data in spec.files.items():
        path = rdir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        fsutil.write_bytes(path, data)
    for rel, there in spec.fetch.items():  # the checkpoint a resume starts from, in the storage
        path = rdir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with fsutil.open_regular(there) as fh, fsutil.atomic_writer(path) as out:
            shutil.copyfileobj(fh, out, 1 << 20)
    return rdir


digest = stored.file_digest


def _ask(keeper: object, method: str, rid: str) -> object:
    """A keeper's answer about this run, or None (also when the keeper cannot be asked right now)."""
    try:
        return ray.get(getattr(cast(Any, keeper), method).remote(rid), timeout=10)
    except ray.exceptions.RayError:
        return None


class Question:
    """One question to the keeper, asked without waiting: a task blocked in ``ray.get`` lends its CPUs to other
    tasks for as long as it waits (Ray's rule), so a run that waited on the keeper every couple of seconds let a
    second run start beside it on a node of one CPU (the bench measured 12 runs of a 1-CPU node overlapping).
    The answer is taken once ``ray.wait`` finds it ready, never waited for."""

    def __init__(self, keeper: object, method: str, rid: str) -> None:
        self.keeper, self.method, self.rid = keeper, method, rid
        self.ref: Any = None
        self.asked_t = 0.0

    def answer(self, every_s: float) -> object:
        """The keeper's answer when one has come since the last call (None otherwise); asks again every_s."""
        if self.ref is not None:
            try:
                ready, _ = ray.wait([self.ref], timeout=0, fetch_local=True)
                if not ready:
                    if time.monotonic() - self.asked_t < 30.0:
                        return None
                    self.ref = None  # no answer in 30 s: the keeper busy or gone; ask again
                    return None
                ref, self.ref = self.ref, None
                return ray.get(ref, timeout=0)
            except ray.exceptions.RayError:
                self.ref = None
                return None
        if time.monotonic() - self.asked_t >= every_s:
            self.asked_t = time.monotonic()
            try:
                self.ref = getattr(cast(Any, self.keeper), self.method).remote(self.rid)
            except ray.exceptions.RayError:
                self.ref = None
        return None


@ray.remote(num_returns="streaming", max_retries=0)
def run_on_node(spec: NodeSpec, keeper: object = None) -> Iterator[Placed | Chunk | Beat | Ended | Cleaned]:
    """A series' run on this node: Cockpit's run process in a node-local folder, its files streamed to the head.

    A stop the head asks (through its ``keeper``) stops exactly this run's process, as ``launch.stop`` does on one
    box; the task then goes on to send the run's end and its last files, like any run that ended. Once the keeper
    has found the head's copy identical to the digests sent with the end, the node-local copy is removed."""
    rdir = _prepare(spec)
    mirror = Mirror(rdir, Path(spec.storage) if spec.storage else None)
    mirror.prime()
    ctx = ray.get_runtime_context()
    env = dict(spec.env)
    pid = launch.start(rdir, nproc=spec.nproc, env=env, resume=spec.resume)
    yield Placed(
        ctx.get_task_id() or "", ctx.get_node_id(), socket.gethostname(), ray.util.get_node_ip_address(), str(rdir), pid
    )
    last = time.monotonic()
    stopping = False
    question = Question(keeper, "grace", spec.rid) if keeper is not None else None
    try:
        while runs.is_alive(rdir):
            if question is not None and not stopping:
                grace = question.answer(BEAT_S)
                if isinstance(grace, (int, float)):
                    stopping = True
                    launch.stop(rdir, grace_s=float(grace))  # blocks until it ended (or was killed after the grace)
                    continue
            sent = False
            for chunk in mirror.scan():
                sent = True
                yield chunk
            if sent:
                last = time.monotonic()
            elif time.monotonic() - last >= BEAT_S:
                last = time.monotonic()
                yield Beat()
            time.sleep(SCAN_S)
    except (KeyboardInterrupt, SystemExit):  # the head cancelled the task: stop exactly this run's process
        launch.stop(rdir)
        raise
    launch.reap()
    yield from mirror.scan()
    yield Ended({rel: digest(rdir / rel) for rel in mirror.seen}, mirror.store_error)
    yield _clean(rdir, spec.rid, keeper)


def _clean(rdir: Path, rid: str, keeper: object) -> Cleaned:
    """Remove the node-local copy once the keeper says the head holds the same files (else keep it, said why)."""
    if keeper is None:
        return Cleaned(False, "no keeper to confirm the head's copy")
    deadline = time.monotonic() + CONFIRM_S
    while time.monotonic() < deadline:
        said = _ask(keeper, "mirrored", rid)
        if said is True:
            base = rdir.parents[1]  # the node-local campaign copy: <root>/<campaign>-<rid>-<token>/runs/<rid>
            if base.parent != node_root():
                return Cleaned(False, f"{base} is not under {node_root()}")
            shutil.rmtree(base, ignore_errors=True)
            return Cleaned(not base.exists(), "" if not base.exists() else f"{base} could not be removed")
        if isinstance(said, str):
            return Cleaned(False, said)
        time.sleep(SCAN_S)
    return Cleaned(False, f"the keeper did not confirm the head's copy within {CONFIRM_S:g} s")


def checkpoints(rdir: Path) -> list[tuple[int, Path]]:
    """(update, path) of a run folder's periodic checkpoints, oldest first (the names the run gives them)."""
    d = rdir / runs.CHECKPOINTS_DIR
    if not d.is_dir():
        return []
    out = []
    for p in d.glob("update-*.pt"):
        step = p.name[len("update-") : -len(".pt")]
        if step.isdigit() and p.is_file() and not p.is_symlink():
            out.append((int(step), p))
    return sorted(out)


@ray.remote(num_cpus=0, max_retries=0)
def node_versions() -> dict[str, str]:
    """What must be the head's on a node: read there, from its installed metadata."""
    from .nodes import versions_here

    return versions_here()


@ray.remote(num_cpus=0, max_retries=0)
def node_disk() -> int:
    """The free bytes where this node keeps its runs' copies (its Ray session folder)."""
    root = node_root()
    probe = next((p for p in (root, *root.parents) if p.exists()), Path("/"))
    return int(shutil.disk_usage(probe).free)


@ray.remote(num_cpus=0, max_retries=0)
def node_storage(path: str, token: str) -> str:
    """Whether the notebook's storage is the head's folder on this node: "" when the probe file the head wrote
    there reads back with the head's token and the node can write beside it, else why not."""
    probe = Path(path) / f"{PROBE}{token[:16]}"
    try:
        seen = fsutil.read_regular(probe, 4096).decode(errors="replace")
    except OSError as exc:
        return f"{probe} cannot be read there: {exc.strerror or exc}"
    if seen != token:
        return f"{probe} there is not the one the head wrote: another folder of the same name"
    mine = Path(path) / f".cockpit-node-{secrets.token_hex(4)}"
    try:
        fsutil.write_text(mine, token)
        mine.unlink()
    except OSError as exc:
        return f"{path} is not writable there: {exc.strerror or exc}"
    return ""
