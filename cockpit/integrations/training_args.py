"""The settings of a Hugging Face ``TrainingArguments`` as the campaign's ``[batch]`` and ``[training]``.

``cockpit new NAME --from-training-args FILE.json`` reads the JSON a transformers user already has
(``training_args.to_json_string()``, or a hand-written subset of its fields) so that the pilot tests what
the user would have run: per-device batch, gradient accumulation, learning rate and weight decay, scheduler
and warm-up, bf16/fp16, gradient checkpointing, gradient clipping, max steps or epochs, evaluation and save
intervals, ``dataloader_drop_last``. What Cockpit cannot express (another scheduler, another optimizer,
label smoothing, a warm-up ratio without a known number of updates...) is never dropped silently: each is
named in ``notes`` with what to do. No transformers import: the file is plain JSON.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, TypeVar

from ..schema import JSON, JSONObject

SCHEDULES = {"linear": "linear", "cosine": "cosine", "constant": "constant", "constant_with_warmup": "constant"}
OPTIMIZERS = {
    "adamw_torch": "adamw",
    "adamw_torch_fused": "adamw",
    "adamw_hf": "adamw",
    "adamw": "adamw",
    "adamw_apex_fused": "adamw",
    "sgd": "sgd",
}
HF_DEFAULTS: dict[str, JSON] = {
    "per_device_train_batch_size": 8,
    "per_device_eval_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "learning_rate": 5e-5,
    "weight_decay": 0.0,
    "lr_scheduler_type": "linear",
    "warmup_steps": 0,
    "max_steps": -1,
    "num_train_epochs": 3.0,
    "max_grad_norm": 1.0,
    "dataloader_drop_last": False,
    "optim": "adamw_torch",
}
UNSUPPORTED = {
    "label_smoothing_factor": "the Hugging Face Trainer smooths labels outside the model's loss; do it in the task's loss",
    "neftune_noise_alpha": "NEFTune noise is added by the Hugging Face Trainer; add it in the task's model or loss",
    "deepspeed": "DeepSpeed is not Cockpit's loop; pilot the model without it, or its memory will differ",
    "fsdp": "FSDP sharding is not piloted; [selection] strategy records it, the pilot runs one process per rank",
    "torch_compile": "torch.compile is not applied by Cockpit; compile inside build_model to pilot it",
}


N = TypeVar("N", int, float)


class TrainingArgsError(ValueError):
    """A TrainingArguments file that cannot be read, said in one paragraph."""


class BatchTable(TypedDict, total=False):
    """The campaign's ``[batch]`` as converted: the microbatch and accumulation, and one budget."""

    microbatch: int
    accumulation: int
    eval_microbatch: int | None  # None only when the file says null (tomli_w then refuses it, naming it)
    drop_last: bool
    dataset_size: int
    updates: int  # max_steps, when set
    epochs: float  # num_train_epochs otherwise (an int when whole)


class TrainingTable(TypedDict, total=False):
    """The campaign's ``[training]`` as converted."""

    lr: float
    weight_decay: float | None  # None only when the file says null
    optimizer: str
    schedule: str
    warmup_updates: int
    precision: str
    activation_checkpointing: bool
    grad_clip: float
    device: str


@dataclass
class Converted:
    batch: BatchTable = field(default_factory=BatchTable)
    training: TrainingTable = field(default_factory=TrainingTable)
    validation: dict[str, int] = field(default_factory=dict)  # every_updates
    checkpoints: dict[str, int] = field(default_factory=dict)  # every_updates, keep
    notes: list[str] = field(default_factory=list)  # what could not be carried over, and what to do
    seed: int | None = None


def read(path: Path | str) -> JSONObject:
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TrainingArgsError(f"{p}: cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise TrainingArgsError(
            f"{p}: not JSON ({exc}); write it with `open(FILE, 'w').write(training_args.to_json_string())` "
            "(training_args.bin is a pickle, which Cockpit never loads)"
        ) from None
    if not isinstance(doc, dict):
        raise TrainingArgsError(f"{p}: a JSON {type(doc).__name__}; TrainingArguments are an object of settings")
    return doc


def _int_of(value: JSON, key: str, src: str) -> int:
    """A setting's value as an int (a number or a numeral), or the error naming it."""
    if isinstance(value, (str, int, float)):
        try:
            return int(value)
        except ValueError:
            pass
    raise TrainingArgsError(f"{src}: {key} = {value!r} is not a int")


def _float_of(value: JSON, key: str, src: str) -> float:
    if isinstance(value, (str, int, float)):
        try:
            return float(value)
        except ValueError:
            pass
    raise TrainingArgsError(f"{src}: {key} = {value!r} is not a float")


def _int(doc: JSONObject, key: str, src: str) -> int | None:
    """The setting, or Hugging Face's default for it; None when neither says."""
    value = doc.get(key, HF_DEFAULTS.get(key))
    return None if value is None else _int_of(value, key, src)


def _float(doc: JSONObject, key: str, src: str) -> float | None:
    value = doc.get(key, HF_DEFAULTS.get(key))
    if value is None:
        return None
    out = _float_of(value, key, src)
    if not math.isfinite(out):
        raise TrainingArgsError(f"{src}: {key} = {value!r} is not finite")
    return out


def _given(value: N | None, key: str, kind: str, src: str) -> N:
    """A setting the conversion cannot do without: a null in the file is said, naming it."""
    if value is None:
        raise TrainingArgsError(f"{src}: {key} = None is not a {kind}")
    return value


