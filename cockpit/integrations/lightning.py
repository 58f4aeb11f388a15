"""A Lightning module and data module as a Cockpit task, in a few lines.

::

    from cockpit.integrations.lightning import lightning_task
    from model import LitClassifier, SensorData      # your existing Lightning code, beside the task file

    task = lightning_task(LitClassifier, SensorData, kind="classification", label_names=["low", "mid", "high"])

What Cockpit takes from your code, as written:

- the model: the ``LightningModule`` (a class is built with no arguments; a function gets the variant's
  parameters); what requires grad trains;
- the loss: ``training_step(batch, batch_idx)`` (a tensor, or a dict with ``"loss"``); with gradients off
  (validation, the control inputs) ``validation_step`` when the module has one: its returned loss, else
  what it logged with ``self.log`` (``val_loss`` first, else the first logged name holding ``loss``);
  ``self.log`` and ``self.log_dict`` are recorded rather than sent to a Lightning Trainer;
- the optimizer and scheduler: ``configure_optimizers()`` in any of its single-optimizer forms (an optimizer,
  ``([opt], [sched])``, a dict with ``"lr_scheduler"``); a scheduler with ``"interval": "epoch"`` (Lightning's
  default) steps once per epoch of the campaign's batch, one with ``"step"`` once per update, each
  ``"frequency"`` times less often; none: a constant learning rate, as Lightning would run it;
- the data: the ``LightningDataModule``'s ``prepare_data``, ``setup("fit")``, and the datasets and
  ``collate_fn`` of its ``train_dataloader()`` and ``val_dataloader()`` (``test_dataloader()`` too when it
  has one). The microbatch, the order of examples and accumulation are the campaign's (``[batch]``),
  not the loaders' ``batch_size``/``shuffle``. Each example is named ``train-00017``; a tuple batch's
  positions are named by ``fields`` (``("inputs", "labels")`` for a pair), a dict batch keeps its keys.

Not called: the module's other hooks (``on_train_epoch_end``...), anything reaching ``self.trainer``
(no Lightning Trainer exists: such code fails at its phase, naming the function), several optimizers and
manual optimisation (refused, with the reason). Lightning is never imported by Cockpit itself: the module
is read by what it does (duck typing), so ``lightning`` and ``pytorch_lightning`` both work.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, overload

from ..contract import Batch, Example, Params
from ..notebook.settings import Settings
from ..pilot.task import Task


class LightningHelperError(ValueError):
    """What the Lightning code does that the helper cannot pilot, said in one paragraph."""


def _overrides(obj: Any, name: str) -> bool:
    """Whether the user's class defines ``name`` itself (not Lightning's own empty default)."""
    for cls in type(obj).__mro__:
        if name in cls.__dict__:
            return not str(cls.__module__).startswith(("lightning.", "pytorch_lightning.", "lightning_fabric."))
    return False


def _make(spec: Any, params: Params) -> Any:
    if isinstance(spec, type):
        return spec()
    if callable(spec) and not hasattr(spec, "setup") and not hasattr(spec, "training_step"):
        return spec(params)
    return spec  # an instance


class Item(TypedDict):
    """One example of a Lightning dataset as Cockpit names it: ``{"id": "train-00017", "item": dataset[17]}``."""

    id: str
    item: object  # what the dataset's ``[i]`` returns, handed to its collate_fn as it is


class _Items(Sequence[Item]):
    """A Lightning dataset as Cockpit examples."""

    def __init__(self, split: str, data: Any):
        self.split, self.data = split, data

    def __len__(self) -> int:
        return len(self.data)

    @overload
    def __getitem__(self, i: int) -> Item: ...

    @overload
    def __getitem__(self, i: slice) -> list[Item]: ...

    def __getitem__(self, i: int | slice) -> Item | list[Item]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        return {"id": f"{self.split}-{i:05d}", "item": self.data[i]}


class EveryState(TypedDict):
    """What :class:`_Every` saves in a checkpoint: the inner scheduler's own state and the updates counted."""

    inner: object  # the inner scheduler's state_dict(), as torch saves it
    count: int
    n: int


