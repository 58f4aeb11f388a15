"""Hugging Face transformers as a Cockpit task: what a transformers user already has, in a few lines.

::

    from peft import LoraConfig
    from cockpit.integrations import hf

    task = hf.causal_lm(
        model="base",                          # a local folder (nothing is downloaded), a config, or a function
        tokenizer="base",                      # a local folder, a tokenizer, or a function
        data={"train": "data/train.jsonl", "validation": "data/val.jsonl"},
        prompt="prompt", answer="answer",      # the prompt is masked out of the loss
        adapter=LoraConfig(r=8, target_modules="all-linear", task_type="CAUSAL_LM"),
    )

What each argument may be:

``model``      a local folder (``AutoModelFor...from_pretrained(folder, local_files_only=True)``), a
               ``config.json`` file or a transformers config (``from_config``: the architecture only, random
               init seeded by the run's seed), or a function
               ``params -> model`` (the variant's parameters). Relative paths are taken from the folder of
               the file that calls the helper.
``tokenizer``  a local folder (``AutoTokenizer.from_pretrained``), a tokenizer object, or a function
               returning one. It tokenizes, pads, decodes for ``cockpit inspect`` and the data view,
               and turns generated ids back into text.
``data``       ``{"train": ..., "validation": ...}`` (or a ``DatasetDict``, or a function ``params -> dict``):
               each split a list of dicts, a Hugging Face ``Dataset`` or the path of a JSON-lines file.
               ``validation``/``valid``/``dev``/``eval`` become Cockpit's ``val``. Examples may carry an
               ``id`` and a leakage ``group``; without them each is named by its position.
``adapter``    a PEFT config (``LoraConfig``...) or a function ``params -> config``: the model is wrapped with
               ``peft.get_peft_model``, so the adapter is what trains (the pilot checks the base stays
               frozen, and the export keeps the adapter with the base's identity).
``collator``   a data collator (``DataCollatorWithPadding``...) given the tokenized features; default:
               the prompt/answer masking below (causal LM) or ``tokenizer.pad`` (classification).
``loss``       ``loss(model, batch)`` in any form the Task accepts; default: **the model's own loss**
               (``model(**batch).loss``, a mean over its targets) returned with the number of targets it
               averaged, so Cockpit weighs every target of an accumulated update the same (what
               ``num_items_in_batch`` does in the Hugging Face Trainer).
``max_length`` the cropping length (a campaign's ``max_length`` parameter overrides it).
others         any other :class:`~cockpit.pilot.task.Task` field (``group_unit``, ``control_inputs``...).

Causal LM collate: the prompt is tokenized with the tokenizer's special tokens, the answer without
them and followed by the end-of-sequence token; labels are ``-100`` on the prompt and the padding,
the model shifts them itself (``label_convention = "shift_in_loss"``). A causal LM with a tokenizer
also *generates*: greedy, free-running from the prompt, for as many tokens as the answer has; the
validation predictions, the inspected examples and the replay of the control inputs record the text.

transformers and PEFT are imported when a task built here first needs them, never by ``import cockpit``.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..contract import Batch, Example, Params
from ..pilot.task import Task, TaskExtras

if TYPE_CHECKING:
    import torch

IGNORE = -100
VAL_NAMES = {"validation": "val", "valid": "val", "dev": "val", "eval": "val"}


class HelperError(ValueError):
    """A helper argument that cannot be used, said in one paragraph naming it."""


# --------------------------------------------------------------------------- resolving what the user gave


def _caller_dir(depth: int = 2) -> Path:
    frame = sys._getframe(depth)
    f = frame.f_globals.get("__file__")
    return Path(f).resolve().parent if f else Path.cwd()


def _is_path(x: Any) -> bool:
    return isinstance(x, (str, Path))


def _local(spec: str | Path, base: Path, what: str) -> Path:
    p = Path(spec).expanduser()
    p = p if p.is_absolute() else base / p
    if not p.exists():
        raise HelperError(
            f"{what} {str(spec)!r}: {p} does not exist. Cockpit downloads nothing: give a local folder "
            "(save_pretrained once where the hub is reachable), a config, or a function that builds it."
        )
    return p


def _is_config(x: Any) -> bool:
    return hasattr(x, "model_type") and callable(getattr(x, "to_dict", None)) and not callable(x)


def build_model(spec: Any, params: Params, auto: str, base: Path) -> Any:
    """The model ``spec`` names: a function of the parameters, a config (random init), or a local folder."""
    import transformers

    if _is_config(spec):
        return getattr(transformers, auto).from_config(copy.deepcopy(spec))
    if _is_path(spec):
        path = _local(spec, base, "model")
        if path.is_file() and path.suffix == ".json":  # a config file: the architecture only, random init
            return getattr(transformers, auto).from_config(_config_of(path, base))
        return getattr(transformers, auto).from_pretrained(path, local_files_only=True)
    if callable(spec):
        return spec(params)
    raise HelperError(
        f"model: give a local folder, a transformers config or a function params -> model, not {type(spec).__name__}"
    )


def wrap_adapter(model: Any, adapter: Any, params: Params) -> Any:
    """The model wrapped with its PEFT adapter (the config copied: PEFT fills some fields in)."""
    if adapter is None:
        return model
    cfg = adapter(params) if callable(adapter) and not hasattr(adapter, "peft_type") else adapter
    from peft import get_peft_model

    return get_peft_model(model, copy.deepcopy(cfg))


class Tokenizer:
    """The tokenizer, loaded once per process when first needed."""

    def __init__(self, spec: Any, base: Path):
        self.spec, self.base = spec, base
        self._tok: Any = None

    def __call__(self) -> Any:
        if self._tok is None:
            if _is_path(self.spec):
                from transformers import AutoTokenizer

                self._tok = AutoTokenizer.from_pretrained(
                    _local(self.spec, self.base, "tokenizer"), local_files_only=True
                )
            elif callable(self.spec) and not hasattr(self.spec, "convert_ids_to_tokens"):
                self._tok = self.spec()
            else:
                self._tok = self.spec
        return self._tok

    def pad_id(self) -> int:
        t = self()
        for v in (t.pad_token_id, t.eos_token_id, 0):
            if v is not None:
                return int(v)
        return 0


def read_split(spec: Any, base: Path) -> Sequence[Example]:
    """A split as given, or the rows of a JSON-lines (or JSON list) file."""
    if not _is_path(spec):
        return spec
    path = _local(spec, base, "data file")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" and text.lstrip().startswith("["):
        rows = json.loads(text)
    else:
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as exc:
                    raise HelperError(f"{path}:{n}: not a JSON object ({exc}); one example per line") from None
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
    if bad is not None:
        raise HelperError(f"{path}: example {bad} is a {type(rows[bad]).__name__}, not an object with fields")
    return rows


def splits(data: Any, params: Params, base: Path) -> dict[str, Sequence[Example]]:
    raw = data(params) if callable(data) and not isinstance(data, Mapping) else data
    if not isinstance(raw, Mapping):
        raise HelperError(
            f"data: got a {type(raw).__name__}; give {{'train': ..., 'validation': ...}} (lists of dicts, Hugging Face "
            "Datasets, JSON-lines paths), a DatasetDict, or a function params -> such a dict"
        )
    return {VAL_NAMES.get(str(k), str(k)): read_split(v, base) for k, v in raw.items()}


def _max_length(default: int) -> Callable[[Params], int]:
    return lambda params: int(params.get("max_length") or default)


def _tensors(batch: Batch) -> dict[str, torch.Tensor]:
    import torch

    return {k: v for k, v in batch.items() if torch.is_tensor(v)}


def _own_loss(shifted: bool) -> Callable[[Any, Batch], Any]:
    """The model's own loss, with the number of targets it averaged: (sum, count)."""

    def loss(model: Any, batch: Batch) -> Any:
        out = model(**_tensors(batch))
        labels = batch["labels"]
        count = (labels[:, 1:] != IGNORE).sum() if shifted and labels.dim() == 2 else (labels != IGNORE).sum()
        return out.loss * count, count

    return loss