def convert(doc: JSONObject, src: str = "TrainingArguments", dataset_size: int | None = None) -> Converted:
    """[batch], [training], [validation] and [checkpoints] from TrainingArguments, with notes on the rest."""
    c = Converted()
    micro = _given(_int(doc, "per_device_train_batch_size", src), "per_device_train_batch_size", "int", src)
    accum = _given(_int(doc, "gradient_accumulation_steps", src), "gradient_accumulation_steps", "int", src)
    if micro < 1 or accum < 1:
        raise TrainingArgsError(f"{src}: per_device_train_batch_size and gradient_accumulation_steps must be >= 1")
    c.batch = {
        "microbatch": micro,
        "accumulation": accum,
        "eval_microbatch": _int(doc, "per_device_eval_batch_size", src),
        "drop_last": bool(doc.get("dataloader_drop_last", False)),
    }
    if dataset_size:
        c.batch["dataset_size"] = int(dataset_size)
    max_steps = _int(doc, "max_steps", src)
    updates: int | None = None
    if max_steps and max_steps > 0:
        c.batch["updates"] = updates = max_steps
    else:
        epochs = _given(_float(doc, "num_train_epochs", src), "num_train_epochs", "float", src)
        c.batch["epochs"] = int(epochs) if float(epochs).is_integer() else epochs
        if dataset_size:
            per = micro * accum
            per_epoch = dataset_size // per if c.batch["drop_last"] else -(-dataset_size // per)
            updates = max(1, math.ceil(per_epoch * epochs))
    t: TrainingTable = {
        "lr": _given(_float(doc, "learning_rate", src), "learning_rate", "float", src),
        "weight_decay": _float(doc, "weight_decay", src),
    }
    optim = str(doc.get("optim", HF_DEFAULTS["optim"])).lower()
    if optim in OPTIMIZERS:
        t["optimizer"] = OPTIMIZERS[optim]
    else:
        t["optimizer"] = "adamw"
        c.notes.append(
            f"optim = {optim!r} has no Cockpit equivalent (adamw, sgd): give the task an optimizer(model, params) "
            "that builds it, or the pilot measures AdamW's memory instead"
        )
    for key, default in (("adam_beta1", 0.9), ("adam_beta2", 0.999), ("adam_epsilon", 1e-8)):
        if key in doc and _float_of(doc[key], key, src) != default:
            c.notes.append(
                f"{key} = {doc[key]} differs from the default Cockpit's AdamW uses ({default}): build the optimizer "
                "in the task (Task.optimizer) to keep it"
            )
    sched = str(doc.get("lr_scheduler_type", HF_DEFAULTS["lr_scheduler_type"])).lower()
    if sched.startswith("schedulertype."):
        sched = sched.split(".", 1)[1]
    if sched in SCHEDULES:
        t["schedule"] = SCHEDULES[sched]
    else:
        t["schedule"] = "constant"
        c.notes.append(
            f"lr_scheduler_type = {sched!r} is not one of Cockpit's schedules (constant, linear, cosine): give the "
            "task a scheduler(optimizer, params) building it, or the pilot runs a constant rate"
        )
    warmup = doc.get("warmup_steps", 0) or 0
    ratio = _float_of(doc.get("warmup_ratio", 0.0) or 0.0, "warmup_ratio", src)
    if isinstance(warmup, float) and 0 < warmup < 1:  # transformers 5: a float below 1 is a ratio
        ratio, warmup = warmup, 0
    warmup_updates = _int_of(warmup, "warmup_steps", src)
    if warmup_updates > 0:
        t["warmup_updates"] = warmup_updates
    elif ratio > 0:
        if updates is not None:
            t["warmup_updates"] = math.ceil(ratio * updates)
        else:
            c.notes.append(
                f"warmup_ratio = {ratio:g} of an epoch budget: the number of updates depends on the dataset size; "
                "give --dataset-size N, or set [training] warmup_updates yourself"
            )
    bf16, fp16 = bool(doc.get("bf16")), bool(doc.get("fp16"))
    if bf16 and fp16:
        raise TrainingArgsError(f"{src}: bf16 and fp16 are both true; TrainingArguments refuses that too")
    t["precision"] = "bf16" if bf16 else "fp16" if fp16 else "fp32"
    t["activation_checkpointing"] = bool(doc.get("gradient_checkpointing", False))
    t["grad_clip"] = _float(doc, "max_grad_norm", src) or 0.0
    if doc.get("use_cpu") or doc.get("no_cuda"):
        t["device"] = "cpu"
    c.training = t
    strategy = str(doc.get("eval_strategy", doc.get("evaluation_strategy", "no"))).lower().rsplit(".", 1)[-1]
    if strategy == "steps" and doc.get("eval_steps"):
        steps = _float_of(doc["eval_steps"], "eval_steps", src)
        if 0 < steps < 1 and updates:
            steps = math.ceil(steps * updates)
        c.validation["every_updates"] = max(1, int(steps))
    elif strategy == "epoch" and updates and c.batch.get("epochs"):
        c.validation["every_updates"] = max(1, int(updates // max(1.0, float(c.batch["epochs"]))))
    elif strategy == "epoch":
        c.notes.append("eval_strategy = 'epoch': give --dataset-size N to turn an epoch into updates for [validation]")
    save = str(doc.get("save_strategy", "steps")).lower().rsplit(".", 1)[-1]
    if save == "steps" and doc.get("save_steps"):
        c.checkpoints["every_updates"] = max(1, int(_float_of(doc["save_steps"], "save_steps", src)))
    if doc.get("save_total_limit"):
        c.checkpoints["keep"] = max(1, _int_of(doc["save_total_limit"], "save_total_limit", src))
    for key, why in UNSUPPORTED.items():
        value = doc.get(key)
        if value not in (None, False, 0, 0.0, "", [], {}):
            c.notes.append(f"{key} = {value!r}: {why}")
    if doc.get("seed") is not None:
        c.seed = _int_of(doc["seed"], "seed", src)
    return c
