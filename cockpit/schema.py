"""The typed records of the event schema: what each event carries, every field a writer writes.

Pure Python (no torch, no textual): the writers (the pilot, a probe) fill these, the readers (runs, the TUI, the
sheet, compare) read them; :mod:`cockpit.events` is the module both import, and re-exports them. A gate's own
figures (``machine``, ``step_time``, ``truncation``, ...) are declared in :class:`GateExtras`, one field each, so a
reader looks a figure up by a name the schema holds instead of guessing where a writer put it. The schema's version
is :data:`SCHEMA_VERSION`; every event carries it as ``v``.

Free-form JSON (a task's own inputs, the software stack's report) is :data:`JSON`, a recursive value type, never an
unchecked ``Any``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias, TypedDict

if TYPE_CHECKING:  # typing.NotRequired is Python 3.11; annotations here are never evaluated
    from typing import NotRequired

SCHEMA_VERSION = 1

# A JSON value as json.loads returns it, or as a writer hands it to json.dumps (tuples and mappings allowed).
JSON: TypeAlias = None | bool | int | float | str | Sequence["JSON"] | Mapping[str, "JSON"]
JSONObject = Mapping[str, JSON]


class TorchCounters(TypedDict):
    """torch's allocator on the run's GPU, in bytes."""

    allocated: int
    reserved: int
    peak_allocated: int
    peak_reserved: int


class GpuMemory(TypedDict):
    """One GPU as NVML sees it: everything every process holds, in bytes."""

    index: int
    name: str
    used: int
    total: int


class GpuSample(TypedDict):
    index: int
    used: int
    total: int
    util: int | None


class Baseline(TypedDict):
    """What the process and the GPUs held before the model loaded."""

    torch_allocated: int | None
    nvml_used: list[int] | None
    rss: int


class Mem(TypedDict):
    """One measurement within a phase's bounds (a gate's and a run_end's ``mem``); None: not measured here."""

    torch: TorchCounters | None
    nvml: list[GpuMemory] | None
    rss: int
    rss_peak: int
    baseline: Baseline | None


class SampleFields(TypedDict):
    """A background sample, for live charts."""

    phase: str
    rss: int
    nvml: list[GpuSample] | None
    torch: Mapping[str, int] | None  # allocated, reserved


class PeakSummary(TypedDict):
    """A training run's peak over the whole run (metrics.json's ``peak``), with the counter named."""

    peak_allocated: int | None
    peak_reserved: int | None
    rss_peak: int | None
    counter: str


class Check(TypedDict):
    """One check of a gate: its name, whether it held, what it measured; ``warn``: its failure is a warning;
    ``na``: its precondition did not hold, so it measured nothing (never a pass)."""

    name: str
    ok: bool
    detail: str
    warn: NotRequired[bool]
    na: NotRequired[bool]


class InitialLoss(TypedDict):
    """The first microbatch's loss against what its objective implies (``cockpit.pilot.phases.lossinit``): the
    reference (ln C, or the targets' variance), what it is, the ratio and the excess in nats, the form the loss
    was recognised as; for a cross-entropy ln C, the class count, the targets' entropy, the logits' own
    cross-entropy and spread; for a squared error, the output's own and the targets' mean."""

    loss: float
    reference: float
    what: str
    ratio: float
    excess: float
    form: str
    uniform: NotRequired[float]
    classes: NotRequired[int]
    entropy: NotRequired[float | None]
    ce: NotRequired[float]
    spread: NotRequired[float | None]
    mse: NotRequired[float]
    mean: NotRequired[float]


class StepTime(TypedDict):
    """Seconds per update over the timed updates: median, spread and the samples."""

    median: float
    min: float
    max: float
    n: int
    samples: list[float]


class Truncation(TypedDict):
    """What cropping to max_length costs the train split."""

    examples: int
    lose_target_tokens: int
    no_target_left: NotRequired[int]
    longer_than_max: NotRequired[int]
    max_length: NotRequired[int | None]


class OptimizerState(TypedDict):
    parameters_with_state: int
    tensors: int
    bytes: int
    trainable_values: int
    parameter_values: int
    adapter: JSON


class Predictions(TypedDict):
    rows: int
    seconds: float
    metrics: JSONObject
    generated: NotRequired[int]


class Determinism(TypedDict):
    twice: list[float]
    replayed: list[float]
    model_draws: bool
    dropout: NotRequired[list[str]]  # the dropout kernels the eval forward ran (dropout left on)
    sampling: NotRequired[list[str]]  # the random kernels it drew from otherwise (a VAE's reparameterisation)
    carried: NotRequired[list[str]]


class Inspected(TypedDict):
    file: str
    examples: int


class Decomposition(TypedDict):
    """The whole batch's loss against its microbatches' combined, the relative gap and the arithmetic's noise
    floor, and a batch-level term the model's output names ("" if none)."""

    whole: float
    combined: float
    gap: float
    floor: float
    source: str


class OverfitRetry(TypedDict):
    lr: float
    steps: int
    last: float | None


