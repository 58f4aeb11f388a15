"""The notebook's typed model: one dataclass per section of ``campaign.toml``. No I/O here."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from ..contract import Params
from ..errors import CockpitError

NOTEBOOK_FILE = "campaign.toml"
LOCK_FILE = ".campaign.lock"
HELD = ("updates", "epochs", "examples")
PRECISIONS = ("fp32", "bf16", "fp16")
STRATEGIES = ("one GPU", "DDP", "FSDP")
RUN_KINDS = ("pilot", "train", "probe")
CAMPAIGN_KINDS = ("task", "probe")  # probe: made by `cockpit probe -- COMMAND` from a script, with no task
SCRIPT_VARIANT = "script"  # a probe campaign's one variant: the script as its command line runs it
PROBE_OPTIONAL = ("task", "batch", "training", "variants")  # sections a probe campaign does not have
DECISION_KINDS = ("decision", "observation", "protocol")


class NotebookError(CockpitError):
    """A notebook that cannot be used as it is. The message is for the user."""


class ConflictError(NotebookError):
    """The file changed on disk since it was read: saving would lose that change."""


@dataclass
class CampaignInfo:
    name: str
    question: str = ""
    held_constant: str = "updates"  # updates | epochs | examples
    quality_metric: str = "val_loss"
    quality_target: float | None = None
    higher_is_better: bool = False
    protocol_revision: int = 1  # raised by `cockpit protocol` when the fixed rules change after runs exist
    kind: str = "task"  # task | probe (a script measured from outside: no [task], [batch], [training], [variants])
    notes: str = ""


@dataclass
class TaskSpec:
    entry: str  # "package.module:attribute" or "path/to/file.py:attribute"
    params: Params = field(default_factory=dict)
    extensions: list[str] = field(default_factory=list)  # modules the stack check imports


@dataclass
class BatchSpec:
    microbatch: int
    accumulation: int = 1
    data_replicas: int = 1
    model_parallel: int = 1
    dataset_size: int | None = None  # None: taken from the task's training split
    updates: int | None = None  # the budget: exactly one of updates, epochs, examples
    epochs: float | None = None
    examples: int | None = None
    drop_last: bool = True
    eval_microbatch: int | None = None


@dataclass
class TrainingSpec:
    lr: float
    optimizer: str = "adamw"  # adamw | sgd
    weight_decay: float = 0.0
    momentum: float = 0.0
    schedule: str = "constant"  # constant | cosine | linear
    warmup_updates: int = 0
    grad_clip: float | None = None  # 0 or absent: no clipping
    precision: str = "fp32"  # fp32 | bf16 | fp16
    loss_scale_init: float | None = None  # fp16 grad scaler's initial scale (torch default 65536)
    activation_checkpointing: bool = False
    device: str = "auto"  # auto | cpu | cuda


@dataclass
class Variant:
    id: str
    reference: bool = False
    set: Params = field(default_factory=dict)  # overrides of training, batch or task params
    differs: str = ""  # what differs from the reference, in words
    why: str = ""
    kind: str = "quality"  # quality | memory


REFERENCE_NAMES = frozenset({"reference", "the reference", "ref", "the ref"})


def names_reference(text: str) -> bool:
    """Whether a variant's id or its ``differs`` is only the word "reference" (``cockpit new`` names it so)."""
    return text.strip().lower() in REFERENCE_NAMES


def reference_words(variant_id: str) -> str:
    """The reference variant in prose: "reference lr1e-4", or "reference" alone where its id is that word already.

    The one formatter every command, the report and the TUI use, so none prints "reference reference"."""
    return "reference" if names_reference(variant_id) else f"reference {variant_id}"


def role_words(v: Variant) -> str:
    """What a variant's line says after its id: "reference" for the reference (unless its id says it), then what
    differs (unless that only says "reference" again); "" when nothing is left to say."""
    parts = ["reference"] if v.reference and not names_reference(v.id) else []
    if v.differs and not (v.reference and names_reference(v.differs)):
        parts.append(v.differs)
    return ": ".join(parts)


@dataclass
class StopRules:
    nonfinite: bool = True
    divergence_factor: float | None = 4.0  # stop when loss > factor x its starting value
    patience: int | None = None  # evaluations without improvement
    wall_clock_minutes: float | None = None
    notes: str = ""


