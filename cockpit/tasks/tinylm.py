"""Built-in task: a tiny character-level causal LM trained on instruction -> answer pairs.

The instruction is part of the input but masked out of the loss: only the
answer (and its end marker) is supervised. Data is generated deterministically
from a seed, grouped into "conversations" of four pairs so the leakage gate
has a real unit to check. Small enough to train on a 2-core CPU.
"""

from __future__ import annotations

import random
import string
from typing import TypedDict

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.contract import Batch, Example, Params
from cockpit.pilot.task import Task

PAD, BOS, SEP, EOS = 0, 1, 2, 3
CHARS = string.ascii_lowercase + string.ascii_uppercase + string.digits + " :>-"
STOI = {c: i + 4 for i, c in enumerate(CHARS)}
ITOS = {i: c for c, i in STOI.items()} | {PAD: "", BOS: "^", SEP: "|", EOS: "$"}
VOCAB = len(CHARS) + 4
OPS = ("reverse", "upper", "sort", "double")
PER_GROUP = 4


class Pair(TypedDict):
    """One example as ``datasets`` makes it: an instruction and its answer, in a conversation of ``PER_GROUP``.

    ``collate`` and ``length`` take what the pilot hands back, the contract's :data:`~cockpit.contract.Example`."""

    id: str
    group: str
    instruction: str  # "reverse: word"
    answer: str


def _answer(op: str, word: str) -> str:
    if op == "reverse":
        return word[::-1]
    if op == "upper":
        return word.upper()
    if op == "sort":
        return "".join(sorted(word))
    return "".join(c + c for c in word)[: 2 * len(word)]


def make_split(name: str, n: int, seed: int, offset: int = 0, taken: set[str] | None = None) -> list[Pair]:
    """n examples; an instruction already in ``taken`` (another split) is drawn again, so no
    input appears in two splits."""
    rng = random.Random(f"{seed}-{name}")
    taken = taken if taken is not None else set()
    out: list[Pair] = []
    for i in range(n):
        while True:
            op = OPS[rng.randrange(len(OPS))]
            word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 12)))
            if f"{op}: {word}" not in taken:
                break
        taken.add(f"{op}: {word}")
        out.append(
            {
                "id": f"{name}-{i:05d}",
                "group": f"{name}-conv{(i + offset) // PER_GROUP:05d}",
                "instruction": f"{op}: {word}",
                "answer": _answer(op, word),
            }
        )
    return out


def datasets(params: Params) -> dict[str, list[Pair]]:
    seed = int(params.get("data_seed", 1234))
    taken: set[str] = set()
    return {
        "train": make_split("train", int(params.get("train_examples", 3200)), seed, taken=taken),
        "val": make_split("val", int(params.get("val_examples", 96)), seed, taken=taken),
        "test": make_split("test", int(params.get("test_examples", 96)), seed, taken=taken),
    }


def encode(ex: Example) -> tuple[list[int], int]:
    """Token ids of BOS instruction SEP answer EOS, and the index of SEP."""
    ins = [STOI[c] for c in ex["instruction"]]
    ans = [STOI[c] for c in ex["answer"]]
    return [BOS, *ins, SEP, *ans, EOS], len(ins) + 1


def length(ex: Example) -> int:
    return len(ex["instruction"]) + len(ex["answer"]) + 3


def collate(examples: list[Example], params: Params) -> Batch:
    max_len = int(params.get("max_length", 48))
    rows, labels = [], []
    for ex in examples:
        seq, sep = encode(ex)
        seq = seq[: max_len + 1]  # crop: inputs and targets both fit max_length
        inp, tgt = seq[:-1], seq[1:]
        # position j predicts seq[j+1]; supervise only predictions of answer tokens (after SEP)
        lab = [t if j >= sep else -100 for j, t in enumerate(tgt)]
        rows.append(inp)
        labels.append(lab)
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    lab_t = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r, lab) in enumerate(zip(rows, labels, strict=True)):
        ids[i, : len(r)] = torch.tensor(r)
        lab_t[i, : len(lab)] = torch.tensor(lab)
        mask[i, : len(r)] = 1
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "labels": lab_t,
        "loss_mask": (lab_t != -100).long(),
        "ids": [ex["id"] for ex in examples],
    }


