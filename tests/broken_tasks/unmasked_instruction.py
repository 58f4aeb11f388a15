"""tinylm whose collate forgets to mask the instruction out of the labels.

``task`` still computes the answer span as ``loss_mask`` (so the data gate can
name the positions); ``no_loss_mask`` declares none, and the gate notices that
every attended position is supervised.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from cockpit.tasks import tinylm as t


def collate(examples: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    max_len = int(params.get("max_length", 48))
    rows, labels, spans = [], [], []
    for ex in examples:
        seq, sep = t.encode(ex)
        seq = seq[: max_len + 1]
        inp, tgt = seq[:-1], seq[1:]
        rows.append(inp)
        labels.append(list(tgt))  # the bug: every next token counts, instruction included
        spans.append([1 if j >= sep else 0 for j in range(len(tgt))])
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), t.PAD, dtype=torch.long)
    lab = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    answer = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r, lb, sp) in enumerate(zip(rows, labels, spans, strict=True)):
        ids[i, : len(r)] = torch.tensor(r)
        lab[i, : len(lb)] = torch.tensor(lb)
        mask[i, : len(r)] = 1
        answer[i, : len(sp)] = torch.tensor(sp)
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "labels": lab,
        "loss_mask": answer,
        "ids": [ex["id"] for ex in examples],
    }


task = replace(t.task, collate=collate, name="unmasked_instruction")
no_loss_mask = replace(t.task, collate=collate, loss_mask_key=None, name="unmasked_instruction_no_loss_mask")