@dataclass
class ValidationSpec:
    every_updates: int = 50
    notes: str = ""


@dataclass
class CheckpointSpec:
    """Periodic checkpoints of a training run, so a crash loses at most the updates since the last one."""

    every_updates: int = 50  # 0: not by count
    every_minutes: float = 30.0  # 0: not by time
    keep: int = 2  # the newest K are kept
    trainable_only: bool = False  # leave frozen parameters out (rebuilt by build_model): an adapter's size
    notes: str = ""


@dataclass
class ClusterSpec:
    """A series spread over a Ray cluster's nodes (``cockpit series --ray``); absent: runs on this box."""

    ray: str = ""  # the head's address (HOST:PORT, ray://HOST:PORT) or "auto" for RAY_ADDRESS
    storage: str = ""  # a folder every node and the head reach, for checkpoints (empty: streamed back to the head)
    notes: str = ""


@dataclass
class PilotSpec:
    updates_after_resume: int = 2
    overfit_examples: int = 16
    overfit_steps: int = 200  # at most; it stops as soon as both thresholds are met
    overfit_loss_ratio: float = 0.1  # must fall below this share of its starting value
    overfit_accuracy: float = 0.9  # share of supervised targets the fitted model must predict right
    overfit_lr: float | None = None  # default: the training lr as it is (the overfit gate never raises it)
    timed_updates: int = 5  # later updates timed one by one: the median is the time per update, with its spread
    grad_tolerance: float = 1e-4  # relative, accumulated vs single-batch gradient
    headroom: float = 0.1


@dataclass
class ProbeSpec:
    """``cockpit probe``: an unmodified training script, measured phase by phase from outside."""

    command: list[str] = field(default_factory=list)  # argv, e.g. ["python", "train.py", "--lr", "3e-4"]
    env: dict[str, str] = field(default_factory=dict)  # extra environment variables for the script
    steps: int = 5  # optimizer steps watched: the first, then the later ones timed one by one
    resume: list[str] = field(default_factory=list)  # argv that resumes from the script's own checkpoint
    to_end: bool = False  # watch the script to its end instead of stopping it after the steps and one save
    save_within: int = 1000  # optimizer steps after the watched ones to wait for the script's first save
    compare_steps: int = 3  # steps after the checkpoint compared with the resumed process
    notes: str = ""


@dataclass
class RunRow:
    id: str
    variant: str
    seed: int = 0
    kind: str = "pilot"  # pilot | train | probe
    status: str = "created"
    stop_reason: str = ""
    phase: str = ""
    started: str = ""
    ended: str = ""
    peak_mib: float | None = None
    duration_s: float | None = None
    follows: str = ""  # the run this one restarts or continues
    resumed: str = ""  # each resume of this same run: "from update N at <time>"
    verdict: str = ""  # the user's verdict, free text
    notes: str = ""


@dataclass
class Decision:
    date: str
    text: str
    kind: str = "decision"  # decision | observation
    runs: list[str] = field(default_factory=list)


@dataclass
class Selection:
    memory_per_gpu_mib: float | None = None
    max_dimensions: str = ""
    precision: str = ""
    microbatch: int | None = None
    accumulation: int | None = None
    strategy: str = ""
    gpu: str = ""
    expected_result: str = ""
    notes: str = ""


@dataclass
class Rental:
    days: int | None = None  # 3, 7 or 30
    reserve_hours: float = 0.0  # kept for evaluation and export
    plan: str = ""
    notes: str = ""


@dataclass
class Conclusion:
    text: str = ""
    chosen_variant: str = ""
    date: str = ""