class RunEndFigures(TypedDict, total=False):
    """What a run process adds to its run_end: a pilot, the inputs of the phase it ended in; a training run, its
    updates and its memory over the whole run."""

    inputs: JSONObject
    updates: int
    mem: Mem | None


class StackGpu(TypedDict, total=False):
    index: int
    name: str
    total: int  # bytes
    capability: str


class Stack(TypedDict, total=False):
    """The software stack a run measured on (``cockpit.pilot.meter.stack_info``): a run_start's ``stack``, and the
    stack gate's, which a probe's script interpreter reports."""

    python: str
    torch: str
    build: str  # cuda | rocm | cpu
    cuda: str | None
    cudnn: int | None
    cuda_available: bool
    driver: str | None
    nvml: bool
    nvml_error: str | None
    gpus: list[StackGpu]
    bf16: bool | None
    nccl: bool
    gloo: bool
    device: str
    cpu_count: int | None
    memory_total: int
    threads: int  # the torch threads the run computed with (cockpit.pilot.threads)
    torch_threads: int
    cpus_available: float | None
    OMP_NUM_THREADS: str | None


# "class" is a keyword: the required keys are declared in the functional form, the optional ones below
_BaseKeys = TypedDict(
    "_BaseKeys",
    {
        "sha256": str,  # over every frozen tensor: name (as the base names it), dtype, shape, bytes
        "tensors": int,
        "values": int,
        "bytes": int,
        "class": str,  # the base model's class
    },
)


class BaseIdentity(_BaseKeys, total=False):
    """The frozen base's identity, as an adapter's export manifest and export gate record it
    (``cockpit.pilot.adapter.base_identity``)."""

    config_sha256: str  # its configuration, without the fields that name where it came from
    name_or_path: str
    model_type: str | None
    revision: str  # the hub commit it came from
    peft: dict[str, dict[str, JSON]]  # each PEFT adapter's config: type, rank, targets...


class GateExtras(TypedDict, total=False):
    """A gate's own figures, beside its checks. Each phase writes the ones it measures."""

    machine: CpuLoad  # the CPU load during the phase (cockpit.machine.CpuWatch), gpu_others on a GPU
    busy: str  # the load in words, when other processes made the machine busy
    stack: Stack  # stack: the software stack found
    gpu_others: list[GpuProcess]  # stack: other processes' memory on the GPUs
    data_revision: JSONObject  # data: the hash over every example
    truncation: Truncation  # data
    inspect: Inspected  # data: the inspect file written
    class_counts: JSONObject  # data: per split, per class
    float_inputs: JSONObject  # data: mean, std, min, max of each float input field, per split
    dependence: JSONObject  # data: what each output depends on (the batch invariants' figures)
    initial_loss: InitialLoss  # forward
    frozen_modes: list[JSONObject]  # forward: frozen modules that ran in training mode, measured again
    loss_terms: JSONObject  # forward, overfit: the loss's named terms, each at init (and after the overfit)
    optimizer_state: OptimizerState  # update_first
    step_time: StepTime  # update_second (and a probe's training)
    first_step_peak: int | None  # update_second
    peak_vs_first: float  # update_second
    kept_state: list[JSONObject]  # update_second: tensors the model or task kept across updates
    allocated_after_update: list[int]  # update_second, on a GPU: torch's allocated bytes after each update
    schedule: JSONObject  # update_second: the task's schedule replayed over the run's updates
    grad_clip: JSONObject  # update_second: the gradient norms before clipping and as the optimizer stepped them
    grad_scaler: JSONObject  # update_second: the fp16 scaler's scales and skipped updates
    relative_difference: float  # accumulation
    decomposition: Decomposition  # accumulation: whether the loss decomposes over examples
    typical_peak: int | None  # worst_case
    worst_vs_typical: float  # worst_case
    overfit: JSONObject  # overfit: the loss curve and its judgement
    overfit_retry: OverfitRetry  # overfit: the rate that diverged first
    predictions: Predictions  # validation
    generated: JSON  # validation: a few generated texts
    val_loss: float | None  # validation
    determinism: Determinism  # validation
    bytes: int  # save, export
    base: BaseIdentity  # export: an adapter's base, recorded by identity
    child_peak: int | None  # resume: the new process's peak
    files: list[str]  # a probe's save: the files written
    loss: float | None  # a probe's training


class GateFields(TypedDict):
    """What every gate event carries beside ``v``, ``t`` and ``kind``."""

    phase: str
    verdict: str
    checks: list[Check]
    inputs: JSONObject
    remedy: str
    message: str
    duration_s: float
    mem: Mem | JSONObject  # a probe's gates carry the figures its script reported


class GateEvent(GateFields, GateExtras):
    """A whole gate event's payload: its fields and its figures."""


class RunEndFields(TypedDict):
    """What every ``run_end`` carries beside ``v``, ``t`` and ``kind`` (a run process adds ``duration_s`` and its
    kind's own figures)."""

    status: str
    stop_reason: str
    phase: str | None
    message: str
    exit_code: int


