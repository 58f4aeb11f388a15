"""Everything that imports ray: a series' run as a Ray task on the node Ray picks, mirrored back to the head.

The only module that imports ray (``pip install 'cockpit[ray]'``); the series
command imports it only for ``--ray``. No torch on the head's side.

**On the head** (:class:`Cluster`), the series creates each run as always (its
id, run.toml and notebook row: :func:`cockpit.launch.new_run`), then
:meth:`Cluster.start` submits the run's task, asking for the resources its
pilot measured (:func:`cockpit.cluster.demand`). The campaign's files (task
code, data; never ``runs/`` or the notebook) reach the node through Ray's
runtime environment (``working_dir``). :meth:`Cluster.pump`, called on every
poll of the series, writes what the task streams back into the head's run
folder (:mod:`.mirror`) and keeps ``remote.json`` current: the task, its node,
a heartbeat. A run's liveness on the head is that record's, never a local pid
(:func:`cockpit.runs.remote_alive`): alive while the series holds its task (a
heartbeat younger than :data:`cockpit.runs.REMOTE_STALE_S`) and the task has
not ended. When it ends the head's row is settled from the head's folder; when
its node is lost the record says so, and the run is ``crashed`` with that reason.

**On the node** (:func:`run_on_node`, a streaming generator task), the run goes
on in a node-local copy of the campaign under the node's Ray session folder
(``<temp-dir>/session_*/cockpit/``), never a path of the head's: the files the
head sent (run.toml; for a resume, the whole run folder with its checkpoints)
and the shipped task files. Cockpit's own run process
(``python -m cockpit.pilot RUN_DIR``) is started there by
:func:`cockpit.launch.start`, as on one box, and every change of its folder is
yielded back, a heartbeat every couple of seconds in between.
"""

from __future__ import annotations

import contextlib
import os
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
from .mirror import NODE_ONLY, BadChunk, Chunk, Mirror, Receiver
from .nodes import NodeFacts

BEAT_S = 2.0  # the head refreshes each held run's heartbeat this often; the node says it is there as often
SCAN_S = 0.5  # the node looks at its run folder this often
FORCE_AFTER_S = 45.0  # beyond a stop's grace: the run did not end on its node, its task is cancelled by force
EXCLUDES = ["/runs/", "/campaign.toml", "/.campaign*"]  # the notebook and the runs stay on the head


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
    """The run's process ended on the node (its events say how); every file has been sent."""


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
    import secrets

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
    return rdir


@ray.remote(num_cpus=0)
class Stops:
    """The stops the head's series asks of its runs (an actor on the head): each run's task asks it as it goes."""

    def __init__(self) -> None:
        self.asked: dict[str, float] = {}

    def ask(self, rid: str, grace_s: float) -> None:
        self.asked[rid] = grace_s

    def grace(self, rid: str) -> float | None:
        return self.asked.get(rid)


def _asked(stops: object, rid: str) -> float | None:
    """The grace of a stop the head asked of this run, or None (also when the head cannot be asked right now)."""
    try:
        got = ray.get(cast(Any, stops).grace.remote(rid), timeout=10)
    except ray.exceptions.RayError:
        return None
    return float(got) if isinstance(got, (int, float)) else None


@ray.remote(num_returns="streaming", max_retries=0)
def run_on_node(spec: NodeSpec, stops: object = None) -> Iterator[Placed | Chunk | Beat | Ended]:
    """A series' run on this node: Cockpit's run process in a node-local folder, its files streamed to the head.

    A stop the head asks (``stops``) stops exactly this run's process, as ``launch.stop`` does on one box; the
    task then goes on to send the run's end and its last files, like any run that ended."""
    rdir = _prepare(spec)
    mirror = Mirror(rdir)
    mirror.prime()
    ctx = ray.get_runtime_context()
    env = dict(spec.env)
    pid = launch.start(rdir, nproc=spec.nproc, env=env, resume=spec.resume)
    yield Placed(
        ctx.get_task_id() or "", ctx.get_node_id(), socket.gethostname(), ray.util.get_node_ip_address(), str(rdir), pid
    )
    last = time.monotonic()
    stopping = False
    try:
        while runs.is_alive(rdir):
            grace = _asked(stops, spec.rid) if stops is not None and not stopping else None
            if grace is not None:
                stopping = True
                launch.stop(rdir, grace_s=grace)  # blocks until it ended (or was killed after the grace)
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
    yield Ended()


# --------------------------------------------------------------------------- the head's side


