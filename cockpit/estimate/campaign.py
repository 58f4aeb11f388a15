"""A campaign's estimate: its task and a variant's parameters, traced at the campaign's microbatch and at a
second one (for the largest microbatch per GPU), turned into an :class:`~.report.Estimate`.

What goes wrong is the user's to fix and said so (exit 2), never "a bug in Cockpit": a task that does not import,
task code that raises under fake tensors (it may read values or call NumPy on tensors: the pilot measures it
instead), data too small for one update.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from .. import notebook as nbm
from ..contract import Params
from ..errors import UsageError
from ..notebook.settings import Settings
from . import report
from .strategy import Strategy

if TYPE_CHECKING:
    from ..pilot.task import Task
    from .trace import Trace


def length_param(task: Task, params: Params) -> tuple[str, int] | None:
    """The [task.params] key that is the campaign's length, and its value: the one whose value ``max_length``
    returns and whose half it follows (``block`` for nanoGPT's block size, ``max_length`` for a tokenizer's);
    None when the task declares no max_length or no parameter is it."""
    if task.max_length is None:
        return None
    try:
        length = int(task.max_length(params))
    except Exception:  # noqa: BLE001 - the task's function: without a length the table has one axis
        return None
    for key, value in params.items():
        if type(value) is not int or value != length or length < 2 or key in ("microbatch", "eval_microbatch"):
            continue
        try:
            if int(task.max_length({**params, key: length // 2})) == length // 2:
                return key, length
        except Exception:  # noqa: BLE001 - as above
            continue
    return None


def second_microbatch(m: int) -> int:
    return m // 2 if m > 1 else 2


def estimate(
    nb: nbm.Notebook,
    variant: str | None = None,
    gpus: list[str] | None = None,
    *,
    second: bool = True,
    compare_cpu: bool = True,
) -> report.Estimate:
    from ..pilot.task import TaskError, load_task
    from ..pilot.taskcheck import task_problem

    vid = variant or nb.reference.id
    try:
        settings = Settings.of(nb, vid)
    except nbm.NotebookError as exc:
        raise UsageError(str(exc)) from None
    sizes = None
    if gpus:
        try:
            sizes = [report.gpu_size(g) for g in gpus]
        except ValueError as exc:
            raise UsageError(f"--gpu: {exc}") from None
    try:
        task = load_task(nb.task.entry, nb.directory)
    except Exception as exc:  # noqa: BLE001 - the user's task: every import failure is theirs to fix
        p = (
            task_problem(exc, nb.task.entry)
            if not isinstance(exc, TaskError)
            else {"where": "task.entry", "what": str(exc)}
        )
        raise UsageError(
            f"{nb.path}: {p['where']}: {p['what']}. The estimate runs the task's own model, so it needs the task "
            "to import; `cockpit check` says the same."
        ) from None
    trainable_only = bool(getattr(nb.checkpoints, "trainable_only", False))
    params = settings.flat()  # what the task's functions receive
    how = strategy_of(nb, settings)
    main = traced(nb, vid, task, params, settings.microbatch, trainable_only, strategy=how)
    other = None
    if second:
        m2 = second_microbatch(main.microbatch)
        try:
            other = traced(nb, vid, task, params, m2, trainable_only, strategy=how)
        except UsageError:
            other = None  # e.g. too few examples for the second size: the table then says so
    shorter, lengths, knob = None, (0, 0), length_param(task, params)
    if second and knob is not None:
        key, length = knob
        try:
            shorter = traced(nb, vid, task, {**params, key: length // 2}, main.microbatch, trainable_only, strategy=how)
            lengths = (length, length // 2)
        except UsageError:
            shorter = None  # the table then has no length column
    cpu, cpu_failed = None, ""
    if compare_cpu:
        try:
            cpu = traced(nb, vid, task, params, main.microbatch, trainable_only, gpu_semantics=False, strategy=how)
        except UsageError as exc:
            # the task runs on the GPU's semantics and not on the CPU's (labels = t[:, 1:] with targets.view(-1):
            # the copy to a GPU makes the slice contiguous, the CPU copies nothing): the column is left out, not
            # the estimate
            said = str(exc).split(": ", 2)[-1].split(" (traced on fake tensors")[0]
            cpu_failed = f"the CPU-semantics column: the task fails there as a CPU run would ({said})"
    e = report.build(
        main,
        other,
        cpu=cpu,
        campaign=nb.campaign.name,
        variant=vid,
        params=params,
        headroom=float(nb.pilot.headroom),
        sizes=sizes,
        shorter=shorter,
        lengths=lengths,
        length_param=knob[0] if knob is not None else "",
        strategy=how,
    )
    if cpu_failed:
        e.not_modelled.append(cpu_failed)
    return e


def strategy_of(nb: nbm.Notebook, settings: Settings) -> Strategy:
    """The strategy the selection sheet gives the variant (its ``strategy_of``: ``[selection] strategy``, else
    DDP over the data replicas, FSDP with model parallelism), the estimate's ranks."""
    from ..sheet.phases import strategy_of as sheet_strategy

    name, gpus = sheet_strategy(nb, settings)
    return Strategy(name, gpus)


def traced(
    nb: nbm.Notebook,
    vid: str,
    task: Task,
    params: Params,
    m: int,
    trainable_only: bool,
    gpu_semantics: bool = True,
    strategy: Strategy | None = None,
) -> Trace:
    """One trace of a campaign's variant at microbatch ``m`` (rank 0 of ``strategy``); what the task does that fake
    tensors cannot is a UsageError naming the op, or the task's line that raised."""
    from .trace import run

    return guarded(
        nb,
        vid,
        m,
        lambda: run(
            task,
            params,
            seed=0,
            microbatch=m,
            trainable_only=trainable_only,
            gpu_semantics=gpu_semantics,
            strategy=strategy,
        ),
    )


T = TypeVar("T")


def guarded(nb: nbm.Notebook, vid: str, m: int, call: Callable[[], T]) -> T:
    """``call()`` (a trace, or the CPU measurement beside it), its failures said as the user's to fix."""
    from .. import blame
    from ..pilot.task import DataTooSmall
    from ..pilot.usercode import UserCodeError
    from .counter import Unfakeable

    try:
        return call()
    except UserCodeError as exc:
        if isinstance(exc.exc, Unfakeable):
            raise UsageError(
                f"{nb.path}: variant {vid}: the task's {exc.where}: {exc.exc}. Give the op a fake kernel "
                "(torch.library.register_fake) so its output shapes are known, or measure with `cockpit pilot` on "
                "the GPU."
            ) from None
        at = blame.of(exc).where
        raise UsageError(
            f"{nb.path}: variant {vid}: the task's {exc.where} raised {type(exc.exc).__name__}: "
            f"{blame.first_line(exc.exc)}{f' at {at}' if at else ''} "
            f"(traced on fake tensors at microbatch {m}). If it works in `cockpit pilot`, it does something fake "
            "tensors cannot (reads values from tensors, calls NumPy on them, loads files onto a device): "
            "measure with `cockpit pilot` instead."
        ) from None
    except DataTooSmall as exc:
        raise UsageError(f"{nb.path}: variant {vid}: {exc}. {exc.remedy}") from None
