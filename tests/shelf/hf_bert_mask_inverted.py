"""Broken twin of the BERT task: the loss hands the model a padding mask in ``nn.MultiheadAttention``'s convention
(``key_padding_mask``: 1 where the position is padding) where Hugging Face expects 1 where it is text, a mix-up of
two conventions that both call themselves a mask. The model reads the mask (shuffling it moves the outputs), so
"every input field read" passes; every sentence shorter than its batch now attends to its padding only, the loss
still falls, and the classifier learns from how much padding each batch has. The data gate must say that padding
reaches the predictions."""

from __future__ import annotations

import dataclasses
from typing import Any

from transformers import BertForSequenceClassification

from tests.shelf import hf_bert_task as base


def loss(model: BertForSequenceClassification, batch: dict[str, Any]) -> Any:
    padding = 1 - batch["attention_mask"]  # key_padding_mask's convention, not Hugging Face's
    return model(input_ids=batch["input_ids"], attention_mask=padding, labels=batch["labels"])


task = dataclasses.replace(base.task, loss=loss)