@dataclass
class Held:
    """A run whose task the head holds: its stream and its record."""

    rdir: Path
    gen: ray.ObjectRefGenerator
    info: runs.RemoteInfo
    beat_t: float = 0.0
    receiver: Receiver | None = None
    stop_t: float | None = None  # when the stop was passed to its task
    stop_grace: float = 0.0


class Cluster:
    """The series' side of Ray on the head: submit runs, bring their files back, keep their records."""

    def __init__(self, campaign: Path, address: str, demands: dict[str, object] | None = None) -> None:
        from . import Demand

        self.campaign = Path(campaign)  # campaign.toml
        self.address = address
        self.demands: dict[str, Demand] = {k: v for k, v in (demands or {}).items() if isinstance(v, Demand)}
        self.held: dict[Path, Held] = {}
        connect(address, self.campaign.parent)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = ray.get_runtime_context().get_node_id()  # the node this series joined through: the head
        self.stops: Any = (
            cast(Any, Stops).options(scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote()
        )
        from .nodes import judge, versions_here

        found = survey()
        verdict = judge(found, self.demands, versions_here())  # raises when a variant fits on no usable node
        self.notes = verdict.notes
        self.usable = verdict.usable
        self.strategy: object = "DEFAULT"
        if len(verdict.usable) < len(found):  # only these nodes: the others were refused by name
            from ray.util.scheduling_strategies import In, NodeLabelSchedulingStrategy

            self.strategy = NodeLabelSchedulingStrategy(
                hard={"ray.io/node-id": In(*(n.node_id for n in verdict.usable))}
            )

    def new_run(self, campaign: Path | str, variant: str | None, seed: int, **kw: Any) -> tuple[str, Path]:
        """A series' run created on the head as always (id, run.toml, row), then submitted to the cluster."""
        extra = {**(kw.pop("extra", None) or {}), "cluster": {"ray": self.address}}
        return launch.new_run(campaign, variant, seed, starter=self.start, extra=extra, **kw)

    def resume_run(self, campaign: Path | str, rid: str, env: dict[str, str] | None = None) -> Path:
        """A stopped or crashed run resumed as itself, on whichever node Ray picks, from its last checkpoint."""
        return launch.resume_run(campaign, rid, env=env, starter=self.start)

    def start(
        self, rdir: Path, nproc: int = 1, env: dict[str, str] | None = None, resume: bool = False, **_: object
    ) -> int:
        """Submit the run's task (a series' ``starter``); returns 0: the run has no local process."""
        from . import Demand

        rdir = Path(rdir).resolve()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(rdir / runs.STOP_FILE)  # a stop asked of an earlier process of the run (a resume) is done
        variant = str(runs.run_meta(rdir).get("variant", ""))
        d = self.demands.get(variant, Demand())
        # Ray sets each task's OMP_NUM_THREADS from the CPUs it was given; the head's own share means nothing there.
        node_env = {k: v for k, v in (env or {}).items() if k not in ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")}
        spec = NodeSpec(
            rid=rdir.name,
            campaign=self.campaign.parent.name,
            notebook=fsutil.read_regular(self.campaign, 1 << 28),
            files=_folder(rdir),
            nproc=nproc,
            env=node_env,
            resume=resume,
        )
        gen = (
            cast(Any, run_on_node)
            .options(
                num_cpus=d.num_cpus,
                num_gpus=d.num_gpus,
                resources=dict(d.resources) or None,
                scheduling_strategy=self.strategy,
                name=f"cockpit:{self.campaign.parent.name}:{rdir.name}",
            )
            .remote(spec, self.stops)
        )
        info: runs.RemoteInfo = {"address": self.address, "submitted": runs.now(), "beat": time.time(), "ended": False}
        runs.write_remote(rdir, info)
        self.held[rdir] = Held(rdir, gen, info, time.monotonic(), Receiver(rdir))
        return 0

    def pump(self) -> None:
        """Write what every held run streamed back, end the ones that ended, refresh the others' heartbeat."""
        for rdir, h in list(self.held.items()):
            self._stop_if_asked(h)
            self._drain(h)
            if rdir in self.held and time.monotonic() - h.beat_t >= BEAT_S:
                h.beat_t = time.monotonic()
                h.info["beat"] = time.time()
                runs.write_remote(rdir, h.info)

    def _stop_if_asked(self, h: Held) -> None:
        """Pass a ``cockpit stop`` to exactly that run's task; cancel the task by force if its run outlives the grace."""
        if h.stop_t is None:
            grace = runs.stop_requested(h.rdir)
            if grace is not None:
                h.stop_t, h.stop_grace = time.monotonic(), grace
                self.stops.ask.remote(h.rdir.name, grace)
        elif time.monotonic() - h.stop_t > h.stop_grace + FORCE_AFTER_S:
            ray.cancel(h.gen, force=True)
            h.stop_t = float("inf")  # once

    def _drain(self, h: Held, most: int = 1000) -> None:
        for _ in range(most):
            if h.gen.is_finished():  # every item taken and the task returned
                self._end(h, "")
                return
            if not h.gen.next_ready():
                return
            try:
                item = ray.get(next(h.gen))
            except StopIteration:
                self._end(h, "")
                return
            except ray.exceptions.RayError as exc:
                self._end(h, lost(exc))
                return
            if isinstance(item, Chunk):
                try:
                    if h.receiver is not None:
                        h.receiver.apply(item)
                except BadChunk as exc:
                    print(f"{h.rdir.name}: {exc}", flush=True)
            elif isinstance(item, Placed):
                h.info.update(
                    {
                        "task_id": item.task_id,
                        "node_id": item.node_id,
                        "hostname": item.hostname,
                        "node_ip": item.node_ip,
                        "node_dir": item.node_dir,
                    }
                )
                runs.write_remote(h.rdir, h.info)

    def _end(self, h: Held, reason: str) -> None:
        """The task is over: its record says so (and why, when it ended without its files), the row is settled."""
        del self.held[h.rdir]
        if h.receiver is not None:
            h.receiver.close()
        h.info["ended"] = True
        h.info["beat"] = time.time()
        if reason:
            h.info["reason"] = reason
        runs.write_remote(h.rdir, h.info)
        runs.finish_run(self.campaign, h.rdir)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            ray.shutdown()


def lost(exc: BaseException) -> str:
    """How a task's end reads in the run's record."""
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    if isinstance(exc, ray.exceptions.TaskCancelledError):
        return "its Ray task was cancelled"
    if isinstance(exc, (ray.exceptions.NodeDiedError, ray.exceptions.LocalRayletDiedError)):
        return f"its node was lost ({type(exc).__name__}: {first})"
    if isinstance(exc, (ray.exceptions.WorkerCrashedError, ray.exceptions.ObjectLostError)):
        return f"its node or its Ray worker was lost ({type(exc).__name__}: {first})"
    return f"its Ray task failed ({type(exc).__name__}: {first})"


def _folder(rdir: Path) -> dict[str, bytes]:
    """The head's run folder as the node needs it: every regular file but the head's own records."""
    out: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(rdir, followlinks=False):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(rdir).as_posix()
            if name.startswith(".") or rel in NODE_ONLY or path.is_symlink() or not path.is_file():
                continue
            with fsutil.open_regular(path) as fh:
                out[rel] = fh.read()
    return out


@ray.remote(num_cpus=0, max_retries=0)
def node_versions() -> dict[str, str]:
    """What must be the head's on a node: read there, from its installed metadata."""
    from .nodes import versions_here

    return versions_here()


def survey(timeout_s: float = 120.0) -> list[NodeFacts]:
    """Every live node: its resources and the versions a task pinned to it read there."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    live = [n for n in ray.nodes() if n.get("Alive")]
    refs = {
        n["NodeID"]: node_versions.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote()
        for n in live
    }
    out = []
    for n in live:
        versions: dict[str, str] = {}
        error = ""
        try:
            versions = ray.get(refs[n["NodeID"]], timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            error = f"no answer within {timeout_s:g} s"
        except ray.exceptions.RayError as exc:
            error = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]
        out.append(
            NodeFacts(
                node_id=n["NodeID"],
                hostname=str(n.get("NodeName") or n.get("NodeManagerHostname") or "?"),
                ip=str(n.get("NodeManagerAddress") or "?"),
                resources={k: float(v) for k, v in (n.get("Resources") or {}).items()},
                versions=versions,
                error=error,
            )
        )
    return out


def connect(address: str, campaign_dir: Path) -> None:
    """Join the cluster as its driver, with the campaign's files as every task's working_dir."""
    if ray.is_initialized():
        return
    import logging

    ray.init(
        address=address,
        runtime_env={"working_dir": str(campaign_dir), "excludes": EXCLUDES},
        namespace="cockpit",
        log_to_driver=False,
        logging_level=logging.WARNING,
        configure_logging=True,
    )
