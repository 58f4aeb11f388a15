"""A series spread over the nodes of a Ray cluster: what the pilot measured, said in Ray's resources. No torch, no ray.

Ray places the runs (DESIGN.md, principle 14: an existing engine, no
scheduler of our own); Cockpit only translates each variant's latest passed
pilot into the resources its task asks for (:func:`demand`), by the rule
``--parallel`` uses on one box: whole GPUs, or ``1/k`` of one when ``k``
measured peaks plus a CUDA context each fit in its memory; a CPU pilot asks
for one CPU. A GPU run also asks for ``gpu_model:<MODEL>``, the custom
resource each node declares for its GPUs, so it lands only on the model its
pilot passed on.

- :mod:`.mirror` the run folder mirrored from the node to the head, in chunks
- :mod:`.nodes`  which nodes a series may use, and why not the others
- :mod:`.onray`  the series' side on the head (imports ray, as the next two do)
- :mod:`.ray_keeper` the detached actor on the head that holds a series' runs
- :mod:`.ray_node` the run's task on the node
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

from .. import notebook as nbm
from .. import runs
from ..errors import UsageError

INSTALL = "pip install 'cockpit[ray]'"
MODEL_PREFIX = "gpu_model:"


def available() -> bool:
    """Whether ray can be imported here (without importing it)."""
    return importlib.util.find_spec("ray") is not None


def need_ray(what: str = "--ray") -> None:
    if not available():
        raise UsageError(
            f"{what}: Ray is not installed in this environment; install it with `{INSTALL}` (on the head and on "
            "every node, beside the same Cockpit and torch), then join the nodes with `ray start` (docs/ray.md)"
        )


def address(nb: nbm.Notebook, given: str | None) -> str | None:
    """The Ray cluster a series goes to: ``--ray ADDRESS``, else ``[cluster] ray``; ``auto`` is RAY_ADDRESS."""
    chosen = given if given is not None else (nb.cluster.ray if nb.cluster is not None else "")
    chosen = (chosen or "").strip()
    if not chosen:
        return None
    if chosen == "auto":
        env = os.environ.get("RAY_ADDRESS", "").strip()
        if not env:
            raise UsageError(
                "--ray auto: RAY_ADDRESS is not set; give the head's address (`--ray HOST:6379`) or export "
                "RAY_ADDRESS (the address `ray start --head` printed)"
            )
        return env
    return chosen


def held_runs(campaign: Path) -> list[Path]:
    """The training runs of a campaign that an earlier series' keeper still holds on the cluster (a fresh
    heartbeat in their ``remote.json``): a series started again follows them instead of starting them twice."""
    out = []
    for rdir in runs.run_dirs(Path(campaign).parent):
        info = runs.remote_info(rdir)
        alive = info is not None and bool(info.get("keeper")) and runs.remote_alive(info)
        if alive and runs.run_meta(rdir).get("kind") == "train":
            out.append(rdir)
    return out


def model_tag(name: str) -> str:
    """The resource name part for a GPU model as NVML names it: "NVIDIA H200" -> "H200"."""
    tag = name.strip()
    if tag.upper().startswith("NVIDIA "):
        tag = tag[len("NVIDIA ") :]
    return "-".join(tag.split()) or "unknown"


@dataclass(frozen=True)
class Demand:
    """What one run of a variant asks Ray for, and where that came from."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0
    resources: dict[str, float] = field(default_factory=dict)
    why: str = ""

    @property
    def model(self) -> str:
        return next((k[len(MODEL_PREFIX) :] for k in self.resources if k.startswith(MODEL_PREFIX)), "")

    def label(self) -> str:
        if not self.num_gpus:
            return f"{self.num_cpus:g} CPU"
        return f"{self.num_gpus:g} GPU {self.model}".rstrip()


MAX_PER_GPU = 8  # runs side by side on one GPU at most, whatever the memory says


def per_gpu(peak_bytes: float, total_bytes: float) -> int:
    """How many runs of this measured peak, plus a CUDA context each, fit in one GPU of that memory (>= 1)."""
    from ..series.checks import CONTEXT_MIB

    need = peak_bytes + CONTEXT_MIB * 2**20
    return max(1, min(MAX_PER_GPU, int(total_bytes // need))) if need > 0 else 1


def demand(pilot: runs.RunFiles | None, nproc: int = 1) -> Demand:
    """The resources a run of the variant this pilot passed asks for (None: no pilot, one CPU, said so)."""
    if pilot is None:
        return Demand(why="no passed pilot: one CPU, not sized from a measurement")
    peak, counter = pilot.peak
    gpus = [g for g in pilot.stack.get("gpus") or [] if isinstance(g, dict)]
    if counter != runs.GPU_PEAK or not gpus or peak is None:
        return Demand(why=f"pilot {pilot.id} ran on the CPU: one CPU per run")
    name = str(gpus[0].get("name") or "unknown")
    totals = [float(t) for g in gpus if isinstance(t := g.get("total"), (int, float)) and t > 0]
    model = MODEL_PREFIX + model_tag(name)
    if nproc > 1 or not totals:
        n = float(max(1, nproc))
        return Demand(1.0, n, {model: n}, f"pilot {pilot.id}: {n:g} whole {name} per run")
    k = per_gpu(peak * 2**20, min(totals))
    share = 1.0 / k
    from ..series.checks import CONTEXT_MIB

    why = (
        f"pilot {pilot.id}: {peak:,.0f} MiB {counter} + {CONTEXT_MIB} MiB CUDA context, "
        f"{k} per {min(totals) / 2**20:,.0f} MiB {name}"
    )
    return Demand(1.0, share, {model: share}, why)
