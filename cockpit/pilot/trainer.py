"""The training loop shared by the pilot and training runs, around the user's own code.

One :class:`Trainer` holds the task's model *as ``build_model`` returns it*
(what requires grad trains; Cockpit never changes it), the user's optimizer and
scheduler when the task gives them (else Cockpit's built-ins from
``[training]``), the grad scaler, the data order and the step counter. It runs
one *update* (all the microbatches of one optimizer step, with the
accumulation the campaign declares), evaluates a split, and saves or restores
its complete state. What the pilot judges is therefore the user's training,
with Cockpit's loop around it; the README says which part is whose.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import torch
from torch.optim.optimizer import StateDict

from ..contract import Batch, Example, Params
from ..notebook.settings import Settings
from . import adapter as adapter_
from . import frozen as frozen_
from . import loads as loads_
from . import outputs, returned, seeding, splits
from .microsteps import Accumulated, Accumulation, Applied, ControlOutputs, Evaluated, Updated
from .order import DataOrder, Position
from .rng import RngState, rng_state, seed_everything, set_rng_state
from .task import Task
from .usercode import NonFinite, UserCodeError, is_collective_failure, is_oom, resolve_device, user

__all__ = [
    "DataOrder",
    "NonFinite",
    "Trainer",
    "UserCodeError",
    "is_collective_failure",
    "is_oom",
    "resolve_device",
    "rng_state",
    "seed_everything",
    "set_rng_state",
    "user",
]


if TYPE_CHECKING:  # typing.NotRequired is Python 3.11; annotations here are never evaluated
    from typing import NotRequired


class RunBookkeeping(TypedDict, total=False):
    """A training run's own figures in its checkpoint (:mod:`.checkpointing` adds them), so a resumed run goes on
    counting where it stopped (absent: an older checkpoint)."""

    start_loss: float | None
    best: list[float] | None  # [val loss, update]
    since_best: int
    evals: list[dict[str, float]]  # step, val_loss and the metrics of each validation
    examples_seen: int
    trained_s: float
    eval_times: list[float]
    step_times: list[float]


class TrainerState(TypedDict):
    """Everything that changes in training (:meth:`Trainer.state_dict`): what a checkpoint holds."""

    model: dict[str, torch.Tensor]
    model_trainable_only: bool
    optimizer: StateDict  # torch's own state dicts, as torch writes and reads them
    scheduler: StateDict
    scaler: StateDict | None
    step: int
    rng: RngState
    data: Position
    seed: int
    rng_ranks: NotRequired[list[RngState]]  # every rank's RNG, in a distributed run
    run: NotRequired[RunBookkeeping]  # a training run's figures
    stop_reason: NotRequired[str]  # a training run's final checkpoint: why and how it ended
    status: NotRequired[str]


def _schedule(kind: str, warmup: int, total: int) -> Any:
    def f(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if kind == "constant" or total <= warmup:
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        if kind == "cosine":
            return 0.5 * (1 + math.cos(math.pi * progress))
        if kind == "linear":
            return max(0.0, 1 - progress)
        return 1.0

    return f


class Trainer:
    def __init__(
        self,
        task: Task,
        params: Params,
        seed: int,
        device: torch.device | None = None,
        splits: dict[str, Sequence[Example]] | None = None,
        total_updates: int | None = None,
        rank: int = 0,
        world: int = 1,
    ):
        self.task, self.params, self.seed = task, dict(params), seed
        self.settings = s = Settings(self.params)
        self.device = device or resolve_device(s.device)
        self.rank, self.world = rank, world
        self.microbatch = s.microbatch
        self.accumulation = s.accumulation
        self.eval_microbatch = s.eval_microbatch
        self.precision = s.precision
        self.total_updates = int(total_updates or s.updates or 1)
        self._splits: dict[str, Sequence[Example]] | None = dict(splits) if splits is not None else None
        self.step = 0
        self.model: Any = None
        self.ddp: Any = None  # the DDP wrapper when distributed; self.model stays the bare module
        self.trainable_names: set[str] = set()
        self.declared: set[str] | None = None  # Task.trainable's names, when the task declares them
        self.optimizer_source = ""
        self.scheduler_source = ""
        self.checkpointing = ""  # how activation checkpointing was applied ("" = not asked, or no hook)
        self.adapter: adapter_.Adapter | None = None  # an adapter over a frozen base (PEFT, or a small trainable set)
        self.optimizer: Any = None  # built by build(); None while nothing requires grad
        self.scheduler: Any = None
        self.scheduler_start: dict[str, Any] | None = None  # the scheduler's state_dict before its first step
        self.nothing_trains = ""  # what froze the model, when no parameter requires grad
        self.loads: list[loads_.Load] = []  # the state dicts build_model loaded (loads.recorded)
        self.seeded = seeding.Seeded()  # what build_model did to torch's generator (seeding.watched)

    @property
    def splits(self) -> dict[str, Sequence[Example]]:
        """The task's splits (loaded by :meth:`load_data`)."""
        if self._splits is None:
            raise RuntimeError("the splits are not loaded yet: call load_data() first")
        return self._splits

    # ---- building

    def load_data(self) -> dict[str, Sequence[Example]]:
        if self._splits is None:
            self._splits = dict(splits.load(user("datasets", self.task.datasets, self.params)))
        if "train" not in self.splits:
            raise UserCodeError("datasets", KeyError(f"no 'train' split (splits: {', '.join(self.splits) or 'none'})"))
        self.order = DataOrder(
            len(self.splits["train"]),
            self.microbatch,
            self.seed,
            bool(self.params.get("drop_last", True)),
            self.rank,
            self.world,
            accumulation=self.accumulation,
        )
        return self.splits

    def build(self, allow_frozen: bool = False) -> None:
        """The model, optimizer and scheduler. ``allow_frozen``: a model in which nothing requires grad is built
        without an optimizer (``nothing_trains`` says what froze it) so the backward gate can name it; else it is
        the task's error (exit 5), never an empty optimizer (a crash that would read as a bug in Cockpit)."""
        seed_everything(self.seed)
        if self._splits is None:
            self.load_data()
        with loads_.recorded() as self.loads, seeding.watched() as self.seeded:
            model = user("build_model", self.task.build_model, self.params)
        self.model = self.to_device_model(returned.model(model))
        names = {n for n, _ in self.model.named_parameters()}
        self.trainable_names = {n for n, p in self.model.named_parameters() if p.requires_grad}
        if self.task.trainable is not None:
            declared = returned.names(user("trainable", self.task.trainable, self.model))
            unknown = declared - names
            if unknown:
                raise UserCodeError("trainable", ValueError(f"names no parameter of the model: {sorted(unknown)[:5]}"))
            self.declared = declared
        self.nothing_trains = "" if self.trainable_names else frozen_.describe(self.model)
        if self.nothing_trains and not allow_frozen:
            raise UserCodeError("build_model", frozen_.NothingTrains(self.nothing_trains))
        self.adapter = adapter_.detect(self.model, self.trainable_names)
        self._apply_checkpointing()
        if self.nothing_trains:
            self.optimizer, self.scheduler = None, None
            self.optimizer_source = self.scheduler_source = "none: no parameter requires grad"
        else:
            self._build_optimizer()
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.ddp = DistributedDataParallel(self.model, device_ids=ids)  # broadcasts rank 0's weights
        self.scaler = None
        if self.precision == "fp16":
            self.scaler = torch.amp.GradScaler(
                self.device.type, init_scale=float(self.params.get("loss_scale_init") or 2.0**16)
            )

    def _build_optimizer(self) -> None:
        task = self.task
        if task.optimizer is not None:
            opt = returned.optimizer(user("optimizer", task.optimizer, self.model, self.params), task.scheduler is None)
            self.optimizer = opt
            self.optimizer_source = f"the task's optimizer ({type(opt).__name__}, {len(opt.param_groups)} groups)"
        else:
            params = [p for p in self.model.parameters() if p.requires_grad]
            kind = (self.settings.optimizer or "adamw").lower()
            lr = float(self.params["lr"])
            wd = float(self.params.get("weight_decay") or 0.0)
            if kind == "sgd":
                self.optimizer = torch.optim.SGD(params, lr=lr, momentum=self.settings.momentum, weight_decay=wd)
            elif kind == "adam":
                self.optimizer = torch.optim.Adam(params, lr=lr, weight_decay=wd)
            else:
                self.optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=wd)
            self.optimizer_source = f"Cockpit's {kind} from [training] (lr {lr:g}, weight decay {wd:g})"
        if task.scheduler is not None:
            self.scheduler = returned.scheduler(user("scheduler", task.scheduler, self.optimizer, self.params))
            said = getattr(self.scheduler, "description", None)
            self.scheduler_source = (
                f"the task's scheduler ({said if isinstance(said, str) else type(self.scheduler).__name__})"
            )
        else:
            kind = self.params.get("schedule") or "constant"
            warmup = int(self.params.get("warmup_updates") or 0)
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(
                self.optimizer, _schedule(kind, warmup, self.total_updates)
            )
            self.scheduler_source = f"Cockpit's {kind} schedule" + (f", {warmup} warm-up updates" if warmup else "")
        # the schedule before its first update, replayed apart by the update gate (no state_dict: no checkpoint)
        try:
            self.scheduler_start = copy.deepcopy(self.scheduler.state_dict())
        except Exception:
            self.scheduler_start = None

    def _apply_checkpointing(self) -> None:
        """Activation checkpointing through a hook the model or the task has; none found: it had no effect."""
        if not self.params.get("activation_checkpointing"):
            return
        enable = getattr(self.model, "gradient_checkpointing_enable", None)
        if callable(enable) and getattr(self.model, "supports_gradient_checkpointing", True):
            user("gradient_checkpointing_enable", enable)
            self.checkpointing = "the model's gradient_checkpointing_enable()"
        elif self.task.checkpointing is not None:
            user("checkpointing", self.task.checkpointing, self.model, True)
            self.checkpointing = "Task.checkpointing(model, True)"

    @property
    def net(self) -> Any:
        """What forward passes go through: the DDP wrapper when there is one."""
        return self.ddp if self.ddp is not None else self.model

    # ---- batches

    def examples(self, split: str, idx: Sequence[int]) -> list[Example]:
        data = self.splits[split]
        return [data[i] for i in idx]

    def collate(self, examples: list[Example]) -> Batch:
        batch = user("collate", self.task.collate, examples, self.params)
        if not isinstance(batch, dict):
            raise UserCodeError("collate", TypeError(f"must return a dict of tensors, got {type(batch).__name__}"))
        out = {k: (self.to_device(v) if torch.is_tensor(v) else v) for k, v in batch.items()}
        if "ids" not in out:  # the collate need not carry ids: Cockpit knows which examples it gave
            out["ids"] = [e.get("id") if isinstance(e, dict) else None for e in examples]
        return out

    # the model and a batch's tensors as the device holds them (the estimate models both moves without the GPU)
    def to_device_model(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.to(self.device)

    def to_device(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.device, non_blocking=True)

    def next_microbatches(self) -> list[list[Example]]:
        return [self.examples("train", idx) for idx in self.order.next_update()]

    def autocast(self) -> Any:
        if self.precision in ("bf16", "fp16"):
            dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
            return torch.autocast(self.device.type, dtype=dtype)
        return contextlib.nullcontext()

    def loss_call(self, batch: Batch, net: Any = None) -> outputs.LossOut:
        """The task's loss on a batch, read in whichever form it comes (see ``cockpit.pilot.outputs``)."""
        fn = self.task.loss if self.task.loss is not None else outputs.default_loss
        with self.autocast():
            out = user("loss", fn, net if net is not None else self.net, batch)
        return outputs.read_loss(out, self.device)

    def loss_of(self, batch: Batch, net: Any = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(value, count): value is a mean when count is None, else a sum over count items."""
        lo = self.loss_call(batch, net)
        return lo.value, lo.count

    def predictions(self, batch: Batch) -> torch.Tensor | None:
        """Predictions laid out like the labels: the task's predict(), else the argmax of the model's logits."""
        if self.task.predict is not None:
            with self.autocast():
                pred = user("predict", self.task.predict, self.model, batch)
            return pred if torch.is_tensor(pred) else None
        labels = batch.get(self.task.label_key)
        if not torch.is_tensor(labels):
            return None
        with outputs.capture(self.model) as cap:
            self.loss_call(batch, net=self.model)
        logits = cap.logits
        return outputs.aligned_predictions(self.task, logits, labels) if logits is not None else None

    # ---- one update

    def accumulate(
        self, microbatches: list[list[Example]], check_finite: bool = True, weights: list[float] | None = None
    ) -> Accumulated:
        """Forward and backward over the microbatches of one update; gradients left in .grad.

        A mean loss is divided by the number of microbatches (a user's loop's ``loss / accumulation``);
        ``weights`` replaces that division (the accumulation gate measures an even weighting with it).
        """
        self.optimizer.zero_grad(set_to_none=True)
        acc = Accumulation(self, microbatches, weights=weights, check_finite=check_finite)
        acc.rest()
        return acc.finish()

    def reduce_count(self, count: float) -> float:
        """Under DDP gradients are averaged over ranks; normalise by the mean count per rank."""
        if self.ddp is None:
            return count
        import torch.distributed as dist

        t = torch.tensor([count], device=self.device, dtype=torch.float64)
        dist.all_reduce(t)
        return float(t.item()) / self.world

    def grad_norm(self) -> float:
        grads = [p.grad.detach().float().norm() for p in self.model.parameters() if p.grad is not None]
        return float(torch.stack(grads).norm()) if grads else 0.0

    def apply(self, check_finite: bool = True) -> Applied:
        clip = self.settings.grad_clip  # 0 (or absent): no clipping
        if clip > 0:
            norm = float(
                torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.grad is not None], clip)
            )
        else:
            norm = self.grad_norm()
        if check_finite and not math.isfinite(norm) and self.scaler is None:
            raise NonFinite("gradient norm", norm, self.step + 1)
        lr = float(self.optimizer.param_groups[0]["lr"])
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        return {"grad_norm": norm if math.isfinite(norm) else None, "lr": lr}

    def update(self, microbatches: list[list[Example]] | None = None) -> Updated:
        mbs = microbatches if microbatches is not None else self.next_microbatches()
        self.model.train()
        acc = self.accumulate(mbs)
        applied = self.apply()
        return {**acc, **applied, "step": self.step}

    # ---- evaluation

    @torch.no_grad()
    def evaluate(self, split: str = "val", examples: Sequence[Example] | None = None) -> Evaluated:
        data = list(examples if examples is not None else self.splits[split])
        was_training = self.model.training
        self.model.eval()
        total, count, n_rows = 0.0, 0.0, 0
        ids: list[Any] = []
        means: list[tuple[float, int]] = []
        try:
            for i in range(0, len(data), self.eval_microbatch):
                chunk = data[i : i + self.eval_microbatch]
                batch = self.collate(chunk)
                value, c = self.loss_of(batch, net=self.model)
                if c is None:
                    means.append((float(value), len(chunk)))
                else:
                    total += float(value)
                    count += float(c)
                ids.extend(batch["ids"])
                n_rows += len(chunk)
        finally:
            self.model.train(was_training)
        if means:
            loss = sum(v * n for v, n in means) / max(sum(n for _, n in means), 1)
        else:
            loss = total / max(count, 1e-12)
        return {"loss": loss, "ids": ids, "n": n_rows, "was_training": was_training}

    @torch.no_grad()
    def generated(self, batch: Batch) -> list[str] | None:
        """The text the model generates for each row of the batch (the task's ``generate``), or None."""
        if self.task.generate is None:
            return None
        was = self.model.training
        self.model.eval()
        try:
            with self.autocast():
                texts = user("generate", self.task.generate, self.model, batch)
        finally:
            self.model.train(was)
        if not isinstance(texts, (list, tuple)) or not all(isinstance(t, str) for t in texts):
            raise UserCodeError(
                "generate", TypeError(f"must return a list of str (one per row), got {type(texts).__name__}")
            )
        return list(texts)

    @torch.no_grad()
    def control_outputs(self, controls: list[Example]) -> ControlOutputs:
        """Loss, predictions (and generated text) of the control inputs in eval mode: what an export must reproduce."""
        was = self.model.training
        self.model.eval()
        saved = rng_state()  # under one RNG state, so an objective that draws noise replays it in a new process
        seed_everything(self.seed)
        try:
            batch = self.collate(controls)
            value, count = self.loss_of(batch, net=self.model)
            loss = float(value) / float(count) if count is not None else float(value)
            pred = self.predictions(batch)
            texts = self.generated(batch)
        finally:
            self.model.train(was)
            set_rng_state(saved)
        out: ControlOutputs = {
            "loss": torch.tensor(loss, dtype=torch.float64),
            "predictions": pred.detach().cpu() if pred is not None else torch.tensor([]),
        }
        if texts is not None:
            out["generated"] = texts
        return out

    # ---- state

    def frozen_keys(self) -> set[str]:
        """State-dict keys of parameters that do not train (tied weights under every name they have)."""
        return {
            k
            for k, v in self.model.state_dict(keep_vars=True).items()
            if isinstance(v, torch.nn.Parameter) and not v.requires_grad
        }

    def state_dict(self, trainable_only: bool = False) -> TrainerState:
        """Everything that changes in training. ``trainable_only``: the model's frozen parameters are left out
        (an adapter's checkpoint); loading rebuilds them with ``build_model``, as they never change."""
        model = self.model.state_dict()
        if trainable_only:
            frozen = self.frozen_keys()
            model = {k: v for k, v in model.items() if k not in frozen}
        return {
            "model": model,
            "model_trainable_only": trainable_only,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "step": self.step,
            "rng": rng_state(),
            "data": self.order.state(),
            "seed": self.seed,
        }

    def load_state_dict(self, st: TrainerState) -> None:
        if st.get("model_trainable_only"):
            got = self.model.load_state_dict(st["model"], strict=False)
            missing = sorted(set(got.missing_keys) - self.frozen_keys())
            if missing or got.unexpected_keys:
                raise RuntimeError(
                    "a trainable-only checkpoint does not match the model build_model made: "
                    + (f"missing trainable {missing[:5]}" if missing else "")
                    + (f" unexpected {list(got.unexpected_keys)[:5]}" if got.unexpected_keys else "")
                )
        else:
            self.model.load_state_dict(st["model"])
        self.optimizer.load_state_dict(st["optimizer"])
        self.scheduler.load_state_dict(st["scheduler"])
        scaler = st.get("scaler")
        if self.scaler is not None and scaler:
            self.scaler.load_state_dict(scaler)
        self.step = int(st["step"])
        self.order.load(st["data"])
        ranks = st.get("rng_ranks")
        set_rng_state(ranks[self.rank] if ranks and self.rank < len(ranks) else st["rng"])