# --------------------------------------------------------------------------- causal LM


def causal_lm(
    model: Any,
    tokenizer: Any,
    data: Any,
    *,
    prompt: str = "prompt",
    answer: str = "answer",
    adapter: Any = None,
    max_length: int = 128,
    collator: Callable[[list[Example]], Batch] | None = None,
    loss: Callable[[Any, Batch], Any] | None = None,
    generate: bool = True,
    **fields: Any,
) -> Task:
    """A task fine-tuning a causal LM on ``prompt`` -> ``answer`` with the prompt masked out of the loss."""
    base = _caller_dir()
    tok = Tokenizer(tokenizer, base)
    crop = _max_length(max_length)

    def encode(e: Example, limit: int) -> tuple[list[int], list[int]]:
        t = tok()
        for key in (prompt, answer):
            if key not in e:
                raise HelperError(
                    f"example {e.get('id', '?')!r} has no field {key!r} (fields: {', '.join(map(str, e))})"
                )
        p = list(t(str(e[prompt]), add_special_tokens=True)["input_ids"])
        a = list(t(str(e[answer]), add_special_tokens=False)["input_ids"])
        if t.eos_token_id is not None:
            a.append(int(t.eos_token_id))
        return (p + a)[:limit], ([IGNORE] * len(p) + a)[:limit]

    def collate(examples: list[Example], params: Params) -> Batch:
        import torch

        limit = crop(params)
        pairs = [encode(e, limit) for e in examples]
        if collator is not None:
            return dict(collator([{"input_ids": ids, "labels": lab} for ids, lab in pairs]))
        width = max(len(ids) for ids, _ in pairs)
        input_ids = torch.full((len(pairs), width), tok.pad_id(), dtype=torch.long)
        mask = torch.zeros((len(pairs), width), dtype=torch.long)
        labels = torch.full((len(pairs), width), IGNORE, dtype=torch.long)
        for i, (ids, lab) in enumerate(pairs):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            mask[i, : len(ids)] = 1
            labels[i, : len(lab)] = torch.tensor(lab)
        return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}

    def build(params: Params) -> Any:
        return wrap_adapter(build_model(model, params, "AutoModelForCausalLM", base), adapter, params)

    def length(e: Example) -> int:
        ids, _ = encode(e, 1 << 30)
        return len(ids)

    def decode(batch: Batch, row: int) -> list[tuple[str, bool]]:
        return spans(tok(), batch, row)

    def gen(m: Any, batch: Batch) -> list[str]:
        return generate_answers(m, tok(), batch, tok.pad_id())

    fields.setdefault("group_unit", "example")
    return Task(
        build_model=build,
        datasets=lambda params: splits(data, params, base),
        collate=collate,
        loss=loss or _own_loss(shifted=True),
        kind="generation",
        label_convention="shift_in_loss",
        instruction_is_input=True,
        max_length=crop,
        length=length,
        vocab_size=lambda params: len(tok()),
        decode=decode,
        generate=gen if generate else None,
        **fields,
    )


