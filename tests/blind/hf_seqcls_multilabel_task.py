"""Multi-label text classification through ``cockpit.integrations.hf.sequence_classification``, as the Bring
your code page reads: a BERT config with ``problem_type="multi_label_classification"`` and ``id2label``, the label
of each example a multi-hot list of floats (what the transformers multi-label recipe feeds the model)."""

from __future__ import annotations

from typing import Any

from transformers import BertConfig

from cockpit.integrations import hf
from tests.blind.hf_bert_multilabel_task import TAGS, datasets
from tests.shelf.synthetic import PAD, VOCAB, char_tokenizer


def data(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {
        s: [{"id": e["id"], "text": " ".join(e["words"]), "label": e["tags"]} for e in rows]
        for s, rows in datasets(params).items()
    }


task = hf.sequence_classification(
    model=BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        pad_token_id=PAD,
        num_labels=len(TAGS),
        id2label=dict(enumerate(TAGS)),
        label2id={t: i for i, t in enumerate(TAGS)},
        problem_type="multi_label_classification",
    ),
    tokenizer=char_tokenizer(),
    data=data,
    text="text",
    label="label",
    max_length=64,
    group_unit="sentence",
)
