"""The prediction pass of a validation: metrics and one row per example, from the task's ``predict``.

Training runs make it at every validation (``predictions.jsonl`` keeps the
last one); the pilot's validation phase makes it once, so the first
validation of a paid run holds no surprise.
"""

from __future__ import annotations

from typing import Any, TypedDict

import torch

from ..contract import Batch
from .task import Task
from .trainer import Trainer, UserCodeError, user


class Decoded(TypedDict, total=False):
    """A row rendered by the task's ``decode``: its text, or its input and target (and the prediction put in the
    target's place, when the batch lets it)."""

    text: str
    input: str
    target: str
    prediction: str
    prediction_mode: str
    decode_error: str


class PredictionRow(TypedDict, total=False):
    """One validation example's prediction, as predictions.jsonl holds it (``why`` when there is none to judge)."""

    id: Any  # the example's own id, as its dataset gives it
    prediction: Any  # the label name, the predicted ids, the decoded text, or None
    why: str
    n_targets: int
    n_correct: int
    correct: bool
    target_ids: list[int]
    predicted_ids: list[int]
    target: Any  # the label name (or id), or the decoded target text
    text: str
    input: str
    prediction_mode: str
    decode_error: str
    generated: str
    generated_mode: str


GENERATE_ROWS = 16  # a task that generates: free-running text for the first validation examples (whole batches)


@torch.no_grad()
def predict_pass(tr: Trainer) -> tuple[dict[str, float], list[PredictionRow]]:
    """Metrics and one row per validation example from the task's ``predict`` (if it has one).

    Predictions of a causal LM are teacher-forced next tokens at the supervised
    positions, not free generation; each row says so. A task with ``generate``
    adds the text the model generates from the prompt (greedy, free-running) to
    the rows of the first ``GENERATE_ROWS`` examples, beside the target.
    """
    task = tr.task
    data = list(tr.splits["val"])
    rows: list[PredictionRow] = []
    correct = counted = exact = n_rows = 0
    flat = False
    was = tr.model.training
    tr.model.eval()
    try:
        for i in range(0, len(data), tr.eval_microbatch):
            chunk = data[i : i + tr.eval_microbatch]
            batch = tr.collate(chunk)
            ids = list(batch.get("ids", [e.get("id") for e in chunk]))
            pred = tr.predictions(batch)  # the task's predict(), else the argmax of its logits
            texts = tr.generated(batch) if i < GENERATE_ROWS else None
            first = len(rows)
            lab = batch.get(task.label_key)
            if pred is None:
                rows.extend(
                    {"id": x, "prediction": None, "why": "no predict() and no logits in the model's output"}
                    for x in ids
                )
                continue
            if not torch.is_tensor(lab) or tuple(pred.shape) != tuple(lab.shape):
                for r, x in enumerate(ids):
                    rows.append(
                        {"id": x, "prediction": pred[r].tolist(), "why": "predictions not comparable with the targets"}
                    )
                continue
            pred, lab = pred.detach().cpu(), lab.detach().cpu()
            flat = lab.dim() == 1
            counts = lab != task.ignore_index
            if task.label_convention == "shift_in_loss" and lab.dim() >= 2:
                counts[:, 0] = False  # nothing predicts the first label
            hit = (pred == lab) & counts
            correct += int(hit.sum())
            counted += int(counts.sum())
            rows.extend(_rows(task, batch, ids, pred, lab, counts))
            per_row = counts.view(len(ids), -1).sum(1)
            exact += int(((hit.view(len(ids), -1).sum(1) == per_row) & (per_row > 0)).sum())
            n_rows += len(ids)
            if texts is not None:
                for row, text in zip(rows[first:], texts, strict=False):
                    row["generated"] = text
                    row["generated_mode"] = "free-running greedy generation from the prompt"
    finally:
        tr.model.train(was)
    metrics: dict[str, float] = {}
    if counted:
        if flat:
            metrics["accuracy"] = correct / counted
        else:
            metrics["token_accuracy"] = correct / counted
            metrics["exact_match"] = exact / max(n_rows, 1)
    return metrics, rows