@dataclass
class Notebook:
    campaign: CampaignInfo
    task: TaskSpec
    batch: BatchSpec
    training: TrainingSpec
    variants: list[Variant] = field(default_factory=list)
    stop: StopRules = field(default_factory=StopRules)
    validation: ValidationSpec = field(default_factory=ValidationSpec)
    checkpoints: CheckpointSpec = field(default_factory=CheckpointSpec)
    pilot: PilotSpec = field(default_factory=PilotSpec)
    probe: ProbeSpec | None = None  # written only once a probe was set up
    cluster: ClusterSpec | None = None  # written only once a Ray cluster was named
    runs: list[RunRow] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    selection: Selection = field(default_factory=Selection)
    rental: Rental = field(default_factory=Rental)
    conclusion: Conclusion = field(default_factory=Conclusion)
    # Where it came from and what it was when read: not part of the file.
    path: Path | None = field(default=None, compare=False, repr=False)
    digest: str | None = field(default=None, compare=False, repr=False)

    # ---- queries

    @property
    def is_probe(self) -> bool:
        """A campaign made by ``cockpit probe -- COMMAND``: the script's own settings, no task to pilot."""
        return self.campaign.kind == "probe"

    def needs_task(self, what: str) -> None:
        """Refuse, in one paragraph, ``what`` (a pilot, a series run) in a probe campaign: it has no task to run."""
        if self.is_probe:
            folder = self.path.parent if self.path else "CAMPAIGN"
            command = " ".join(self.probe.command) if self.probe else "python train.py"
            raise NotebookError(
                f'{self._where()}: a probe campaign ([campaign] kind = "probe", made by `cockpit probe -- '
                f"{command}`) has no [task], so {what} has nothing to run. Probe the script again with `cockpit "
                f"probe {folder}`, read its figures with `cockpit sheet {folder}` and `cockpit plan {folder} "
                "--updates N`; to pilot the training itself, write a task (`cockpit new NAME` makes one to fill in)."
            )

    @property
    def directory(self) -> Path:
        if self.path is None:
            raise NotebookError("this notebook was not loaded from a file")
        return self.path.parent

    def variant(self, vid: str) -> Variant:
        for v in self.variants:
            if v.id == vid:
                return v
        known = ", ".join(v.id for v in self.variants) or "none"
        raise NotebookError(f"{self._where()}: no variant {vid!r} (variants: {known}).")

    @property
    def reference(self) -> Variant:
        for v in self.variants:
            if v.reference:
                return v
        return self.variants[0]

    def run(self, rid: str) -> RunRow:
        for r in self.runs:
            if r.id == rid:
                return r
        raise NotebookError(f"{self._where()}: no run {rid!r} in [[runs]].")

    def series_variants(self) -> list[str]:
        """What a series trains by default: the quality variants (memory variants are compared by their
        pilots); every variant if none is marked."""
        quality = [v.id for v in self.variants if v.kind == "quality"]
        return quality or [v.id for v in self.variants]

    def params(self, vid: str | None = None) -> Params:
        """The effective parameters of a variant: training, batch and task
        parameters, with the variant's overrides applied. Flat keys."""
        out: Params = {}
        out.update(dataclasses.asdict(self.training))
        out.update(dataclasses.asdict(self.batch))
        out.update(self.task.params)
        variant = self.variant(vid) if vid else self.reference
        out.update(variant.set)
        return out

    def _where(self) -> str:
        return str(self.path) if self.path else NOTEBOOK_FILE


class ProbeStandIns(TypedDict):
    """The sections a probe campaign stands in for, as :class:`Notebook`'s arguments of those names."""

    task: TaskSpec
    batch: BatchSpec
    training: TrainingSpec
    variants: list[Variant]


def probe_campaign_sections() -> ProbeStandIns:
    """The sections a probe campaign stands in for (it has none of its own). Never written to its file
    (:func:`~cockpit.notebook.store.to_dict` leaves them out) and never shown as settings: the script has its own."""
    return {
        "task": TaskSpec(entry=""),
        "batch": BatchSpec(microbatch=1),
        "training": TrainingSpec(lr=1.0),
        "variants": [Variant(id=SCRIPT_VARIANT, reference=True, why="the script as its command line runs it")],
    }


SECTIONS: dict[str, object] = {  # each section's type hint, as parse converts a table to it
    "campaign": CampaignInfo,
    "task": TaskSpec,
    "batch": BatchSpec,
    "training": TrainingSpec,
    "variants": list[Variant],
    "stop": StopRules,
    "validation": ValidationSpec,
    "checkpoints": CheckpointSpec,
    "pilot": PilotSpec,
    "probe": ProbeSpec | None,
    "cluster": ClusterSpec | None,
    "runs": list[RunRow],
    "decisions": list[Decision],
    "selection": Selection,
    "rental": Rental,
    "conclusion": Conclusion,
}
REQUIRED_SECTIONS = ("campaign", "task", "batch", "training", "variants")
