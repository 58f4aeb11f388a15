"""The keeper: a detached Ray actor on the head that holds a series' runs, so they outlive ``cockpit series``.

**Who holds the runs.** Ray ends the tasks a driver owns when the driver
leaves, and ``cockpit series`` is a driver: a series whose SSH session closed
would lose its runs. So the runs are held by a :class:`Keeper`, a *detached*
actor named after the series (``series:<campaign>:<key>:<time>``) and pinned
to the head, the node the series joined through: it owns every run's task,
writes what they stream back into the head's run folders and settles their
rows, and leaves by itself once every run it holds has ended. ``cockpit
series`` only creates the runs and watches their folders; killed, it leaves
them going on, and a later ``cockpit series --ray`` (or ``--resume``) on the
campaign follows the runs still held instead of starting them again.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import ray

from .. import runs
from ..runs import stored
from .mirror import BadChunk, Chunk, Receiver
from .ray_node import BEAT_S, SCAN_S, Cleaned, Ended, NodeSpec, Placed, checkpoints, digest, run_on_node

FORCE_AFTER_S = 45.0  # beyond a stop's grace: the run did not end on its node, its task is cancelled by force
IDLE_S = 120.0  # a keeper that was never told the series is all submitted leaves after holding nothing this long
KEEPER = "series:"  # the prefix of every keeper's name (namespace "cockpit")


@dataclass
class Held:
    """A run whose task the keeper holds: its stream and its record."""

    rdir: Path
    gen: Any  # ray.ObjectRefGenerator
    info: runs.RemoteInfo
    beat_t: float = 0.0
    receiver: Receiver | None = None
    stop_t: float | None = None  # when the stop was passed to its task
    stop_grace: float = 0.0


@ray.remote(num_cpus=0, max_restarts=0)
class Keeper:
    """The runs of one series, held on the head by a detached actor: they outlive the ``cockpit series`` process.

    It submits each run's task (so it, not the series' process, owns them), writes what they stream back into
    the head's run folders, passes ``cockpit stop`` to exactly that run's task, settles each row when its run ends,
    and leaves once every run it holds has ended and the series said it submitted them all (or after holding
    nothing for :data:`IDLE_S`, when that process died before it could say so)."""

    def __init__(self, campaign: str, name: str) -> None:
        self.campaign = Path(campaign)  # campaign.toml, on the head: this actor runs there
        self.name = name
        self.held: dict[str, Held] = {}
        self.asked: dict[str, float] = {}  # run id -> the grace of the stop passed to its task
        self.confirmed: dict[str, bool | str] = {}  # run id -> True (the head's copy matches) or what differs
        self.sealed = False
        self.idle_t = time.monotonic()
        self.lock = threading.Lock()
        self.me = ray.get_runtime_context().current_actor
        threading.Thread(target=self._loop, name="cockpit-keeper", daemon=True).start()

    # what the series and the tasks ask

    def ping(self) -> str:
        return self.name

    def submit(self, rdir: str, spec: NodeSpec, options: dict[str, Any], info: runs.RemoteInfo) -> None:
        gen = cast(Any, run_on_node).options(**options).remote(spec, self.me)
        path = Path(rdir)
        with self.lock:
            info = {**info, "keeper": self.name, "beat": time.time(), "ended": False}
            runs.write_remote(path, info)
            self.asked.pop(spec.rid, None)
            self.confirmed.pop(spec.rid, None)
            store = Path(spec.storage) if spec.storage else None
            self.held[spec.rid] = Held(path, gen, info, time.monotonic(), Receiver(path, store))
            self.idle_t = time.monotonic()

    def seal(self) -> None:
        """The series has submitted every run it will: leave once they have all ended."""
        self.sealed = True

    def holding(self) -> list[str]:
        with self.lock:
            return sorted(self.held)

    def grace(self, rid: str) -> float | None:
        return self.asked.get(rid)

    def mirrored(self, rid: str) -> bool | str | None:
        return self.confirmed.get(rid)

    # the loop

    def _loop(self) -> None:
        while True:
            with self.lock:
                for h in list(self.held.values()):
                    try:
                        self._pump(h)
                    except Exception:  # noqa: BLE001 - one run's trouble must not end the keeper of all the others
                        traceback.print_exc()
                if self.held:
                    self.idle_t = time.monotonic()
                elif self.sealed or time.monotonic() - self.idle_t > IDLE_S:
                    break
            time.sleep(SCAN_S)
        print(f"{self.name}: every run it held has ended; leaving", flush=True)
        ray.kill(self.me, no_restart=True)

    def _pump(self, h: Held) -> None:
        self._stop_if_asked(h)
        self._drain(h)
        if h.rdir.name in self.held and time.monotonic() - h.beat_t >= BEAT_S:
            h.beat_t = time.monotonic()
            h.info["beat"] = time.time()
            runs.write_remote(h.rdir, h.info)

    def _stop_if_asked(self, h: Held) -> None:
        """Pass a ``cockpit stop`` to exactly that run's task; cancel the task by force if its run outlives the grace."""
        if h.stop_t is None:
            grace = runs.stop_requested(h.rdir)
            if grace is not None:
                h.stop_t, h.stop_grace = time.monotonic(), grace
                self.asked[h.rdir.name] = grace
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
            elif isinstance(item, Ended):
                if item.store_error:
                    h.info["storage"] = f"a checkpoint came to the head instead: {item.store_error}"[:500]
                self.confirmed[h.rdir.name] = self._verify(h, item.files)
            elif isinstance(item, Cleaned):
                h.info["node_copy"] = "removed" if item.removed else f"kept: {item.why}"
                runs.write_remote(h.rdir, h.info)

    def _verify(self, h: Held, files: dict[str, str]) -> bool | str:
        """Whether the head's run folder holds the files the node holds, byte for byte (a checkpoint in the
        storage: read there, from the head); old checkpoints the node no longer has (a resume ships only the
        newest) are removed here, from the head's folder or the storage."""
        differ = []
        kept = stored.stored(h.rdir)
        for rel, want in sorted(files.items()):
            where = Path(kept[rel]["path"]) if rel in kept else h.rdir / rel
            try:
                got = digest(where)
            except OSError:
                got = "missing"
            if got != want:
                differ.append(rel)
        if differ:
            return f"the head's copy differs from the node's: {', '.join(differ[:5])}"
        for _, old in checkpoints(h.rdir):
            rel = old.relative_to(h.rdir).as_posix()
            if rel not in files:
                old.unlink(missing_ok=True)
        store = h.receiver.store if h.receiver is not None else None
        gone = [rel for rel in kept if rel not in files and stored.step_of(rel) is not None]
        for rel in gone:
            if store is not None and Path(kept[rel]["path"]) == store / rel:  # only ever this run's own files
                Path(kept[rel]["path"]).unlink(missing_ok=True)
            del kept[rel]
        if gone:
            stored.write_stored(h.rdir, kept)
        if store is not None:  # what a lost node copied there past the head's records (a resume went on before it)
            for path in (store / runs.CHECKPOINTS_DIR).glob("update-*.pt"):
                rel = f"{runs.CHECKPOINTS_DIR}/{path.name}"
                if rel not in files and rel not in kept:
                    path.unlink(missing_ok=True)
        h.info["files"] = len(files)
        return True

    def _end(self, h: Held, reason: str) -> None:
        """The task is over: its record says so (and why, when it ended without its files), the row is settled."""
        del self.held[h.rdir.name]
        if h.receiver is not None:
            h.receiver.close()
        h.info["ended"] = True
        h.info["beat"] = time.time()
        if reason:
            h.info["reason"] = reason
        runs.write_remote(h.rdir, h.info)
        runs.finish_run(self.campaign, h.rdir)


