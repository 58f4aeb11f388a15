"""Scanning the splits as training sees them: every row collated, what reaches the loss recorded.

The data gate (``phases/data.py``) collates every split in chunks, exactly as
training does, and keeps what it learned per row in a :class:`SplitScan`:
ids, supervised positions, a hash of the input, targets, and the problems
found (ids out of order, targets out of range, padding or instruction in the
loss, lengths over the maximum, targets lost to cropping). The leakage and
overfit phases reuse it through ``Context.scans``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch

from ..contract import Batch, Example, Params
from .inputrange import InputStats
from .task import Task
from .trainer import UserCodeError, user
from .usercode import user_int

CHUNK = 256  # examples per collate call while scanning a split
SCAN_LIMIT = 50_000  # examples scanned per split; beyond that the gate says it stopped short
SCAN_SECONDS = 30.0  # collating budget for all splits together (Task.extras["scan_seconds"])


def ids_text(xs: list[Any], k: int = 5) -> str:
    shown = ", ".join(str(x) for x in xs[:k])
    return shown + (f" (+{len(xs) - k} more)" if len(xs) > k else "")


def batch_ids(batch: Any) -> list[Any]:
    """The examples' ids a batch carries (its ``"ids"`` list), or none: a tensor under that key is the user's data
    under a name the contract keeps for ids (the data gate says so), never a list of ids."""
    got = batch.get("ids") if isinstance(batch, dict) else None
    if torch.is_tensor(got) and got.dim() == 1:
        return got.tolist()  # integer ids a collator tensorised
    return list(got) if isinstance(got, (list, tuple)) else []


def share_text(n: int, total: int) -> str:
    return f"{n} of {total} ({100.0 * n / max(total, 1):.1f}%)"


def rows(t: torch.Tensor) -> torch.Tensor:
    """A per-row view: [B] stays [B, 1], [B, ...] becomes [B, -1]."""
    return t.reshape(t.shape[0], -1)


@dataclass
class SplitScan:
    """What the data gate learned about every scanned row of one split."""

    name: str
    total: int
    ids: list[Any] = field(default_factory=list)
    supervised: list[int] = field(default_factory=list)  # supervised positions per row
    inputs: list[int] = field(default_factory=list)  # hash of the input tokens (attended, not targets)
    targets: list[int | None] = field(default_factory=list)  # classification: the target id
    problems: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    lost: list[Any] = field(default_factory=list)  # ids that lose target tokens to max_length
    longer: list[Any] = field(default_factory=list)  # ids longer than max_length before cropping
    lost_known: bool = True
    ids_from_cockpit: bool = False  # the collate returns no "ids": Cockpit attaches them
    masked_rows: bool = False  # labels aligned with an attention mask: the padding check applies
    labelled: bool = True  # the batch carries targets (False: a self-supervised objective makes its own)
    label_pad_value: int | None = None  # the real token the targets are padded with (no mask beside them)
    mapping: dict[str, dict[int, list[Any]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    floats: InputStats = field(default_factory=InputStats)  # the float fields' statistics (inputrange.py)


def collate(task: Task, params: Params, examples: list[Example]) -> Batch:
    """The task's collate on CPU tensors; a result that is not a dict is the task's error."""
    batch = user("collate", task.collate, examples, params)
    if not isinstance(batch, dict):
        raise UserCodeError(
            "collate", TypeError(f"must return a dict of tensors and 'ids', got {type(batch).__name__}")
        )
    odd = next((k for k in batch if not isinstance(k, str)), None)
    if odd is not None:
        raise UserCodeError(
            "collate", TypeError(f"returned a dict with the key {odd!r}: its keys must be the fields' names (strings)")
        )
    return {k: (v.detach().cpu() if torch.is_tensor(v) else v) for k, v in batch.items()}


def trailing_runs(lab: torch.Tensor, value: int) -> list[int]:
    """Per row, how many positions at its end hold ``value``."""
    hit = (lab == value).flip(1).long()
    return hit.cumprod(1).sum(1).tolist()


def padded_with(lab: torch.Tensor, ignore: int) -> int | None:
    """The token a batch's targets are padded with when it is not the ignore index, else None.

    Padding fills the end of every row shorter than the batch's longest, so the rows end in runs of one
    value whose lengths differ from row to row (at least one of three or more) while some row has none.
    A word that ends in a double letter gives equal runs of two; an end-of-sequence token, runs of one.
    """
    last = lab[:, -1].tolist()
    for value in sorted(set(last)):
        if value == ignore:
            continue
        runs = trailing_runs(lab, int(value))
        ended = [n for n in runs if n >= 2]
        if len(ended) >= 2 and max(ended) >= 3 and len(set(ended)) >= 2 and min(runs) < 2:
            return int(value)
    return None


def mask_fits(mask: torch.Tensor, inp: torch.Tensor) -> bool:
    """A mask has the input's shape, or the input's shape without its feature axes: (B, T) for (B, T, F) audio
    frames or (B, F, T) spectrograms, never another length."""
    want, got = list(inp.shape), list(mask.shape)
    if got == want:
        return True
    if not got or got[0] != want[0] or len(got) >= len(want):
        return False
    rest = iter(want[1:])
    return all(any(x == y for y in rest) for x in got[1:])  # got[1:] is a subsequence of want[1:]


def scan(
    task: Task,
    params: Params,
    split: str,
    data: list[Example],
    ml: int | None,
    budget: float,
    encdec: bool = False,
) -> SplitScan:
    """Collate the split in chunks as training does and record what each row brings to the loss.

    ``encdec``: the model is an encoder-decoder, so the labels are the decoder's and are compared with
    nothing on the encoder's side (its input, its mask).
    """
    s = SplitScan(split, len(data))
    data = data[:SCAN_LIMIT]
    ign = task.ignore_index
    classes = len(task.label_names) if task.label_names else None
    vocab = user_int("vocab_size", task.vocab_size, params) if task.vocab_size else None
    field_name = task.extras.get("label_field", "label")
    for start in range(0, len(data), CHUNK):
        if start and time.monotonic() > budget:
            break  # out of time: the checks say how many rows they saw
        chunk = [e for e in data[start : start + CHUNK] if isinstance(e, dict)]
        if not chunk:
            continue
        batch = collate(task, params, chunk)
        s.floats.add(batch, task.mask_key, task.label_key)
        want = [e.get("id") for e in chunk]
        got = batch.get("ids")
        if got is None:
            s.ids_from_cockpit = True  # the collate returns none: Cockpit knows which examples it gave
        elif torch.is_tensor(got) and got.dim() == 1 and got.tolist() == want:
            pass  # the examples' integer ids, tensorised with the rest of the batch (Hugging Face's collators)
        elif torch.is_tensor(got):
            if not s.problems["ids"]:
                s.problems["ids"].append(
                    f"'ids' holds a tensor {tuple(got.shape)}, where the batch key 'ids' is kept for the examples' "
                    "ids (a list, in order): name the tensor otherwise (input_ids, and Task.input_key if the model "
                    "takes token ids)"
                )
        elif list(got) != want:
            s.problems["ids"].append(
                f"{split}[{start}:{start + len(chunk)}]: ids {ids_text(list(got), 3)} for examples {ids_text(want, 3)}"
            )
        lab = batch.get(task.label_key)
        inp = batch.get(task.input_key)
        mask = batch.get(task.mask_key)
        inp = inp if torch.is_tensor(inp) and inp.dim() >= 1 and inp.shape[0] == len(chunk) else None
        if mask is not None and (not torch.is_tensor(mask) or inp is None or not mask_fits(mask, inp)):
            s.problems["mask"].append(
                f"{task.mask_key} {tuple(mask.shape) if torch.is_tensor(mask) else type(mask).__name__}"
                f" vs {task.input_key} {tuple(inp.shape) if inp is not None else 'missing'}"
            )
            mask = None
        if lab is None and task.kind != "classification":
            # a self-supervised objective (diffusion, contrastive): the loss makes its own targets
            s.labelled = False
            s.ids.extend(want)
            s.supervised.extend([1] * len(chunk))  # each example counts as a whole
            if inp is not None:
                same = mask if mask is not None and tuple(mask.shape) == tuple(inp.shape) else None
                s.inputs.extend(_input_hashes(task, inp, same, None))
            continue
        if not torch.is_tensor(lab):
            s.problems["targets"].append(
                f"batch[{task.label_key!r}] is {'missing' if lab is None else type(lab).__name__}"
            )
            break
        if lab.dim() == 0 or lab.shape[0] != len(chunk):
            s.problems["rows"].append(f"{split}[{start}:]: {tuple(lab.shape)} targets for {len(chunk)} examples")
            break
        if mask is not None and tuple(mask.shape) != tuple(inp.shape if inp is not None else ()):
            mask = None  # a frame mask of (B, T, F) features: right for the model, not comparable with the labels
        sup = rows(lab != ign)
        n_sup = sup.sum(1).tolist()
        s.ids.extend(want)
        s.supervised.extend(int(x) for x in n_sup)
        aligned = not encdec and inp is not None and lab.dim() >= 2 and tuple(lab.shape) == tuple(inp.shape)
        if task.kind == "generation" and inp is not None and not aligned and not encdec:
            s.problems["aligned"].append(f"{split}[{start}:]: labels {tuple(lab.shape)} vs inputs {tuple(inp.shape)}")
        # lengths after collate
        if inp is not None and ml is not None and inp.dim() >= 2:
            lens = (rows(mask).sum(1) if mask is not None else torch.full((len(chunk),), inp.shape[1])).tolist()
            for e, n in zip(chunk, lens, strict=True):
                if n > ml:
                    s.problems["length"].append(f"{e['id']} ({int(n)})")
            if inp.shape[1] > ml and not any(n > ml for n in lens):
                s.problems["length"].append(f"{split}[{start}:] padded to width {inp.shape[1]}")
        # padding and instruction positions that count
        if mask is not None and aligned:
            s.masked_rows = True
            pad = rows((mask == 0) & (lab != ign)).sum(1).tolist()
            for e, n in zip(chunk, pad, strict=True):
                if n:
                    s.problems["padding"].append(f"{e['id']} ({int(n)} positions)")
        if task.kind == "generation" and task.instruction_is_input and aligned:
            lm = batch.get(task.loss_mask_key) if task.loss_mask_key else None
            if torch.is_tensor(lm) and tuple(lm.shape) == tuple(lab.shape):
                bad = rows((lab != ign) & (lm == 0)).sum(1).tolist()
                for e, n in zip(chunk, bad, strict=True):
                    if n:
                        s.problems["instruction"].append(f"{e['id']} ({int(n)} positions)")
            elif task.loss_mask_key:
                s.problems["loss_mask"].append(
                    f"batch[{task.loss_mask_key!r}] is "
                    f"{tuple(lm.shape) if torch.is_tensor(lm) else 'missing'}, labels {tuple(lab.shape)}"
                )
            att = rows(mask != 0) if mask is not None else torch.ones_like(rows(lab), dtype=torch.bool)
            # an instruction that is input only leaves attended positions that do not count
            masked_in = rows(lab == ign).logical_and(att).sum(1).tolist()
            for e, n, k in zip(chunk, masked_in, n_sup, strict=True):
                if n == 0 and k > 0:
                    s.problems["all_supervised"].append(str(e["id"]))
        # targets with no mask beside them (a decoder's, a CTC transcript's): padded with a real token?
        if not aligned and lab.dim() == 2 and not lab.is_floating_point() and lab.shape[1] > 2:
            value = padded_with(lab, ign)
            if value is not None:
                runs = trailing_runs(lab, value)
                s.label_pad_value = value
                s.problems["label_padding"].extend(f"{e['id']} ({n})" for e, n in zip(chunk, runs, strict=True) if n)
        # targets in range
        if task.kind == "classification":
            flat = lab.reshape(len(chunk), -1)[:, 0].tolist() if lab.dim() >= 1 else []
            for e, t in zip(chunk, flat, strict=True):
                t = int(t)
                if t == ign:
                    s.targets.append(None)
                    continue
                s.targets.append(t)
                if t < 0 or (classes is not None and t >= classes):
                    s.problems["range"].append(f"{e['id']} (target {t})")
                name = e.get(field_name)
                if isinstance(name, str):
                    s.mapping[name][t].append(e["id"])
                elif isinstance(name, int) and not isinstance(name, bool) and name != t:
                    s.problems["field"].append(f"{e['id']} ({field_name} {name}, target {t})")
        elif vocab is not None:
            bad = rows((lab != ign) & ((lab < 0) | (lab >= vocab))).any(1).tolist()
            for e, b, row in zip(chunk, bad, rows(lab).tolist(), strict=True):
                if b:
                    s.problems["range"].append(
                        f"{e['id']} (label {next(x for x in row if x != ign and not 0 <= x < vocab)})"
                    )
            if inp is not None and not inp.is_floating_point():  # token ids; audio and images are not
                bad_in = rows((inp < 0) | (inp >= vocab)).any(1).tolist()
                for e, b in zip(chunk, bad_in, strict=True):
                    if b:
                        s.problems["input_range"].append(str(e["id"]))
        # input identity for the leakage gate: the whole attended input, or the prompt when the task masks it
        if inp is not None:
            s.inputs.extend(_input_hashes(task, inp, mask, lab if aligned else None))
        # truncation: rows longer than max_length, and the target tokens cropping took
        if task.kind == "generation" and ml is not None and aligned:
            _truncation(task, params, s, chunk, n_sup, ml)
    return s


def _input_hashes(task: Task, inp: torch.Tensor, mask: torch.Tensor | None, lab: torch.Tensor | None) -> list[int]:
    """One hash per row of what identifies the example's input.

    A task whose instruction is input only (``instruction_is_input``) is
    identified by its prompt: the attended tokens that are not targets, by the
    task's label convention, so the same question with another answer is
    still caught. Any other task by its whole attended input (a window of
    text whose every token is also a target of the position before it).
    """
    from .outputs import target_positions

    tokens = rows(inp).tolist()
    keep = rows(mask != 0).tolist() if mask is not None else [[True] * len(r) for r in tokens]
    if lab is not None and task.instruction_is_input:
        tgt = target_positions(task, lab, inp)
        if tgt is not None:
            prompt = [
                [k and not t for k, t in zip(kr, tr, strict=True)] for kr, tr in zip(keep, tgt.tolist(), strict=True)
            ]
            # a row whose every token is a target has no prompt to compare (the data gate says why): whole input
            keep = [p if any(p) else k for p, k in zip(prompt, keep, strict=True)]
    return [hash(tuple(x for x, k in zip(r, kr, strict=True) if k)) for r, kr in zip(tokens, keep, strict=True)]


def _truncation(task: Task, params: Params, s: SplitScan, chunk: list[Example], n_sup: list[int], ml: int) -> None:
    if task.length is not None:
        lens = [user_int("length", task.length, e) for e in chunk]
        idx = [i for i, n in enumerate(lens) if n > ml]
    else:
        lens, idx = [], list(range(len(chunk)))
    if not idx:
        return
    longest = max(lens) if lens else 4 * ml
    try:
        full = collate(task, params | {"max_length": longest + 2}, [chunk[i] for i in idx])
    except UserCodeError:  # the collate cannot go past its limit: count the longer examples as losing targets
        full = {}
    lab = full.get(task.label_key)
    if not torch.is_tensor(lab) or lab.shape[0] != len(idx):
        s.lost_known = False
        if lens:
            s.longer.extend(chunk[i]["id"] for i in idx)
            s.lost.extend(chunk[i]["id"] for i in idx)
        return
    unc = rows(lab != task.ignore_index).sum(1).tolist()
    width = lab.shape[-1]
    if lens and width <= ml:
        # the collate function ignores params["max_length"]: every longer example counts as losing targets
        s.lost_known = False
        s.longer.extend(chunk[i]["id"] for i in idx)
        s.lost.extend(chunk[i]["id"] for i in idx)
        return
    for i, u in zip(idx, unc, strict=True):
        if lens or u > n_sup[i]:
            if lens:
                s.longer.append(chunk[i]["id"])
            if u > n_sup[i]:
                s.lost.append(chunk[i]["id"])
