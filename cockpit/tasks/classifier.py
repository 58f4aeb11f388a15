"""Built-in task: a small topic classifier with a label-name <-> id mapping.

Sentences are generated deterministically from fixed word lists: each
*source document* has one topic and yields a few sentences (the examples),
mixing topic words, shared filler words and some words of other topics, so the
task is learnable but not trivial. The source document is the leakage unit:
every sentence of a document lands in the same split. Examples carry their
label *name*; the collate function maps it to an id through ``LABEL_IDS``,
and ``label_names`` is the inverse, so the data gate can check that the two
agree. A bag-of-words model (masked mean of embeddings, then an MLP) trains in
seconds on a 2-core CPU. Nothing is downloaded.
"""

from __future__ import annotations

import random
from typing import TypedDict

import torch
import torch.nn.functional as F
from torch import nn

from cockpit.contract import Batch, Example, Params
from cockpit.pilot.task import Task

LABEL_NAMES = ["sports", "weather", "music", "food"]
LABEL_IDS = {name: i for i, name in enumerate(LABEL_NAMES)}


def _words(text: str) -> list[str]:
    return text.split()


TOPIC_WORDS = {
    "sports": _words(
        "match goal team score coach league player referee stadium season win defeat striker "
        "tournament penalty keeper sprint medal race final"
    ),
    "weather": _words(
        "rain storm cloud wind snow sunny forecast thunder humid frost drizzle breeze fog "
        "temperature pressure hail degrees mild heatwave cold"
    ),
    "music": _words(
        "song album guitar drum concert melody chorus band singer piano rhythm tune lyrics "
        "violin orchestra tempo chord stage record bass"
    ),
    "food": _words(
        "bread soup recipe cheese oven spice salad pasta dessert kitchen flavour sauce bake "
        "fruit grill butter pepper dinner chef tomato"
    ),
}
FILLER = _words(
    "the a this that today yesterday really quite very and but then again new old big small "
    "good bad long short early late people city week night morning they we it was is"
)

PAD, CLS, UNK = 0, 1, 2
WORDS = sorted({w for ws in TOPIC_WORDS.values() for w in ws} | set(FILLER))
STOI = {w: i + 3 for i, w in enumerate(WORDS)}
ITOS = {i: w for w, i in STOI.items()} | {PAD: "<pad>", CLS: "<cls>", UNK: "<unk>"}
VOCAB = len(WORDS) + 3
PER_SOURCE = 4


class Sentence(TypedDict):
    """One example as ``datasets`` makes it: a sentence of a source document, with its topic's *name*.

    ``collate`` (which maps the name to an id) and ``length`` take what the pilot hands back, the contract's
    :data:`~cockpit.contract.Example`."""

    id: str
    group: str  # the source document, the leakage unit
    text: str
    label: str  # one of LABEL_NAMES


def make_split(name: str, n: int, seed: int) -> list[Sentence]:
    """``n`` sentences from ``ceil(n / PER_SOURCE)`` source documents, all named after the split."""
    rng = random.Random(f"classifier-{seed}-{name}")
    out: list[Sentence] = []
    for i in range(n):
        source = i // PER_SOURCE
        if i % PER_SOURCE == 0:
            label = LABEL_NAMES[rng.randrange(len(LABEL_NAMES))]
        words = []
        for _ in range(rng.randint(4, 14)):
            r = rng.random()
            if r < 0.4:
                words.append(rng.choice(TOPIC_WORDS[label]))
            elif r < 0.5:
                other = LABEL_NAMES[rng.randrange(len(LABEL_NAMES))]
                words.append(rng.choice(TOPIC_WORDS[other]))
            else:
                words.append(rng.choice(FILLER))
        if not any(w in TOPIC_WORDS[label] for w in words):  # every sentence says something about its topic
            words[rng.randrange(len(words))] = rng.choice(TOPIC_WORDS[label])
        out.append(
            {"id": f"{name}-{i:05d}", "group": f"{name}-src{source:04d}", "text": " ".join(words), "label": label}
        )
    return out


def datasets(params: Params) -> dict[str, list[Sentence]]:
    seed = int(params.get("data_seed", 7))
    return {
        "train": make_split("train", int(params.get("train_examples", 2048)), seed),
        "val": make_split("val", int(params.get("val_examples", 128)), seed),
        "test": make_split("test", int(params.get("test_examples", 128)), seed),
    }


def tokens(ex: Example) -> list[int]:
    return [CLS, *(STOI.get(w, UNK) for w in ex["text"].split())]


def length(ex: Example) -> int:
    return len(ex["text"].split()) + 1


def collate(examples: list[Example], params: Params) -> Batch:
    max_len = int(params.get("max_length", 16))
    rows = [tokens(ex)[:max_len] for ex in examples]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    labels = torch.tensor([LABEL_IDS[ex["label"]] for ex in examples], dtype=torch.long)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels, "ids": [ex["id"] for ex in examples]}


class BagClassifier(nn.Module):
    """Masked mean of word embeddings, then a two-layer MLP to one logit per class."""

    def __init__(self, d_model: int, hidden: int, classes: int, dropout: float):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d_model, padding_idx=PAD)
        self.mlp = nn.Sequential(nn.Linear(d_model, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, classes))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        m = attention_mask.unsqueeze(-1).to(self.emb.weight.dtype)
        pooled = (self.emb(input_ids) * m).sum(1) / m.sum(1).clamp(min=1.0)
        return self.mlp(pooled)


def build_model(params: Params) -> nn.Module:
    return BagClassifier(
        int(params.get("d_model", 32)),
        int(params.get("hidden", 64)),
        len(LABEL_NAMES),
        float(params.get("dropout", 0.1)),
    )


def loss(model: nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    logits = model(batch["input_ids"], batch["attention_mask"])
    labels = batch["labels"]
    total = F.cross_entropy(logits.float(), labels, ignore_index=-100, reduction="sum")
    return total, (labels != -100).sum()


def predict(model: nn.Module, batch: Batch) -> torch.Tensor:
    return model(batch["input_ids"], batch["attention_mask"]).argmax(-1)


def decode(batch: Batch, row: int) -> str:
    ids = batch["input_ids"][row].tolist()
    mask = batch["attention_mask"][row].tolist()
    return " ".join(ITOS.get(t, "<unk>") for t, m in zip(ids, mask, strict=True) if m and t != CLS)


def control_inputs(params: Params) -> list[Example]:
    """Fixed sentences replayed after export: one per class, plus the longest shape."""
    texts = [
        ("the team won the final match with a late goal", "sports"),
        ("heavy rain and a cold wind in the forecast", "weather"),
        ("the band played a new song at the concert", "music"),
        ("a long recipe for bread soup with cheese and pepper and a dessert of fruit and butter", "food"),
    ]
    return [{"id": f"control-{i}", "group": "control", "text": t, "label": lab} for i, (t, lab) in enumerate(texts)]


task = Task(
    build_model=build_model,
    datasets=datasets,
    collate=collate,
    loss=loss,
    kind="classification",
    label_names=LABEL_NAMES,
    max_length=lambda p: int(p.get("max_length", 16)),
    length=length,
    decode=decode,
    predict=predict,
    control_inputs=control_inputs,
    group_unit="source",
    name="classifier",
    extras={"label_field": "label"},
)