def keeper_name(campaign: Path) -> str:
    """A name of its own for this series' keeper, its campaign said in it."""
    key = hashlib.sha256(str(Path(campaign).resolve()).encode()).hexdigest()[:10]
    return f"{KEEPER}{Path(campaign).parent.name}:{key}:{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def said(text: str, limit: int = 300) -> str:
    """An exception's first line, at most ``limit`` characters, cut after its last whole sentence rather than in a
    word (Ray's NodeDiedError ran on into "To see node death information, use `ray")."""
    first = (text.strip().splitlines() or [""])[0]
    if len(first) <= limit:
        return first
    cut = first[:limit]
    end = cut.rfind(". ")
    return cut[: end + 1] if end > 0 else cut.rsplit(" ", 1)[0] + " ..."


def lost(exc: BaseException) -> str:
    """How a task's end reads in the run's record."""
    first = said(str(exc))
    if isinstance(exc, ray.exceptions.TaskCancelledError):
        return "its Ray task was cancelled"
    if isinstance(exc, (ray.exceptions.NodeDiedError, ray.exceptions.LocalRayletDiedError)):
        return f"its node was lost ({type(exc).__name__}: {first})"
    if isinstance(exc, (ray.exceptions.WorkerCrashedError, ray.exceptions.ObjectLostError)):
        return f"its node or its Ray worker was lost ({type(exc).__name__}: {first})"
    return f"its Ray task failed ({type(exc).__name__}: {first})"