def _rows(
    task: Task, batch: Batch, ids: list[Any], pred: torch.Tensor, lab: torch.Tensor, counts: torch.Tensor
) -> list[PredictionRow]:
    out = []
    names = task.label_names
    swapped = (
        _predicted_batch(task, batch, pred, lab, counts)
        if task.decode is not None and lab.dim() == 2 and task.label_convention == "aligned"
        else None
    )
    cpu = {k: (v.detach().cpu() if torch.is_tensor(v) else v) for k, v in batch.items()}
    for r, x in enumerate(ids):
        m = counts[r]
        t_ids = lab[r][m].tolist() if lab.dim() > 1 else [int(lab[r])] if bool(m) else []
        p_ids = pred[r][m].tolist() if lab.dim() > 1 else [int(pred[r])] if bool(m) else []
        n_ok = sum(1 for a, b in zip(t_ids, p_ids, strict=True) if a == b)
        row: PredictionRow = {
            "id": x,
            "n_targets": len(t_ids),
            "n_correct": n_ok,
            "correct": bool(t_ids) and n_ok == len(t_ids),
            "target_ids": t_ids,
            "predicted_ids": p_ids,
        }
        if names and lab.dim() == 1 and t_ids:
            row["target"] = names[t_ids[0]] if 0 <= t_ids[0] < len(names) else t_ids[0]
            row["prediction"] = names[p_ids[0]] if 0 <= p_ids[0] < len(names) else p_ids[0]
        if task.decode is not None:
            row.update(_decoded(task, cpu, r, swapped))
        out.append(row)
    return out


def _predicted_batch(
    task: Task, batch: Batch, pred: torch.Tensor, lab: torch.Tensor, counts: torch.Tensor
) -> Batch | None:
    """The batch with predictions in place of the targets, when the batch follows the causal
    convention (each counted target is the next input token), so ``decode`` renders predictions.
    Rows that do not follow it are left out (None)."""
    inp = batch.get(task.input_key)
    if not torch.is_tensor(inp) or tuple(inp.shape) != tuple(lab.shape):
        return None
    inp = inp.detach().cpu()
    width = inp.shape[1]
    if width < 2:
        return None
    inner = counts[:, : width - 1]
    mask = batch.get(task.mask_key)
    if torch.is_tensor(mask) and tuple(mask.shape) == tuple(inp.shape):
        inner = inner & mask.detach().cpu()[:, 1:].bool()  # a row's last target has padding after it
    follows = ((inp[:, 1:] == lab[:, : width - 1]) | ~inner).all(1)
    if not bool(follows.any()):
        return None
    new_inp = inp.clone()
    new_lab = lab.clone()
    new_lab[counts] = pred[counts]
    new_inp[:, 1:] = torch.where(inner, pred[:, : width - 1], inp[:, 1:])
    swapped = {k: (v.detach().cpu() if torch.is_tensor(v) else v) for k, v in batch.items()}
    swapped[task.input_key] = new_inp
    swapped[task.label_key] = new_lab
    swapped["_rows_ok"] = follows.tolist()
    return swapped


def _decoded(task: Task, batch: Batch, r: int, swapped: Batch | None) -> Decoded:
    try:
        spans = user("decode", task.decode, batch, r)
    except UserCodeError as exc:
        return {"decode_error": str(exc)}
    if not _decodes(spans):
        return {"decode_error": f"decode returned {_said(spans)}: return the text (a str) or (text, is_target) pairs"}
    out: Decoded = {}
    if isinstance(spans, str):
        out["text"] = spans
    else:
        out["input"] = "".join(t for t, s in spans if not s)
        out["target"] = "".join(t for t, s in spans if s)
    if swapped is not None and swapped["_rows_ok"][r] and not isinstance(spans, str):
        try:
            pspans = user("decode", task.decode, swapped, r)
            if not _decodes(pspans):
                raise UserCodeError("decode", TypeError(f"returned {_said(pspans)}"))
            out["prediction"] = "".join(t for t, s in pspans if s)
            out["prediction_mode"] = "teacher-forced next token at each target position"
        except UserCodeError as exc:
            out["decode_error"] = str(exc)
    return out


def _decodes(spans: Any) -> bool:
    """What ``Task.decode`` must return: a str, or a list of (text, is_target) pairs."""
    if isinstance(spans, str):
        return True
    return isinstance(spans, (list, tuple)) and all(
        isinstance(x, (list, tuple)) and len(x) == 2 and isinstance(x[0], str) for x in spans
    )


def _said(value: Any) -> str:
    return f"a {type(value).__name__}" + (f" ({value!r:.60})" if isinstance(value, (list, tuple, int)) else "")