class _Every:
    """A scheduler stepped once every ``n`` updates (Lightning's ``interval``/``frequency``), resumable."""

    def __init__(self, inner: Any, n: int, why: str):
        self.inner, self.n, self.count, self.why = inner, max(1, int(n)), 0, why

    def step(self) -> None:
        self.count += 1
        if self.count % self.n == 0:
            self.inner.step()

    def state_dict(self) -> EveryState:
        return {"inner": self.inner.state_dict(), "count": self.count, "n": self.n}

    def load_state_dict(self, st: EveryState) -> None:
        self.inner.load_state_dict(st["inner"])
        self.count = int(st["count"])

    def get_last_lr(self) -> Any:
        return self.inner.get_last_lr()

    @property
    def description(self) -> str:
        return f"{type(self.inner).__name__} from configure_optimizers, {self.why}"


def _read_optimizers(conf: Any) -> tuple[Any, Any, str, int]:
    """(optimizer, scheduler or None, interval, frequency) from what configure_optimizers returned."""

    def one(x: Any) -> Any:
        if isinstance(x, (list, tuple)):
            if len(x) != 1:
                raise LightningHelperError(
                    f"configure_optimizers returned {len(x)} optimizers or schedulers; Cockpit pilots one optimizer "
                    "with at most one scheduler (several optimizers need manual optimisation, which it cannot run)"
                )
            return x[0]
        return x

    sched: Any = None
    interval, freq = "epoch", 1
    if isinstance(conf, Mapping):
        opt, sched = conf.get("optimizer"), conf.get("lr_scheduler")
    elif isinstance(conf, tuple) and len(conf) == 2 and isinstance(conf[0], (list, tuple)):
        opt, sched = one(conf[0]), one(conf[1]) if conf[1] else None
    else:
        opt = one(conf)
        if isinstance(opt, Mapping):
            return _read_optimizers(opt)
    if isinstance(sched, Mapping):
        interval, freq = str(sched.get("interval", "epoch")), int(sched.get("frequency", 1))
        sched = sched.get("scheduler")
    if not (hasattr(opt, "param_groups") and callable(getattr(opt, "step", None))):
        raise LightningHelperError(
            f"configure_optimizers returned {type(conf).__name__} without a torch optimizer in it; return an "
            "optimizer, ([optimizer], [scheduler]) or {'optimizer': ..., 'lr_scheduler': ...}"
        )
    if interval not in ("epoch", "step"):
        raise LightningHelperError(
            f"configure_optimizers: lr_scheduler interval {interval!r} is neither 'epoch' nor 'step'"
        )
    return opt, sched, interval, freq


@dataclass
class _Loaders:
    """What the data module's loaders said, kept from ``datasets`` for ``collate`` and the scheduler."""

    collate_fn: Callable[[list[object]], object] | None = None  # the train loader's
    n_train: int | None = None  # examples in the training split (an epoch, for an "epoch" scheduler)
    form: tuple[str, list[str]] | None = None  # the batch's form ("dict", "tuple", "list", "tensor") and its keys


