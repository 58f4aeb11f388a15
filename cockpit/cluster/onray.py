"""The series' side of Ray on the head: check the nodes, hand each run to the series' keeper.

With :mod:`.ray_keeper` and :mod:`.ray_node`, the only modules that import ray
(``pip install 'cockpit[ray]'``); the series command imports them only for
``--ray``. No torch on the head's side.

**Who holds the runs.** Not ``cockpit series``, a Ray driver whose tasks end
with it, but the series' keeper, a detached actor on the head
(:mod:`.ray_keeper`): the runs outlive the command, and the same command
again follows the runs still held.

**On the head** (:class:`Cluster`), the series creates each run as always (its
id, run.toml and notebook row: :func:`cockpit.launch.new_run`), then
:meth:`Cluster.start` hands the run to the keeper, which submits its task
asking for the resources its pilot measured (:func:`cockpit.cluster.demand`).
The campaign's files (task code, data; never ``runs/`` or the notebook) reach
the node through Ray's runtime environment (``working_dir``). The keeper
writes what the task streams back into the head's run folder (:mod:`.mirror`)
and keeps ``remote.json`` current: the task, its node, a heartbeat, the keeper
that holds it. A run's liveness on the head is that record's, never a local
pid (:func:`cockpit.runs.remote_alive`): alive while the keeper holds its task
(a heartbeat younger than :data:`cockpit.runs.REMOTE_STALE_S`) and the task has
not ended. When it ends the head's row is settled from the head's folder; when
its node is lost the record says so, and the run is ``crashed`` with that reason.

The task on the node is :mod:`.ray_node`.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, cast

import ray

from .. import fsutil, launch, runs
from ..errors import UsageError
from ..runs import stored
from .mirror import NODE_ONLY
from .nodes import NodeFacts
from .ray_keeper import Keeper, keeper_name
from .ray_node import PROBE, NodeSpec, node_disk, node_storage, node_versions

EXCLUDES = ["/runs/", "/campaign.toml", "/.campaign*"]  # the notebook and the runs stay on the head


class Cluster:
    """The series' side of Ray on the head: check the nodes, hand each run to the series' keeper."""

    def __init__(
        self,
        campaign: Path,
        address: str,
        demands: dict[str, object] | None = None,
        disk: object = None,
        storage: str = "",
    ) -> None:
        from . import Demand
        from .nodes import NodeDisk

        self.campaign = Path(campaign)  # campaign.toml
        self.address = address
        self.demands: dict[str, Demand] = {k: v for k, v in (demands or {}).items() if isinstance(v, Demand)}
        self.keeper: Any = None
        self.keeper_id = ""
        self.sealed = False
        self.storage = Path(storage).expanduser() if storage else None  # [cluster] storage: where checkpoints go
        probe = head_storage(self.storage) if self.storage is not None else None  # raises: the head cannot write
        connect(address, self.campaign.parent)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.here = ray.get_runtime_context().get_node_id()  # the node this series joined through: the head
        self._pin = NodeAffinitySchedulingStrategy(self.here, soft=False)
        from .nodes import judge, versions_here

        try:
            found = survey(storage=probe)
        finally:
            if probe is not None:
                with contextlib.suppress(OSError):
                    os.unlink(probe[0])
        # raises when a variant fits on no usable node
        verdict = judge(found, self.demands, versions_here(), disk if isinstance(disk, NodeDisk) else None)
        self.notes = verdict.notes
        self.usable = verdict.usable
        self.lanes = sum(verdict.lanes.values())  # runs the usable nodes hold at once, by their resources
        self.strategy: object = "DEFAULT"
        if len(verdict.usable) < len(found):  # only these nodes: the others were refused by name
            from ray.util.scheduling_strategies import In, NodeLabelSchedulingStrategy

            self.strategy = NodeLabelSchedulingStrategy(
                hard={"ray.io/node-id": In(*(n.node_id for n in verdict.usable))}
            )

    def _keeper(self) -> Any:
        """This series' keeper, made on its first run: a detached actor on the head, named after the series."""
        if self.keeper is None:
            self.keeper_id = keeper_name(self.campaign)
            self.keeper = (
                cast(Any, Keeper)
                .options(name=self.keeper_id, lifetime="detached", scheduling_strategy=self._pin, max_concurrency=8)
                .remote(str(self.campaign.resolve()), self.keeper_id)
            )
            ray.get(self.keeper.ping.remote(), timeout=300)
        return self.keeper

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
        """Hand the run to the keeper, which submits its task (a series' ``starter``); returns 0: no local process."""
        from . import Demand

        rdir = Path(rdir).resolve()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(rdir / runs.STOP_FILE)  # a stop asked of an earlier process of the run (a resume) is done
        variant = str(runs.run_meta(rdir).get("variant", ""))
        d = self.demands.get(variant, Demand())
        # Ray sets each task's OMP_NUM_THREADS from the CPUs it was given; the head's own share means nothing there.
        node_env = {k: v for k, v in (env or {}).items() if k not in ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")}
        store = stored.storage_dir(self.storage, self.campaign, rdir.name) if self.storage is not None else None
        files, fetch = shipped(rdir)
        spec = NodeSpec(
            rid=rdir.name,
            campaign=self.campaign.parent.name,
            notebook=fsutil.read_regular(self.campaign, 1 << 28),
            files=files,
            nproc=nproc,
            env=node_env,
            resume=resume,
            storage=str(store) if store is not None else "",
            fetch=fetch,
        )
        options = {
            "num_cpus": d.num_cpus,
            "num_gpus": d.num_gpus,
            "resources": dict(d.resources) or None,
            "scheduling_strategy": self.strategy,
            "name": f"cockpit:{self.campaign.parent.name}:{rdir.name}",
        }
        info: runs.RemoteInfo = {"address": self.address, "submitted": runs.now()}
        if store is not None:
            info["store"] = str(store)
        keeper = self._keeper()
        ray.get(keeper.submit.remote(str(rdir), spec, options, info), timeout=300)
        return 0

    def pump(self) -> None:
        """Called on every poll of the series, before it starts runs: the first call after the keeper got its
        runs tells it the series has submitted them all (a Ray series submits every run at once)."""
        if self.keeper is not None and not self.sealed:
            ray.get(self.keeper.seal.remote(), timeout=60)
            self.sealed = True

    def close(self) -> None:
        with contextlib.suppress(Exception):
            ray.shutdown()


def shipped(rdir: Path) -> tuple[dict[str, bytes], dict[str, str]]:
    """What of the head's run folder the node needs: the run's records (its top-level files, but the head's own)
    and, for a resume, its newest checkpoint, never the older ones nor the export (they stay on the head). A newest
    checkpoint in the storage is not sent: the node copies it from there (the second dict: its path there)."""
    out: dict[str, bytes] = {}
    for path in sorted(rdir.iterdir()):
        name = path.name
        if name.startswith(".") or name in NODE_ONLY or path.is_symlink() or not path.is_file():
            continue
        with fsutil.open_regular(path) as fh:
            out[name] = fh.read()
    fetch: dict[str, str] = {}
    for _, rel, there in stored.checkpoint_steps(rdir)[-1:]:
        if there:
            fetch[rel] = there
        else:
            with fsutil.open_regular(rdir / rel) as fh:
                out[rel] = fh.read()
    return out, fetch


def head_storage(root: Path) -> tuple[str, str]:
    """The notebook's storage made ready on the head, and a probe file in it for each node to read back (its path
    and token); a head that cannot write there refuses the series, naming the setting."""
    import secrets

    token = secrets.token_hex(16)
    probe = root / f"{PROBE}{token[:16]}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        fsutil.write_text(probe, token)
    except OSError as exc:
        raise UsageError(
            f"[cluster] storage = {str(root)!r} in the notebook: the head cannot write there "
            f"({exc.strerror or exc}). Give a folder the head and every node reach at that path (a shared volume, "
            "NFS), or leave it empty to stream every run's checkpoints back to the head."
        ) from None
    return str(probe), token


def survey(timeout_s: float = 120.0, storage: tuple[str, str] | None = None) -> list[NodeFacts]:
    """Every live node: its resources, and the versions and free disk tasks pinned to it read there (and whether
    the storage's probe file, ``storage`` = (its path, token), reads back there)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    live = [n for n in ray.nodes() if n.get("Alive")]
    refs = {}
    for n in live:
        pin = NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        refs[n["NodeID"]] = (
            node_versions.options(scheduling_strategy=pin).remote(),
            node_disk.options(scheduling_strategy=pin).remote(),
            node_storage.options(scheduling_strategy=pin).remote(str(Path(storage[0]).parent), storage[1])
            if storage is not None
            else None,
        )
    out = []
    for n in live:
        versions: dict[str, str] = {}
        free: int | None = None
        error = reach = ""
        try:
            versions = ray.get(refs[n["NodeID"]][0], timeout=timeout_s)
            free = int(ray.get(refs[n["NodeID"]][1], timeout=timeout_s))
            asked = refs[n["NodeID"]][2]
            if asked is not None:
                reach = str(ray.get(asked, timeout=timeout_s))
        except ray.exceptions.GetTimeoutError:
            error = f"no answer within {timeout_s:g} s"
        except ray.exceptions.RayError as exc:
            error = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]
        out.append(
            NodeFacts(
                node_id=n["NodeID"],
                hostname=node_name(n),
                ip=str(n.get("NodeManagerAddress") or "?"),
                resources={k: float(v) for k, v in (n.get("Resources") or {}).items()},
                versions=versions,
                error=error,
                free=free,
                storage=reach,
            )
        )
    return out


def node_name(n: dict[str, object]) -> str:
    """A node's name as its user knows it: ``ray start --node-name``'s, else the box's hostname (Ray's NodeName is
    the node's address when none was given, which printed the address twice: "node 10.0.0.3 10.0.0.3")."""
    given, ip = str(n.get("NodeName") or ""), str(n.get("NodeManagerAddress") or "")
    if given and given != ip:
        return given
    return str(n.get("NodeManagerHostname") or given or "?")


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