class TinyLM(nn.Module):
    def __init__(self, d_model: int, n_layers: int, n_heads: int, max_length: int, dropout: float, checkpointing: bool):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Embedding(max_length, d_model)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout, batch_first=True, norm_first=True)
            for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB, bias=False)
        self.checkpointing = checkpointing

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        n = input_ids.shape[1]
        pos = torch.arange(n, device=input_ids.device)
        x = self.tok(input_ids) + self.pos(pos)[None]
        causal = torch.triu(torch.full((n, n), float("-inf"), device=x.device), diagonal=1)
        for layer in self.layers:
            if self.checkpointing and self.training:
                x = torch.utils.checkpoint.checkpoint(layer, x, causal, use_reentrant=False)
            else:
                x = layer(x, src_mask=causal)
        return self.head(self.norm(x))


def build_model(params: Params) -> nn.Module:
    return TinyLM(
        int(params.get("d_model", 64)),
        int(params.get("n_layers", 2)),
        int(params.get("n_heads", 4)),
        int(params.get("max_length", 48)),
        float(params.get("dropout", 0.1)),
        bool(params.get("activation_checkpointing", False)),
    )


def loss(model: nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    logits = model(batch["input_ids"], batch["attention_mask"])
    labels = batch["labels"]
    total = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=-100, reduction="sum"
    )
    return total, (labels != -100).sum()


def predict(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Greedy next-token predictions at supervised positions (-100 elsewhere)."""
    logits = model(batch["input_ids"], batch["attention_mask"])
    pred = logits.argmax(-1)
    return torch.where(batch["labels"] != -100, pred, torch.full_like(pred, -100))


def decode(batch: Batch, row: int) -> list[tuple[str, bool]]:
    """The row as text, split into spans that are supervised (True) or input only (False)."""
    ids = batch["input_ids"][row].tolist()
    labels = batch["labels"][row].tolist()
    mask = batch["attention_mask"][row].tolist()
    spans: list[tuple[str, bool]] = []
    # token j (j >= 1) is supervised when position j-1 predicts it
    last_lab = labels[len([m for m in mask if m]) - 1] if any(mask) else -100
    for j, tok in enumerate(ids):
        if not mask[j]:
            continue
        sup = j >= 1 and labels[j - 1] != -100
        _append(spans, ITOS.get(tok, "?"), sup)
    if last_lab != -100:
        _append(spans, ITOS.get(last_lab, "?"), True)
    return spans


def _append(spans: list[tuple[str, bool]], text: str, sup: bool) -> None:
    if spans and spans[-1][1] == sup:
        spans[-1] = (spans[-1][0] + text, sup)
    else:
        spans.append((text, sup))


def control_inputs(params: Params) -> list[Example]:
    """Fixed prompts replayed after export: one per operation, plus the longest shape."""
    pairs = [("reverse", "cockpit"), ("upper", "gate"), ("sort", "pilot"), ("double", "abcdefghijkl")]
    return [
        {"id": f"control-{i}", "group": "control", "instruction": f"{op}: {w}", "answer": _answer(op, w)}
        for i, (op, w) in enumerate(pairs)
    ]


task = Task(
    build_model=build_model,
    datasets=datasets,
    collate=collate,
    loss=loss,
    kind="generation",
    instruction_is_input=True,
    loss_mask_key="loss_mask",
    max_length=lambda p: int(p.get("max_length", 48)),
    length=length,
    vocab_size=lambda p: VOCAB,
    decode=decode,
    predict=predict,
    control_inputs=control_inputs,
    checkpointing=lambda model, on: setattr(model, "checkpointing", on),
    group_unit="conversation",
    name="tinylm",
)