def lightning_task(
    module: Any,
    datamodule: Any,
    *,
    kind: str = "other",
    label_names: Sequence[str] | None = None,
    fields: Sequence[str] | None = None,
    label_key: str = "labels",
    input_key: str = "inputs",
    **task_fields: Any,
) -> Task:
    """A Cockpit task that runs a LightningModule's own steps and optimizers on a LightningDataModule's data."""
    state = _Loaders()
    pending: dict[int, tuple[Any, str, int]] = {}

    def names_for(n: int) -> list[str]:
        if fields is not None:
            if len(fields) != n:
                raise LightningHelperError(f"fields names {len(fields)} positions, the batch has {n}")
            return list(fields)
        return ["inputs", "labels"] if n == 2 else [f"b{i}" for i in range(n)]

    def datasets(params: Params) -> dict[str, _Items]:
        dm = _make(datamodule, params)
        if callable(getattr(dm, "prepare_data", None)):
            dm.prepare_data()
        if callable(getattr(dm, "setup", None)):
            dm.setup("fit")
        train, val = dm.train_dataloader(), dm.val_dataloader()
        state.collate_fn = getattr(train, "collate_fn", None)
        out: dict[str, _Items] = {"train": _Items("train", train.dataset), "val": _Items("val", val.dataset)}
        if _overrides(dm, "test_dataloader"):
            dm.setup("test")
            out["test"] = _Items("test", dm.test_dataloader().dataset)
        state.n_train = len(out["train"])
        return out

    def collate(examples: list[Example], params: Params) -> Batch:
        fn = state.collate_fn
        if fn is None:
            from torch.utils.data import default_collate

            fn = default_collate
        batch = fn([e["item"] for e in examples])
        if isinstance(batch, Mapping):
            state.form = ("dict", list(batch))
            return dict(batch)
        if isinstance(batch, (list, tuple)):
            keys = names_for(len(batch))
            state.form = (type(batch).__name__, keys)
            return dict(zip(keys, batch, strict=True))
        state.form = ("tensor", [input_key])
        return {input_key: batch}

    def lightning_batch(batch: Batch) -> object:
        form, keys = state.form or ("tuple", ["inputs", "labels"])
        if form == "dict":
            return {k: batch[k] for k in keys if k in batch}
        if form == "tensor":
            return batch[keys[0]]
        values = [batch[k] for k in keys]
        return values if form == "list" else tuple(values)

    def build(params: Params) -> Any:
        m = _make(module, params)
        if getattr(m, "automatic_optimization", True) is False:
            raise LightningHelperError(
                f"{type(m).__name__} sets automatic_optimization = False (manual optimisation): Cockpit runs the "
                "optimizer step itself, so it pilots automatic optimisation only"
            )
        logged: dict[str, object] = {}

        def log(name: str, value: object, *args: object, **kwargs: object) -> None:
            logged[name] = value

        def log_dict(values: Mapping[str, object], *args: object, **kwargs: object) -> None:
            logged.update(values)

        m.log, m.log_dict = log, log_dict  # recorded: there is no Lightning Trainer to send them to
        m._cockpit_logged = logged
        return m

    def loss(model: Any, batch: Batch) -> Any:
        import torch

        b = lightning_batch(batch)
        model._cockpit_logged.clear()
        try:
            if torch.is_grad_enabled() or not _overrides(model, "validation_step"):
                out = model.training_step(b, 0)
                where = "training_step"
            else:
                out = model.validation_step(b, 0)
                where = "validation_step"
            if out is None:
                logged = model._cockpit_logged
                key = "val_loss" if "val_loss" in logged else next((k for k in logged if "loss" in k), None)
                if key is None:
                    raise LightningHelperError(
                        f"{where} returned nothing and logged no loss (logged: {', '.join(logged) or 'nothing'}); "
                        "return the loss, or self.log('val_loss', loss)"
                    )
                out = logged[key]
            return out
        finally:
            # Lightning detaches what it logs; kept here, the step's values would hold its graph until the next
            # call (the update gate's attached-state check found it)
            model._cockpit_logged.clear()

    def optimizer(model: Any, params: Params) -> Any:
        opt, sched, interval, freq = _read_optimizers(model.configure_optimizers())
        pending[id(opt)] = (sched, interval, freq)
        return opt

    def scheduler(opt: Any, params: Params) -> Any:
        import torch

        sched, interval, freq = pending.pop(id(opt), (None, "epoch", 1))
        if sched is None:
            none = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
            none.description = "none from configure_optimizers: a constant learning rate, as Lightning runs it"  # type: ignore[attr-defined]
            return none
        if interval == "step":
            return _Every(sched, freq, f"stepped every {freq} update(s)") if freq > 1 else sched
        per_update = Settings(params).per_update
        n = max(1, (per_update if state.n_train is None else state.n_train) // per_update)
        return _Every(sched, n * freq, f"stepped every {n * freq} updates (each {freq} epoch(s) of {n} updates)")

    return Task(
        build_model=build,
        datasets=datasets,
        collate=collate,
        loss=loss,
        kind=kind,
        label_names=list(label_names) if label_names is not None else None,
        label_key=label_key,
        input_key=input_key,
        optimizer=optimizer,
        scheduler=scheduler,
        **task_fields,
    )