class Metrics(TypedDict, total=False):
    """A training run's ``metrics.json``, written once at its end (``cockpit.pilot.training``); absent fields: an
    older writer. Losses are None when not finite or not measured."""

    final_val_loss: float | None
    best_val_loss: float | None
    best_step: int | None
    updates: int
    stop_reason: str
    status: str
    step_time_s: float | None
    eval_time_s: float | None
    save_time_s: float | None
    examples_seen: int
    seed: int
    variant: str
    planned_updates: int
    final_step: int | None
    final_metrics: dict[str, float | None]
    start_loss: float | None
    duration_s: float
    peak: PeakSummary
    checkpoint_time_s: float | None
    data_revision: JSONObject
    replay: JSONObject | None  # the trained model exported and replayed in a new process


class InspectedExample(TypedDict, total=False):
    """One example of ``inspect.json`` (the data gate writes it, ``cockpit inspect`` and the TUI read it), as the
    loss receives it: ``row`` is the collated batch at this example (key -> its values), ``text`` the task's
    decode (a string, or [text, supervised] pairs), ``target`` the label or the supervised tokens."""

    split: str
    id: JSON
    row: dict[str, JSON]
    text: JSON
    target: JSON
    label_name: str | None
    generated: str  # added by the validation phase (a task that generates)


class InspectDoc(TypedDict):
    """``inspect.json``: the inspected examples and, for a classification task, the class counts per split."""

    examples: list[InspectedExample]
    class_counts: NotRequired[dict[str, dict[str, int]]]
    label_names: NotRequired[list[str] | None]


class CpuLoad(TypedDict):
    """The machine's load while a phase ran (:meth:`cockpit.machine.CpuWatch.stop`): CPUs other processes kept busy,
    this process's own, the 1-minute load average (None where the system has none) and whether that made the machine
    busy; on a GPU the pilot adds what other processes held on each GPU at the phase's end (bytes, by GPU index)."""

    cpus: float
    others_cpus: float
    own_cpus: float
    load1: float | None
    busy: bool
    gpu_others: NotRequired[dict[str, int]]


class GpuProcess(TypedDict):
    """A process other than the run's holding GPU memory (:func:`cockpit.machine.gpu_others`)."""

    gpu: int
    pid: int
    name: str
    used: int | None  # bytes; None: the driver did not report it


GATE_EXTRAS = frozenset(GateExtras.__annotations__)


class Event(GateExtras, total=False):
    """One line of ``events.jsonl`` as a reader gets it: ``v``, ``t`` and ``kind``, and the fields of its kind.

    One record for every kind, so that a reader names a field the schema holds (a misspelt key is a type error, not
    a silent None) and a field means one thing whatever kind carries it. Which fields each kind carries is listed in
    :mod:`cockpit.events`; a reader still asks ``e.get(...)`` for a field its kind may lack (an older writer, a
    probe's row)."""

    v: int
    t: float
    kind: str
    rank: int | None
    device: str
    # run_start
    run_id: str
    campaign: str | None
    variant: str | None
    seed: int | None
    run_kind: str
    follows: str
    pid: int
    world: int
    phases: list[str]
    params: JSONObject
    probe: JSONObject  # a probe's command, resume command, steps and working directory
    stop: JSONObject  # a training run's [stop], [validation] and [checkpoints] as it started
    validation: JSONObject
    checkpoints: JSONObject
    resumed_from: int | None  # a resumed training run: the update of the checkpoint it resumed from
    # phase_start, gate, sample, step (the phase it ran in)
    phase: str | None
    inputs: JSONObject
    # gate (beside GateExtras)
    verdict: str
    checks: list[Check]
    remedy: str
    message: str
    duration_s: float | None
    mem: Mem | JSONObject | None
    # sample
    rss: int
    nvml: list[GpuSample] | None
    torch: Mapping[str, int] | None
    # step, eval
    step: int
    lr: float | None
    grad_norm: float | None
    examples: int | None
    opt_step: float | None  # a probe's: the optimizer step this update ran (the optimizer's count: 5.0)
    microbatches: int | None
    metrics: JSONObject
    # log
    level: str
    # run_end (beside message, phase, duration_s, inputs and mem above)
    status: str
    stop_reason: str
    exit_code: int
    updates: int


EVENT_FIELDS = frozenset(Event.__annotations__)  # every field any kind of event may carry

__all__ = [
    "RunEndFigures",
    "BaseIdentity",
    "Baseline",
    "Check",
    "CpuLoad",
    "Decomposition",
    "Determinism",
    "EVENT_FIELDS",
    "Event",
    "GATE_EXTRAS",
    "GateEvent",
    "GateExtras",
    "GateFields",
    "GpuMemory",
    "GpuProcess",
    "GpuSample",
    "InitialLoss",
    "InspectDoc",
    "Inspected",
    "InspectedExample",
    "JSON",
    "JSONObject",
    "Mem",
    "Metrics",
    "OptimizerState",
    "OverfitRetry",
    "PeakSummary",
    "Predictions",
    "RunEndFields",
    "SCHEMA_VERSION",
    "SampleFields",
    "Stack",
    "StackGpu",
    "StepTime",
    "TorchCounters",
    "Truncation",
]
