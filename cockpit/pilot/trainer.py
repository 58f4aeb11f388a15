"""The training core shared by the pilot and training runs.

One :class:`Trainer` holds a task's model, optimizer, scheduler, grad scaler,
data order and step counter, and knows how to run one *update* (all the
microbatches of one optimizer step, with the accumulation the campaign
declares), evaluate a split, and save or restore its complete state.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .task import Task


class NonFinite(Exception):
    """A loss or gradient that is NaN or infinite."""

    def __init__(self, what: str, value: float | None = None, step: int | None = None):
        self.what, self.value, self.step = what, value, step
        at = f" at update {step}" if step is not None else ""
        super().__init__(f"non-finite {what}{at} ({value})")


class UserCodeError(Exception):
    """An exception raised inside the task's own code; ``where`` names the function."""

    def __init__(self, where: str, exc: BaseException):
        self.where, self.exc = where, exc
        super().__init__(f"{where} raised {type(exc).__name__}: {exc}")


def user(where: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call the task's code, turning its exceptions into UserCodeError (OOM passes through)."""
    try:
        return fn(*args, **kwargs)
    except (torch.OutOfMemoryError, KeyboardInterrupt, NonFinite):
        raise
    except Exception as exc:
        if is_oom(exc) or is_collective_failure(exc):
            raise
        raise UserCodeError(where, exc) from exc


def is_collective_failure(exc: BaseException) -> bool:
    """A distributed collective that timed out or lost its peer (raised inside DDP's forward or backward)."""
    name = type(exc).__name__
    text = str(exc)
    return name in ("DistBackendError", "DistNetworkError", "DistStoreError") or any(
        s in text for s in ("gloo/transport", "Timed out waiting", "Connection closed by peer", "NCCL", "ProcessGroup")
    )


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def resolve_device(name: str | None) -> torch.device:
    name = (name or "auto").lower()
    if name == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:  # pragma: no cover
        pass


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1])}
    state["python_full"] = [random.getstate()[0], random.getstate()[2]]
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np

        st: Any = np.random.get_state()
        state["numpy"] = {"keys": torch.from_numpy(st[1].astype("int64")), "pos": int(st[2])}
    except ImportError:  # pragma: no cover
        pass
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    version, gauss = state["python_full"]
    random.setstate((version, tuple(int(x) for x in state["python"]), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np

        keys = state["numpy"]["keys"].numpy().astype("uint32")
        np.random.set_state(("MT19937", keys, state["numpy"]["pos"], 0, 0.0))


@dataclass
class DataOrder:
    """Deterministic shuffled order over the training split, resumable from (epoch, cursor).

    A global microbatch is ``microbatch * world`` consecutive indices of the
    epoch's permutation; rank ``r`` takes its own slice, so shards are disjoint.
    """

    n: int
    microbatch: int
    seed: int
    drop_last: bool = True
    rank: int = 0
    world: int = 1
    epoch: int = 0
    cursor: int = 0

    def _perm(self, epoch: int) -> list[int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.n, generator=g).tolist()

    def next(self) -> list[int]:
        step = self.microbatch * self.world
        if self.n < (step if self.drop_last else 1):
            raise ValueError(f"training split has {self.n} examples, fewer than one global microbatch ({step})")
        remaining = self.n - self.cursor
        if remaining <= 0 or (self.drop_last and remaining < step):
            self.epoch += 1
            self.cursor = 0
        perm = self._perm(self.epoch)
        chunk = perm[self.cursor : self.cursor + step]
        self.cursor += step
        mine = chunk[self.rank * self.microbatch : (self.rank + 1) * self.microbatch]
        return mine

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "cursor": self.cursor}

    def load(self, st: dict[str, int]) -> None:
        self.epoch, self.cursor = int(st["epoch"]), int(st["cursor"])


def _schedule(kind: str, warmup: int, total: int):
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
        params: dict[str, Any],
        seed: int,
        device: torch.device | None = None,
        splits: dict[str, Sequence[dict[str, Any]]] | None = None,
        total_updates: int | None = None,
        rank: int = 0,
        world: int = 1,
    ):
        self.task, self.params, self.seed = task, dict(params), seed
        self.device = device or resolve_device(params.get("device"))
        self.rank, self.world = rank, world
        self.microbatch = int(params["microbatch"])
        self.accumulation = int(params.get("accumulation") or 1)
        self.eval_microbatch = int(params.get("eval_microbatch") or self.microbatch)
        self.precision = params.get("precision") or "fp32"
        self.total_updates = int(total_updates or params.get("updates") or 1)
        self._splits: dict[str, Sequence[dict[str, Any]]] | None = dict(splits) if splits is not None else None
        self.step = 0
        self.model: Any = None
        self.ddp: Any = None  # the DDP wrapper when distributed; self.model stays the bare module

    @property
    def splits(self) -> dict[str, Sequence[dict[str, Any]]]:
        """The task's splits (loaded by :meth:`load_data`)."""
        if self._splits is None:
            raise RuntimeError("the splits are not loaded yet: call load_data() first")
        return self._splits

    # ---- building

    def load_data(self) -> dict[str, Sequence[dict[str, Any]]]:
        if self._splits is None:
            self._splits = user("datasets", self.task.datasets, self.params)
        self.order = DataOrder(
            len(self.splits["train"]),
            self.microbatch,
            self.seed,
            bool(self.params.get("drop_last", True)),
            self.rank,
            self.world,
        )
        return self.splits

    def build(self) -> None:
        seed_everything(self.seed)
        if self._splits is None:
            self.load_data()
        model = user("build_model", self.task.build_model, self.params)
        self.model = model.to(self.device)
        self.trainable_names = self._trainable_names()
        for name, p in self.model.named_parameters():
            p.requires_grad_(name in self.trainable_names)
        params = [p for n, p in self.model.named_parameters() if n in self.trainable_names]
        opt = (self.params.get("optimizer") or "adamw").lower()
        lr = float(self.params["lr"])
        wd = float(self.params.get("weight_decay") or 0.0)
        self.optimizer: torch.optim.Optimizer
        if opt == "sgd":
            self.optimizer = torch.optim.SGD(
                params, lr=lr, momentum=float(self.params.get("momentum") or 0), weight_decay=wd
            )
        elif opt == "adam":
            self.optimizer = torch.optim.Adam(params, lr=lr, weight_decay=wd)
        else:
            self.optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=wd)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            _schedule(
                self.params.get("schedule") or "constant",
                int(self.params.get("warmup_updates") or 0),
                self.total_updates,
            ),
        )
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.ddp = DistributedDataParallel(self.model, device_ids=ids)  # broadcasts rank 0's weights
        self.scaler = None
        if self.precision == "fp16":
            self.scaler = torch.amp.GradScaler(
                self.device.type, init_scale=float(self.params.get("loss_scale_init") or 2.0**16)
            )

    def _trainable_names(self) -> set[str]:
        names = [n for n, _ in self.model.named_parameters()]
        if self.task.trainable is None:
            return set(names)
        chosen = set(user("trainable", self.task.trainable, self.model))
        unknown = chosen - set(names)
        if unknown:
            raise UserCodeError("trainable", ValueError(f"names no parameter of the model: {sorted(unknown)[:5]}"))
        return chosen

    @property
    def net(self) -> Any:
        """What forward passes go through: the DDP wrapper when there is one."""
        return self.ddp if self.ddp is not None else self.model

    # ---- batches

    def examples(self, split: str, idx: Sequence[int]) -> list[dict[str, Any]]:
        data = self.splits[split]
        return [data[i] for i in idx]

    def collate(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        batch = user("collate", self.task.collate, examples, self.params)
        return {k: (v.to(self.device, non_blocking=True) if torch.is_tensor(v) else v) for k, v in batch.items()}

    def next_microbatches(self) -> list[list[dict[str, Any]]]:
        return [self.examples("train", self.order.next()) for _ in range(self.accumulation)]

    def autocast(self):
        if self.precision in ("bf16", "fp16"):
            dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
            return torch.autocast(self.device.type, dtype=dtype)
        import contextlib

        return contextlib.nullcontext()

    def loss_of(self, batch: dict[str, Any], net: Any = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(value, count): value is a mean when count is None, else a sum over count items."""
        with self.autocast():
            out = user("loss", self.task.loss, net if net is not None else self.net, batch)
        if isinstance(out, tuple):
            if len(out) != 2:
                raise UserCodeError("loss", ValueError("must return a tensor or (sum, count)"))
            s, c = out
            c = torch.as_tensor(c, dtype=torch.float32, device=self.device).detach()
            return s, c
        return out, None

    # ---- one update

    def accumulate(self, microbatches: list[list[dict[str, Any]]], check_finite: bool = True) -> dict[str, Any]:
        """Forward and backward over the microbatches of one update; gradients left in .grad."""
        self.optimizer.zero_grad(set_to_none=True)
        total_sum = 0.0
        total_count: float | None = None
        means: list[float] = []
        n_examples = 0
        n = len(microbatches)
        for i, mb in enumerate(microbatches):
            batch = self.collate(mb)
            n_examples += len(mb)
            value, count = self.loss_of(batch)
            v = float(value.detach())
            if check_finite and not math.isfinite(v):
                raise NonFinite("loss", v, self.step + 1)
            if count is None:
                scaled = value / n
                means.append(v)
            else:
                scaled = value
                total_sum += v
                total_count = (total_count or 0.0) + float(count)
            if self.scaler is not None:
                scaled = self.scaler.scale(scaled)
            sync_ctx = self._no_sync() if (self.ddp is not None and i < n - 1) else None
            if sync_ctx is not None:
                with sync_ctx:
                    scaled.backward()
            else:
                scaled.backward()
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if total_count is not None:
            per_rank = self.reduce_count(total_count)
            for p in self.model.parameters():
                if p.grad is not None:
                    p.grad.div_(per_rank)
            loss = total_sum / max(total_count, 1e-12)
        else:
            loss = sum(means) / max(len(means), 1)
        return {"loss": loss, "examples": n_examples * self.world, "count": total_count}

    def _no_sync(self):
        return self.ddp.no_sync()

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
        if not grads:
            return 0.0
        return float(torch.stack(grads).norm())

    def apply(self, check_finite: bool = True) -> dict[str, Any]:
        clip = self.params.get("grad_clip")
        if clip:
            norm = float(
                torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.grad is not None], float(clip))
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

    def update(self, microbatches: list[list[dict[str, Any]]] | None = None) -> dict[str, Any]:
        mbs = microbatches if microbatches is not None else self.next_microbatches()
        self.model.train()
        out = self.accumulate(mbs)
        out.update(self.apply())
        out["step"] = self.step
        return out

    # ---- evaluation

    @torch.no_grad()
    def evaluate(self, split: str = "val", examples: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
        data = list(examples if examples is not None else self.splits[split])
        was_training = self.model.training
        self.model.eval()
        total, count, means, ids, n_rows = 0.0, 0.0, [], [], 0
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
                ids.extend(batch.get("ids", [e.get("id") for e in chunk]))
                n_rows += len(chunk)
        finally:
            self.model.train(was_training)
        if means:
            loss = sum(v * n for v, n in means) / max(sum(n for _, n in means), 1)
        else:
            loss = total / max(count, 1e-12)
        return {"loss": loss, "ids": ids, "n": n_rows, "was_training": was_training}

    # ---- state

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "step": self.step,
            "rng": rng_state(),
            "data": self.order.state(),
            "seed": self.seed,
        }

    @torch.no_grad()
    def control_outputs(self, controls: list[dict[str, Any]]) -> dict[str, Any]:
        """Loss and predictions of the control inputs in eval mode: what an export must reproduce."""
        was = self.model.training
        self.model.eval()
        try:
            batch = self.collate(controls)
            value, count = self.loss_of(batch, net=self.model)
            loss = float(value) / float(count) if count is not None else float(value)
            predict = self.task.predict
            pred = user("predict", predict, self.model, batch).detach().cpu() if predict else torch.tensor([])
        finally:
            self.model.train(was)
        return {"loss": torch.tensor(loss, dtype=torch.float64), "predictions": pred}

    def load_state_dict(self, st: dict[str, Any]) -> None:
        self.model.load_state_dict(st["model"])
        self.optimizer.load_state_dict(st["optimizer"])
        self.scheduler.load_state_dict(st["scheduler"])
        if self.scaler is not None and st.get("scaler"):
            self.scaler.load_state_dict(st["scaler"])
        self.step = int(st["step"])
        self.order.load(st["data"])
        ranks = st.get("rng_ranks")
        set_rng_state(ranks[self.rank] if ranks and self.rank < len(ranks) else st["rng"])