def spans(t: Any, batch: Batch, row: int) -> list[tuple[str, bool]]:
    """The attended tokens of a row as (text, supervised) spans; the text cut where supervision changes.

    Each span is the difference of two decoded prefixes, so word boundaries survive the cut.
    """
    ids = batch["input_ids"][row]
    keep = batch["attention_mask"][row].bool() if "attention_mask" in batch else ids == ids
    lab = batch["labels"][row]
    ids, lab = ids[keep].tolist(), lab[keep].tolist()
    sup = [x != IGNORE for x in lab]
    cuts = [0] + [i for i in range(1, len(ids)) if sup[i] != sup[i - 1]] + [len(ids)]
    out: list[tuple[str, bool]] = []
    prev = ""
    for a, b in zip(cuts, cuts[1:], strict=False):
        text = t.decode(ids[:b])
        piece = text[len(prev) :] if text.startswith(prev) else t.decode(ids[a:b])
        out.append((piece, sup[a]))
        prev = text
    return out


def generate_answers(model: Any, t: Any, batch: Batch, pad: int) -> list[str]:
    """Greedy, free-running generation from each row's prompt, for as many tokens as its answer has."""
    import torch

    out = []
    ids_all, lab_all = batch["input_ids"], batch["labels"]
    mask_all = batch.get("attention_mask")
    for r in range(ids_all.shape[0]):
        keep = mask_all[r].bool() if torch.is_tensor(mask_all) else torch.ones_like(ids_all[r], dtype=torch.bool)
        ids, lab = ids_all[r][keep], lab_all[r][keep]
        sup = (lab != IGNORE).nonzero()
        start = int(sup[0]) if len(sup) else len(ids)
        want = int((lab != IGNORE).sum())
        if start == 0 or want == 0:
            out.append("")
            continue
        prompt = ids[:start].unsqueeze(0)
        got = model.generate(
            input_ids=prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=want,
            do_sample=False,
            pad_token_id=pad,
            eos_token_id=t.eos_token_id,
        )
        out.append(t.decode(got[0, start:].tolist(), skip_special_tokens=True).strip())
    return out


# --------------------------------------------------------------------------- sequence classification


