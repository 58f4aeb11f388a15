"""Which nodes of a Ray cluster a series may use, and why not the others, decided before any run starts. No ray.

A node is refused by name when its Cockpit or torch differs from the head's (a
run there would not be the run the pilot measured) or when its disk cannot
hold the checkpoints of the runs it would train at once, and a GPU run goes only to
a GPU model its campaign has a passed pilot on (the ``gpu_model:<MODEL>``
resource each node declares). A node left unused is said, with its reason; a
variant no usable node can hold refuses the series, so no run waits for ever.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import UsageError
from . import MODEL_PREFIX, Demand

COMPARED = ("cockpit", "torch")  # what must be the head's on every node that trains a run


@dataclass(frozen=True)
class NodeFacts:
    """One live node as the series found it: Ray's record and the versions a task read there."""

    node_id: str
    hostname: str
    ip: str
    resources: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    error: str = ""  # the version task failed there (Cockpit not installed, the node gone)
    free: int | None = None  # bytes free where the node keeps its runs' copies (its Ray session folder)
    storage: str = ""  # why the notebook's [cluster] storage is not the head's folder there ("": it is, or none)

    @property
    def name(self) -> str:
        return f"node {self.hostname} {self.ip} ({self.node_id[:12]})"

    @property
    def models(self) -> dict[str, float]:
        return {k[len(MODEL_PREFIX) :]: v for k, v in self.resources.items() if k.startswith(MODEL_PREFIX)}


@dataclass
class Verdict:
    usable: list[NodeFacts]
    notes: list[str]
    lanes: dict[str, int] = field(default_factory=dict)  # node id -> runs it can hold at once, by its resources


@dataclass(frozen=True)
class NodeDisk:
    """What one run leaves on a node's disk while it trains there, from the sizes its pilot measured: ``keep``
    checkpoints and the next being written, then its export; the copy goes once the head holds it."""

    checkpoint: int
    export: int
    keep: int
    source: str = ""

    def need(self, lanes: int) -> int:
        return lanes * ((self.keep + 1) * self.checkpoint + self.export)


def lanes(n: NodeFacts, demands: dict[str, Demand]) -> int:
    """How many runs of these variants the node can hold at once by its resources (the most of any variant)."""
    best = 0
    for d in demands.values():
        asks = {"CPU": d.num_cpus, "GPU": d.num_gpus, **d.resources}
        fit = min((int(n.resources.get(k, 0.0) / v + 1e-9) for k, v in asks.items() if v > 0), default=0)
        best = max(best, fit)
    return best


def versions_here() -> dict[str, str]:
    """The versions of what must match, from the installed metadata (no import of torch)."""
    from importlib import metadata

    out = {}
    for name in COMPARED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def judge(
    nodes: list[NodeFacts], demands: dict[str, Demand], head: dict[str, str], disk: NodeDisk | None = None
) -> Verdict:
    """The nodes a series may use and a note per node it may not (another Cockpit or torch; the notebook's storage
    not reached there; too little disk for the runs it would hold at once) or whose GPUs no run may use; raises when a variant's runs fit on no usable
    node."""
    verdict_lanes: dict[str, int] = {}
    usable: list[NodeFacts] = []
    notes: list[str] = []
    piloted = sorted({d.model for d in demands.values() if d.model})
    for n in nodes:
        if n.error:
            notes.append(f"{n.name}: not used: the version check failed there ({n.error})")
            continue
        differ = [
            f"{k} {n.versions.get(k, '?')} there, {head.get(k, '?')} on the head"
            for k in COMPARED
            if n.versions.get(k) != head.get(k)
        ]
        if differ:
            notes.append(
                f"{n.name}: not used: {'; '.join(differ)}; a run there would not be the run its pilot measured "
                "(install the head's versions on it, then start the series again)"
            )
            continue
        if n.storage:
            notes.append(
                f"{n.name}: not used: [cluster] storage is not the head's folder there ({n.storage}); mount the "
                "same shared folder at that path on it, or leave storage empty to stream checkpoints to the head"
            )
            continue
        at_once = lanes(n, demands)
        if disk is not None and n.free is not None and at_once and disk.need(at_once) > n.free:
            notes.append(
                f"{n.name}: not used: {_mib(n.free)} free on its disk, and the {at_once} run"
                f"{'s' if at_once != 1 else ''} it would hold at once need {_mib(disk.need(at_once))} there "
                f"({disk.keep} kept + 1 being written x {_mib(disk.checkpoint)} per checkpoint + "
                f"{_mib(disk.export)} export each; sizes from {disk.source or 'the pilots'}); free disk on it "
                "or set [checkpoints] keep = 1"
            )
            continue
        usable.append(n)
        verdict_lanes[n.node_id] = at_once
        gpus = n.resources.get("GPU", 0.0)
        unpiloted = [m for m in n.models if m not in piloted]
        if unpiloted:
            had = f"pilots passed on: {', '.join(piloted)}" if piloted else "no variant of this series has a GPU pilot"
            notes.append(
                f"{n.name}: its GPUs ({', '.join(MODEL_PREFIX + m for m in unpiloted)}) have no passed pilot in this "
                f"series ({had}): no GPU run goes there; pilot on that GPU model first"
            )
        elif gpus and not n.models and piloted:
            notes.append(
                f"{n.name}: {gpus:g} GPUs but no {MODEL_PREFIX}MODEL resource: no GPU run goes there "
                f"(start it with `ray start ... --resources '{{\"{MODEL_PREFIX}{piloted[0]}\": {gpus:g}}}'`)"
            )
    for vid, d in demands.items():
        fits = [
            n
            for n in usable
            if n.resources.get("CPU", 0.0) >= d.num_cpus
            and n.resources.get("GPU", 0.0) >= d.num_gpus
            and all(n.resources.get(k, 0.0) >= v for k, v in d.resources.items())
        ]
        if not fits:
            want = f"{d.label()} ({MODEL_PREFIX}{d.model})" if d.model else d.label()
            raise UsageError(
                f"--ray: no usable node of the cluster can hold a run of {vid}, which asks for {want} ({d.why}); "
                + ("; ".join(notes) or "no node has it")
                + ". Join a node that has it, or pilot the variant on a GPU model the cluster has."
            )
    return Verdict(usable, notes, verdict_lanes)


def _mib(b: int) -> str:
    return f"{b / 2**30:,.1f} GiB" if b >= 2**30 else f"{b / 2**20:,.1f} MiB"