def _config_of(spec: Any, base: Path) -> Any:
    if _is_config(spec):
        return spec
    if _is_path(spec):
        from transformers import AutoConfig

        path = _local(spec, base, "model")
        return AutoConfig.from_pretrained(path.parent if path.is_file() else path, local_files_only=True)
    return None


def sequence_classification(
    model: Any,
    tokenizer: Any,
    data: Any,
    *,
    text: str = "text",
    label: str = "label",
    label_names: Sequence[str] | None = None,
    adapter: Any = None,
    max_length: int = 128,
    collator: Callable[[list[Example]], Batch] | None = None,
    loss: Callable[[Any, Batch], Any] | None = None,
    extras: TaskExtras | None = None,
    **fields: Any,
) -> Task:
    """A task training a sequence classifier on ``text`` -> ``label``, label names from the model's config."""
    base = _caller_dir()
    tok = Tokenizer(tokenizer, base)
    crop = _max_length(max_length)
    if label_names is None:
        cfg = _config_of(model, base)
        id2label = getattr(cfg, "id2label", None) if cfg is not None else None
        if not id2label:
            raise HelperError(
                "sequence_classification: no label names: give label_names=[...], or a model folder or config whose "
                "id2label names the classes (a function building the model cannot be read without building it)"
            )
        label_names = [str(id2label[i]) for i in sorted(int(k) for k in id2label)]
    names = list(label_names)
    index = {n: i for i, n in enumerate(names)}

    def one(e: Example, y: object) -> int:
        if isinstance(y, str):
            if y not in index:
                raise HelperError(f"example {e.get('id', '?')!r}: label {y!r} is none of the label names {names}")
            return index[y]
        if isinstance(y, bool) or not isinstance(y, (int, float)) or y != int(y) or not 0 <= int(y) < len(names):
            raise HelperError(
                f"example {e.get('id', '?')!r}: label {y!r} is not a class: give a label name, a class index "
                f"0..{len(names) - 1}, or for several labels a list of them or a multi-hot list of {len(names)}"
            )
        return int(y)

    def target(e: Example) -> int | list[float]:
        """A class index; or, for a multi-label example (a list), the multi-hot row HF's
        multi_label_classification loss (BCE with logits) takes: a list of 0/1 over every label, or the labels."""
        if label not in e:
            raise HelperError(f"example {e.get('id', '?')!r} has no field {label!r} (fields: {', '.join(map(str, e))})")
        y = e[label]
        if not isinstance(y, (list, tuple)):
            return one(e, y)
        if len(y) == len(names) and all(not isinstance(v, str) and v in (0, 1) for v in y):
            return [float(v) for v in y]  # already multi-hot
        row = [0.0] * len(names)
        for v in y:
            row[one(e, v)] = 1.0
        return row

    def collate(examples: list[Example], params: Params) -> Batch:
        import torch

        t = tok()
        feats = [dict(t(str(e[text]), truncation=True, max_length=crop(params))) for e in examples]
        ys = [target(e) for e in examples]
        multi = [isinstance(y, list) for y in ys]
        if any(multi) and not all(multi):
            raise HelperError(
                f"field {label!r}: some examples of one batch hold one label and others a list; a multi-label task "
                "gives every example a list (an empty one for none)"
            )
        if collator is not None:
            return dict(collator([{**f, "labels": y} for f, y in zip(feats, ys, strict=True)]))
        batch = dict(t.pad(feats, return_tensors="pt"))
        # several labels per example: float multi-hot rows (HF picks BCE with logits for them); else class indices
        batch["labels"] = torch.tensor(ys, dtype=torch.float if any(multi) else torch.long)
        return batch

    def build(params: Params) -> Any:
        return wrap_adapter(build_model(model, params, "AutoModelForSequenceClassification", base), adapter, params)

    def decode(batch: Batch, row: int) -> str:
        ids = batch["input_ids"][row]
        if "attention_mask" in batch:
            ids = ids[batch["attention_mask"][row].bool()]
        return str(tok().decode(ids.tolist(), skip_special_tokens=True))

    fields.setdefault("group_unit", "example")
    extras = extras.copy() if extras else TaskExtras()
    extras.setdefault("label_field", label)
    return Task(
        build_model=build,
        datasets=lambda params: splits(data, params, base),
        collate=collate,
        loss=loss or _own_loss(shifted=False),
        kind="classification",
        label_names=names,
        max_length=crop,
        length=lambda e: len(tok()(str(e[text]))["input_ids"]),
        decode=decode,
        extras=extras,
        **fields,
    )
